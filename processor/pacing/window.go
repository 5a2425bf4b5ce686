package pacing

// windowSlots is how many seconds a number's window holds, a power of two:
// the 60 s of the longest rate, ending PacingSettle and one second before
// the clock (PacingLastSecond), plus the seconds an event may be stamped
// ahead of the clock and still count there (stage 2's maxAhead, 2): 65
// seconds, which 64 slots could not hold, so that one event 2 s ahead took
// a second out of the 60 s rate.
const windowSlots = 128

// window counts a number's messages per second by Meta's timestamp over
// the last 128 seconds. A late webhook counts into the second it belongs
// to while that second is still held (and the Deduper holds it); older
// ones are left to ClickHouse's history. 1 KiB.
type window struct {
	head    int64 // the newest second held; 0 before the first count
	in, out [windowSlots]uint32
}

// add counts in inbound and out outbound messages at second sec. It
// reports false when sec is older than the window holds.
func (w *window) add(sec int64, in, out uint32) bool {
	if w.head == 0 {
		w.head = sec
	}
	if sec > w.head {
		w.advance(sec)
	}
	if sec <= w.head-windowSlots {
		return false
	}
	i := sec & (windowSlots - 1)
	w.in[i] += in
	w.out[i] += out
	return true
}

// move moves one outbound message from second from to second to, as far
// as the window holds them. It reports whether it changed a count.
func (w *window) move(from, to int64) bool {
	changed := false
	if from <= w.head && from > w.head-windowSlots && w.out[from&(windowSlots-1)] > 0 {
		w.out[from&(windowSlots-1)]--
		changed = true
	}
	if to <= w.head && to > w.head-windowSlots {
		w.out[to&(windowSlots-1)]++
		changed = true
	}
	return changed
}

// advance moves the newest second to sec, clearing the seconds between.
func (w *window) advance(sec int64) {
	if sec <= w.head {
		return
	}
	n := min(sec-w.head, windowSlots)
	for s := sec - n + 1; s <= sec; s++ {
		w.in[s&(windowSlots-1)], w.out[s&(windowSlots-1)] = 0, 0
	}
	w.head = sec
}

// sum counts the messages of the span seconds ending with second last
// (inclusive). Seconds newer than the window's head count as empty.
func (w *window) sum(last int64, span int) (in, out uint64) {
	for s := last - int64(span) + 1; s <= last; s++ {
		if s > w.head || s <= w.head-windowSlots {
			continue
		}
		in += uint64(w.in[s&(windowSlots-1)])
		out += uint64(w.out[s&(windowSlots-1)])
	}
	return in, out
}

// errWindow counts error occurrences by class over the last 60 s, by the
// second: an entry per second and class that had errors, so that "the last
// 60 s" is exactly that (ten-second buckets made it 51 to 60 s) and a
// number without errors holds none. At most 60 seconds times the classes.
type errWindow struct {
	newest  int64 // the newest second added
	entries []errEntry
}

type errEntry struct {
	sec   int64
	class uint8
	n     uint16
}

// errSpan is the window's length in seconds.
const errSpan = 60

func (e *errWindow) add(sec int64, class int) {
	if sec <= e.newest-errSpan {
		return // older than the window
	}
	if sec > e.newest {
		e.newest = sec
		keep := e.entries[:0]
		for _, x := range e.entries {
			if x.sec > sec-errSpan {
				keep = append(keep, x)
			}
		}
		clear(e.entries[len(keep):])
		e.entries = keep
	}
	for i := range e.entries {
		if x := &e.entries[i]; x.sec == sec && int(x.class) == class {
			if x.n < 65535 {
				x.n++
			}
			return
		}
	}
	e.entries = append(e.entries, errEntry{sec: sec, class: uint8(class), n: 1})
}

// last60 is the count of class over the 60 s ending at second now: the
// seconds now-59 to now.
func (e *errWindow) last60(now int64, class int) int {
	n := 0
	for _, x := range e.entries {
		if int(x.class) == class && x.sec > now-errSpan && x.sec <= now {
			n += int(x.n)
		}
	}
	return n
}

package pacing

// slots is how many seconds a window holds: the 60 s of the longest rate
// and a few of lateness.
const slots = 64

// window counts a number's messages per second by Meta's timestamp over
// the last 64 seconds. A late webhook counts into the second it belongs to
// while that second is still held; older ones are left to ClickHouse's
// history. 512 bytes.
type window struct {
	head    int64 // the newest second held; 0 before the first count
	in, out [slots]uint32
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
	if sec <= w.head-slots {
		return false
	}
	i := sec & (slots - 1)
	w.in[i] += in
	w.out[i] += out
	return true
}

// move moves one outbound message from second from to second to, as far
// as the window holds them. It reports whether it changed a count.
func (w *window) move(from, to int64) bool {
	changed := false
	if from <= w.head && from > w.head-slots && w.out[from&(slots-1)] > 0 {
		w.out[from&(slots-1)]--
		changed = true
	}
	if to <= w.head && to > w.head-slots {
		w.out[to&(slots-1)]++
		changed = true
	}
	return changed
}

// advance moves the newest second to sec, clearing the seconds between.
func (w *window) advance(sec int64) {
	if sec <= w.head {
		return
	}
	n := min(sec-w.head, slots)
	for s := sec - n + 1; s <= sec; s++ {
		w.in[s&(slots-1)], w.out[s&(slots-1)] = 0, 0
	}
	w.head = sec
}

// sum counts the messages of the span seconds ending with second last
// (inclusive). Seconds newer than the window's head count as empty.
func (w *window) sum(last int64, span int) (in, out uint64) {
	for s := last - int64(span) + 1; s <= last; s++ {
		if s > w.head || s <= w.head-slots {
			continue
		}
		in += uint64(w.in[s&(slots-1)])
		out += uint64(w.out[s&(slots-1)])
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

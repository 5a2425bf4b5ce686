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

// errWindow counts error occurrences by class over the last 60 s in six
// buckets of 10 s. 200 bytes.
type errWindow struct {
	head   int64 // newest 10-second bucket held (unix seconds / 10)
	counts [6][numClasses]uint16
}

func (e *errWindow) add(sec int64, class int) {
	b := sec / 10
	if b > e.head {
		n := min(b-e.head, 6)
		for x := b - n + 1; x <= b; x++ {
			e.counts[x%6] = [numClasses]uint16{}
		}
		e.head = b
	}
	if b <= e.head-6 {
		return
	}
	if c := &e.counts[b%6][class]; *c < 65535 {
		*c++
	}
}

// last60 is the count of class over the 60 s ending at second now.
func (e *errWindow) last60(now int64, class int) int {
	b := now / 10
	n := 0
	for x := b - 5; x <= b; x++ {
		if x > e.head || x <= e.head-6 {
			continue
		}
		n += int(e.counts[x%6][class])
	}
	return n
}

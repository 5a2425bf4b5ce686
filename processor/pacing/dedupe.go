package pacing

import "hash/maphash"

// Deduper remembers the event ids of the last 64 seconds of Meta's time,
// so that an event delivered twice (a redelivery, a replay, Meta's retry in
// another body) counts once in the windows. It is one per stage 2
// instance, sized by the traffic (16 bytes or so per event of the last
// minute), not per number.
type Deduper struct {
	seed    maphash.Seed
	head    int64
	buckets [slots]map[uint64]struct{}
	// msgs are the keys of SeenMessage with their second, whatever
	// second they come again at; msgSlots lists them by second, to forget
	// them when their second leaves the window.
	msgs     map[uint64]int64
	msgSlots [slots][]uint64
}

// NewDeduper is an empty Deduper.
func NewDeduper() *Deduper { return &Deduper{seed: maphash.MakeSeed(), msgs: map[uint64]int64{}} }

// advance moves the window's head to at, forgetting the seconds it leaves.
func (d *Deduper) advance(at int64) {
	if at <= d.head {
		return
	}
	n := min(at-d.head, slots)
	if d.head == 0 {
		n = 1
	}
	for s := at - n + 1; s <= at; s++ {
		i := s & (slots - 1)
		d.buckets[i] = nil
		for _, h := range d.msgSlots[i] {
			if d.msgs[h] <= s-slots {
				delete(d.msgs, h)
			}
		}
		d.msgSlots[i] = d.msgSlots[i][:0]
	}
	d.head = at
}

// SeenMessage reports whether key was seen before at any second of the
// window, and remembers it at second at: a message sent counts once
// whether its send result or its sent status, a second apart or more,
// comes first. Keys older than the window are reported as seen.
func (d *Deduper) SeenMessage(key string, at int64) bool {
	d.advance(at)
	if at <= d.head-slots {
		return true
	}
	h := maphash.String(d.seed, key)
	if _, ok := d.msgs[h]; ok {
		return true
	}
	d.msgs[h] = at
	i := at & (slots - 1)
	d.msgSlots[i] = append(d.msgSlots[i], h)
	return false
}

// Seen reports whether id was seen before at second at, and remembers it.
// Events older than the window are reported as seen: the windows no longer
// hold their second.
func (d *Deduper) Seen(id string, at int64) bool {
	d.advance(at)
	if at <= d.head-slots {
		return true
	}
	b := &d.buckets[at&(slots-1)]
	if *b == nil {
		*b = map[uint64]struct{}{}
	}
	h := maphash.String(d.seed, id)
	if _, ok := (*b)[h]; ok {
		return true
	}
	(*b)[h] = struct{}{}
	return false
}

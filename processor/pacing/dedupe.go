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
}

// NewDeduper is an empty Deduper.
func NewDeduper() *Deduper { return &Deduper{seed: maphash.MakeSeed()} }

// Seen reports whether id was seen before at second at, and remembers it.
// Events older than the window are reported as seen: the windows no longer
// hold their second.
func (d *Deduper) Seen(id string, at int64) bool {
	if at > d.head {
		n := min(at-d.head, slots)
		if d.head == 0 {
			n = 1
		}
		for s := at - n + 1; s <= at; s++ {
			d.buckets[s&(slots-1)] = nil
		}
		d.head = at
	}
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

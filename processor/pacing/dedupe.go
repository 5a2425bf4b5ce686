package pacing

import (
	"hash/maphash"
	"time"
)

// Deduper remembers the event ids of the last 64 seconds of Meta's time,
// so that an event delivered twice (a redelivery, a replay, Meta's retry in
// another body) counts once in the windows, and the messages whose
// evidence it has seen for longer (the message memory, 10 minutes by
// default), so that a message counts once whatever evidence of it comes
// first and however late the rest comes within that memory. It is one per
// stage 2 instance, sized by the traffic (16 bytes or so per event of the
// last minute, and some 40 per message of the memory), not per number.
type Deduper struct {
	seed    maphash.Seed
	head    int64
	buckets [slots]map[uint64]struct{}
	// msgs are the keys of SeenMessage with their second, whatever
	// second they come again at; msgSlots lists them by second (modulo
	// msgSpan), to forget them msgSpan seconds later.
	msgs     map[uint64]int64
	msgSlots [][]uint64
	msgSpan  int64
}

// DefaultMessageMemory is how long a Deduper remembers a message by
// default: statuses that come later than that after a message's first
// evidence (a read hours later) would count it again.
const DefaultMessageMemory = 10 * time.Minute

// NewDeduper is an empty Deduper with the default message memory.
func NewDeduper() *Deduper { return NewDeduperFor(DefaultMessageMemory) }

// NewDeduperFor is an empty Deduper that remembers messages for memory, at
// least the 64 seconds of the windows.
func NewDeduperFor(memory time.Duration) *Deduper {
	span := max(int64(memory/time.Second), slots)
	return &Deduper{seed: maphash.MakeSeed(), msgs: map[uint64]int64{}, msgSlots: make([][]uint64, span), msgSpan: span}
}

// advance moves the window's head to at, forgetting the seconds it leaves.
func (d *Deduper) advance(at int64) {
	if at <= d.head {
		return
	}
	first := d.head == 0
	n := min(at-d.head, slots)
	if first {
		n = 1
	}
	for s := at - n + 1; s <= at; s++ {
		d.buckets[s&(slots-1)] = nil
	}
	n = min(at-d.head, d.msgSpan)
	if first {
		n = 1
	}
	for s := at - n + 1; s <= at; s++ {
		i := s % d.msgSpan
		for _, h := range d.msgSlots[i] {
			if d.msgs[h] <= s-d.msgSpan {
				delete(d.msgs, h)
			}
		}
		d.msgSlots[i] = d.msgSlots[i][:0]
	}
	d.head = at
}

// SeenMessage reports whether key (a message id) was seen before within
// the message memory, and remembers it at second at: a message counts
// once whether its send result or any of its statuses comes first, and
// whatever comes of it later within the memory. Keys at seconds older
// than the windows are reported as seen.
func (d *Deduper) SeenMessage(key string, at int64) bool {
	seen, _ := d.FirstEvidence(key, at)
	return seen
}

// FirstEvidence is SeenMessage that also gives the second the message
// counts at: the earliest evidence of it seen so far. When evidence earlier
// than that comes later (a sent status retried after its delivered), the
// message's second becomes at, and the caller moves its count from the
// second returned to at.
func (d *Deduper) FirstEvidence(key string, at int64) (seen bool, counted int64) {
	d.advance(at)
	if at <= d.head-slots {
		return true, at
	}
	h := maphash.String(d.seed, key)
	if was, ok := d.msgs[h]; ok {
		if at < was {
			// Listed still under its first second, which forgets it
			// later than at's would: remembered a little longer.
			d.msgs[h] = at
		}
		return true, was
	}
	d.msgs[h] = at
	i := at % d.msgSpan
	d.msgSlots[i] = append(d.msgSlots[i], h)
	return false, at
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

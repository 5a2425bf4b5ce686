package pacing

import (
	"cmp"
	"hash/maphash"
	"math/bits"
	"slices"
	"time"
)

// slots is the length in seconds of the Deduper's window (and of its
// epochs): the 60 s of the longest rate and a few of lateness.
const slots = 64

// Deduper remembers the event ids of the last 64 seconds of Meta's time,
// so that an event delivered twice (a redelivery, a replay, Meta's retry in
// another body) counts once in the windows, and the messages whose
// evidence it has seen for longer (the message memory, 10 minutes by
// default), so that a message counts once whatever evidence of it comes
// first and however late the rest comes within that memory. It is one per
// stage 2 instance, sized by the traffic (some 30 bytes per event of the
// last minute, and some 10 per message of the memory, 30 for those of the
// last two minutes), not per number.
//
// The message memory is kept by epochs of 64 seconds of Meta's time (the
// deduper's window). The messages first seen in the head's epoch and the one
// before it, which hold every second the deduper's window does, are a map to the
// second each counts at; an earlier epoch's are a sorted set of their
// hashes (8 bytes and a little index each instead of the map's 30 or so),
// kept until the epoch's last second is older than the memory. A message
// is so remembered for at least the memory after its first evidence, and at
// most 64 seconds longer.
type Deduper struct {
	seed    maphash.Seed
	head    int64
	buckets [slots]map[uint64]struct{}
	// young[e&1] holds the messages first seen in epoch e (youngEpoch),
	// with the earliest second of their evidence.
	young      [2]map[uint64]int64
	youngEpoch [2]int64
	// old are the earlier epochs within the memory, oldest first.
	old  []hashSet
	span int64
	// ahead holds the ids of events stamped ahead of the clock (SeenAhead),
	// by hash, with their own second, until the windows leave it.
	ahead map[uint64]int64
	// earlier holds, by epoch, the messages RememberEarlier took for the
	// epochs kept as sorted sets, until FlushEarlier adds them to those.
	earlier map[int64]map[uint64]int64
}

// maxAhead bounds the ids SeenAhead remembers: past it, an event stamped
// ahead of the clock is no longer told from its repeats (a sender stamping
// every event far ahead).
const maxAhead = 100_000

// epochBits: an epoch of the message memory is 1<<epochBits seconds, the
// windows' length, so that the windows' seconds lie in two epochs.
const epochBits = 6

// DefaultMessageMemory is how long a Deduper remembers a message by
// default: statuses that come later than that after a message's first
// evidence (a read hours later) would count it again.
const DefaultMessageMemory = 10 * time.Minute

// NewDeduper is an empty Deduper with the default message memory.
func NewDeduper() *Deduper { return NewDeduperFor(DefaultMessageMemory) }

// NewDeduperFor is an empty Deduper that remembers messages for memory, at
// least the deduper's 64 seconds.
func NewDeduperFor(memory time.Duration) *Deduper {
	span := max(int64(memory/time.Second), slots)
	// The young maps start as epochs 0 and -1 (seconds at and before 0:
	// no event of Meta's has them, but one may come); the first head of
	// another epoch ages them like any other.
	return &Deduper{seed: maphash.MakeSeed(), span: span, young: [2]map[uint64]int64{{}, {}}, youngEpoch: [2]int64{0, -1}}
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
	d.head = at
	if e := at >> epochBits; d.youngEpoch[e&1] != e {
		d.age(e)
		if len(d.ahead) > 0 {
			d.forgetAhead()
		}
	}
	drop := 0
	for drop < len(d.old) && !d.remembers(d.old[drop].epoch) {
		drop++
	}
	if drop > 0 {
		d.old = slices.Delete(d.old, 0, drop)
	}
}

// age makes e the head's epoch: the young epochs before e-1 become sets
// of hashes (oldest first), unless they are older than the memory.
func (d *Deduper) age(e int64) {
	a, b := e&1, (e-1)&1 // the slots of e and e-1
	// Freeze the older of the two first, so that old stays in order.
	order := [2]int64{a, b}
	if d.youngEpoch[b] < d.youngEpoch[a] {
		order = [2]int64{b, a}
	}
	for _, i := range order {
		want := e
		if i == b {
			want = e - 1
		}
		if d.youngEpoch[i] == want {
			continue
		}
		if m := d.young[i]; len(m) > 0 && d.remembers(d.youngEpoch[i]) {
			d.old = append(d.old, newHashSet(d.youngEpoch[i], m))
		}
		clear(d.young[i])
		d.youngEpoch[i] = want
	}
}

// remembers reports whether the messages first seen in epoch are still
// within the memory: the epoch's last second is not older than it.
func (d *Deduper) remembers(epoch int64) bool {
	return epoch<<epochBits+1<<epochBits-1 > d.head-d.span
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
// counts at: the earliest evidence of it seen so far (for a message first
// seen before the windows, a second before them). When evidence earlier
// than that comes later (a sent status retried after its delivered), the
// message's second becomes at, and the caller moves its count from the
// second returned to at.
func (d *Deduper) FirstEvidence(key string, at int64) (seen bool, counted int64) {
	d.advance(at)
	if at <= d.head-slots {
		return true, at
	}
	h := maphash.String(d.seed, key)
	for _, m := range d.young {
		if was, ok := m[h]; ok {
			if at < was {
				// Kept still in its first epoch, which forgets it
				// no sooner than at's would: remembered a little longer.
				m[h] = at
			}
			return true, was
		}
	}
	for i := len(d.old) - 1; i >= 0; i-- {
		if d.old[i].has(h) {
			return true, d.old[i].epoch<<epochBits + 1<<epochBits - 1
		}
	}
	d.young[(at>>epochBits)&1][h] = at
	return false, at
}

// RememberEarlier is FirstEvidence for reading a message memory back
// (stage 2's warm-up) into a Deduper whose head has moved on: a member
// that takes partitions over, or joins again, while it handles events.
// FirstEvidence takes evidence older than the windows for seen and keeps
// nothing of it; at a start, with the head at the first event read back,
// that never happens, but once the head is at the clock every message read
// back but those of the last minute was lost, and its later statuses
// counted it again. RememberEarlier keeps such a message in the epoch of
// its second, if the memory still holds that epoch, and reports whether
// the message was new to the memory. The messages kept so in the epochs
// held as sorted sets are found once FlushEarlier has added them: call it
// when the read-back ends.
func (d *Deduper) RememberEarlier(key string, at int64) bool {
	if at > d.head-slots {
		seen, _ := d.FirstEvidence(key, at)
		return !seen
	}
	e := at >> epochBits
	if !d.remembers(e) {
		return false
	}
	h := maphash.String(d.seed, key)
	for _, m := range d.young {
		if _, ok := m[h]; ok {
			return false
		}
	}
	for i := range d.old {
		if d.old[i].has(h) {
			return false
		}
	}
	if d.youngEpoch[e&1] == e {
		d.young[e&1][h] = at
		return true
	}
	if d.earlier == nil {
		d.earlier = map[int64]map[uint64]int64{}
	}
	m := d.earlier[e]
	if m == nil {
		m = map[uint64]int64{}
		d.earlier[e] = m
	}
	if _, ok := m[h]; ok {
		return false
	}
	m[h] = at
	return true
}

// FlushEarlier adds the messages RememberEarlier kept to the epochs they
// belong to (each epoch's set built again once, with them), the epochs
// the memory has left since excepted.
func (d *Deduper) FlushEarlier() {
	for e, m := range d.earlier {
		if !d.remembers(e) {
			continue
		}
		i, found := slices.BinarySearchFunc(d.old, e, func(s hashSet, e int64) int { return cmp.Compare(s.epoch, e) })
		if found {
			for _, k := range d.old[i].keys {
				m[k] = 0
			}
			d.old[i] = newHashSet(e, m)
		} else {
			d.old = slices.Insert(d.old, i, newHashSet(e, m))
		}
	}
	d.earlier = nil
}

// messages is how many messages the memory holds.
func (d *Deduper) messages() int {
	n := len(d.young[0]) + len(d.young[1])
	for _, s := range d.old {
		n += len(s.keys)
	}
	return n
}

// hashSet is a sorted set of 64-bit hashes with an index of where each
// value of their top bits starts: a lookup reads one entry of the index
// and a few neighbouring keys.
type hashSet struct {
	epoch int64
	keys  []uint64
	// start[b] is the first key whose top bits are at least b.
	start []uint32
	shift uint
}

func newHashSet(epoch int64, m map[uint64]int64) hashSet {
	keys := make([]uint64, 0, len(m))
	for h := range m {
		keys = append(keys, h)
	}
	slices.Sort(keys)
	width := bits.Len(uint(len(keys) / 8)) // about 4 to 8 keys per bucket
	start := make([]uint32, 1<<width+1)
	shift := uint(64 - width)
	b := 0
	for i, k := range keys {
		for kb := int(k >> shift); b <= kb; b++ {
			start[b] = uint32(i)
		}
	}
	for ; b < len(start); b++ {
		start[b] = uint32(len(keys))
	}
	return hashSet{epoch: epoch, keys: keys, start: start, shift: shift}
}

func (s *hashSet) has(h uint64) bool {
	b := h >> s.shift
	for _, k := range s.keys[s.start[b]:s.start[b+1]] {
		if k >= h {
			return k == h
		}
	}
	return false
}

// SeenAhead is Seen for an event stamped at, a second ahead of the clock
// that the caller counts it at instead (clamped): its id is remembered by
// itself, not by a second, so that a repeat of it counted at another
// second of the clock, or at its own once the clock has reached it (Seen
// looks here too), is seen, until the windows leave at.
func (d *Deduper) SeenAhead(id string, at int64) bool {
	h := maphash.String(d.seed, id)
	if _, ok := d.ahead[h]; ok {
		return true
	}
	if d.ahead == nil {
		d.ahead = map[uint64]int64{}
	}
	if len(d.ahead) < maxAhead {
		d.ahead[h] = at
	}
	return false
}

// forgetAhead forgets the ids ahead whose second the windows have left.
func (d *Deduper) forgetAhead() {
	for h, at := range d.ahead {
		if at <= d.head-slots {
			delete(d.ahead, h)
		}
	}
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
	if _, ok := d.ahead[h]; ok {
		return true // counted when it was ahead of the clock
	}
	(*b)[h] = struct{}{}
	return false
}

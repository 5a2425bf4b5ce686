package ingest

import (
	"encoding/binary"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// dupIndex remembers the ids of the bodies the RAW stream acknowledged, so
// that a Meta retry of one within the window is answered 200 at once,
// without a publish. It exists because the stream's own duplicate window
// cannot be long (StreamConfig.DuplicateWindow): nats-server keeps each id
// it remembers as a few hundred bytes of pointers on its heap, which its
// garbage collector marks every cycle. Here an id is 16 bytes in a table
// without pointers, outside the Go heap where the platform allows it
// (dedupe_mmap.go), so that the collector neither scans it nor counts it
// towards its heap goal.
//
// The key is the first 16 bytes of the body's SHA-256: a false hit would
// answer 200 for a body never stored, and at 2^-128 per pair of bodies it
// does not happen.
//
// Ids live in dupGenerations generations per shard, each taking the ids
// added during one span of window/(dupGenerations-1); the generation of
// epoch e is dropped whole when epoch e+dupGenerations begins. So an id is
// remembered at least the window and at most a span longer, and a lookup
// checks the live generations of one shard. Shards have their own lock;
// rotation happens on access, so nothing runs in the background.
//
// A cap on the ids held (per shard, maxEntries/dupShards) drops the oldest
// generation early. That only weakens the detection of duplicates: a retry
// of a forgotten body is published, and the stream or downstream
// deduplication (every event has a deterministic id) absorbs it.
type dupIndex struct {
	// st is a separate object so that a cleanup attached to the index can
	// free the tables once nothing can reach the index any more.
	st *dupState
}

const (
	// dupGenerations is k: k generations of window/(k-1) each. A larger
	// k holds less memory past the window (a fraction 1/(k-1)) but costs
	// a probe of one more table on every lookup that misses, which is
	// nearly every lookup.
	dupGenerations = 5
	// dupShards is the number of independently locked shards.
	dupShards = 64
	// A table doubles once it is four fifths full; a new generation starts
	// sized for its predecessor's ids at seven tenths full, so that under
	// steady traffic only the first generation grows (in 8 s bench rounds,
	// all ramp-up, growing by half at a time took 1.3% of serve's CPU).
	// Linear probing over uniform keys needs about 13 probes (3 to 4 cache
	// lines) for a miss at 0.8 and 5 at 0.7.
	dupMaxLoadNum, dupMaxLoadDen = 4, 5
	dupFillNum, dupFillDen       = 10, 7
	// dupMinSlots is a page of slots.
	dupMinSlots = 256
)

// dupKey is the first 16 bytes of a body's SHA-256; all zero marks an empty
// slot, so that body (one in 2^128) is never remembered.
type dupKey [16]byte

type dupState struct {
	span     time.Duration
	shardMax int
	now      func() time.Time
	base     time.Time
	evicted  atomic.Uint64 // ids dropped early for the cap
	shards   [dupShards]dupShard
}

type dupShard struct {
	dupShardState
	// Shards sit side by side: the padding keeps one shard's lock off the
	// cache line of its neighbour's tables.
	_ [64 - unsafe.Sizeof(dupShardState{})%64]byte
}

type dupShardState struct {
	mu    sync.Mutex
	epoch int64 // the current generation's
	n     int   // ids over all generations
	gens  [dupGenerations]dupTable
	spare []dupKey // the table of the generation dropped last, for reuse
	touch byte     // keeps seen's early loads from being optimised away
}

// dupTable is one generation: an open-addressing table with linear probing.
type dupTable struct {
	slots []dupKey // from allocSlots; nil when the generation is not live
	n     int
	epoch int64
}

// newDupIndex returns an index that remembers an id at least window and
// holds at most about maxEntries ids.
func newDupIndex(window time.Duration, maxEntries int) *dupIndex {
	st := &dupState{
		span:     window / (dupGenerations - 1),
		shardMax: max((maxEntries+dupShards-1)/dupShards, 1),
		now:      time.Now,
	}
	st.base = st.now()
	x := &dupIndex{st: st}
	runtime.AddCleanup(x, func(st *dupState) { st.release() }, st)
	return x
}

// setClock makes the index read time from now, for tests; call it before
// any other method.
func (x *dupIndex) setClock(now func() time.Time) {
	x.st.now = now
	x.st.base = now()
}

// seen reports whether the body whose SHA-256 is sum was added (its ack
// came) within the window.
func (x *dupIndex) seen(sum *[32]byte) bool {
	k := dupKey(sum[:16])
	if k == (dupKey{}) {
		return false
	}
	st := x.st
	e := st.epochNow()
	s, h := st.shard(&k)
	s.mu.Lock()
	s.advance(e)
	// Read each table's first slot before probing any: the loads, each
	// most likely a cache miss, go out together instead of one after the
	// other.
	var touch byte
	for i := range s.gens {
		if t := &s.gens[i]; t.n > 0 {
			touch ^= t.slots[t.pos(h)][0]
		}
	}
	s.touch = touch
	hit := false
	for i := range s.gens {
		if t := &s.gens[i]; t.n > 0 && t.has(&k, h) {
			hit = true
			break
		}
	}
	s.mu.Unlock()
	runtime.KeepAlive(x)
	return hit
}

// add remembers the body whose SHA-256 is sum; call it only once the stream
// has acknowledged the body. It returns the ids it forgot early for the cap
// (0 nearly always).
func (x *dupIndex) add(sum *[32]byte) (evicted int) {
	k := dupKey(sum[:16])
	if k == (dupKey{}) {
		return 0
	}
	st := x.st
	e := st.epochNow()
	s, h := st.shard(&k)
	s.mu.Lock()
	s.advance(e)
	cur := &s.gens[e%dupGenerations]
	if s.n >= st.shardMax && !(cur.slots != nil && cur.has(&k, h)) {
		evicted = s.dropOldest()
	}
	if cur.slots == nil {
		// Sized for as many ids as the previous generation took.
		hint := 0
		if prev := &s.gens[(e+dupGenerations-1)%dupGenerations]; prev.slots != nil && prev.epoch == e-1 {
			hint = prev.n
		}
		cur.slots, cur.n, cur.epoch = s.table(max(hint*dupFillNum/dupFillDen, dupMinSlots)), 0, e
	}
	if (cur.n+1)*dupMaxLoadDen > len(cur.slots)*dupMaxLoadNum {
		cur.grow()
	}
	if cur.insert(&k, h) {
		s.n++
	}
	s.mu.Unlock()
	runtime.KeepAlive(x)
	if evicted > 0 {
		st.evicted.Add(uint64(evicted))
	}
	return evicted
}

// stats returns the ids held and the bytes of their tables.
func (x *dupIndex) stats() (entries int, bytes int64) {
	st := x.st
	e := st.epochNow()
	for i := range st.shards {
		s := &st.shards[i]
		s.mu.Lock()
		s.advance(e) // a shard nobody asked since the window passed
		entries += s.n
		for j := range s.gens {
			bytes += int64(len(s.gens[j].slots)) * int64(unsafe.Sizeof(dupKey{}))
		}
		bytes += int64(len(s.spare)) * int64(unsafe.Sizeof(dupKey{}))
		s.mu.Unlock()
	}
	runtime.KeepAlive(x)
	return entries, bytes
}

// evictions returns the ids dropped early for the cap so far.
func (x *dupIndex) evictions() uint64 { return x.st.evicted.Load() }

func (st *dupState) epochNow() int64 {
	return int64(max(st.now().Sub(st.base), 0) / st.span)
}

// shard returns k's shard and the hash that places k in a table. The key is
// a cryptographic hash already: its bytes are used as they are.
func (st *dupState) shard(k *dupKey) (*dupShard, uint64) {
	return &st.shards[binary.LittleEndian.Uint64(k[:8])%dupShards], binary.LittleEndian.Uint64(k[8:])
}

// release frees every table; nothing may use the index after it.
func (st *dupState) release() {
	for i := range st.shards {
		s := &st.shards[i]
		s.mu.Lock()
		for j := range s.gens {
			s.gens[j].release()
		}
		if s.spare != nil {
			freeSlots(s.spare)
			s.spare = nil
		}
		s.n = 0
		s.mu.Unlock()
	}
}

// advance drops the generations that epoch e ends. The last one dropped is
// kept as the spare table.
func (s *dupShard) advance(e int64) {
	if e <= s.epoch {
		return
	}
	for i := range s.gens {
		if t := &s.gens[i]; t.slots != nil && t.epoch <= e-dupGenerations {
			s.n -= t.n
			if s.spare != nil {
				freeSlots(s.spare)
			}
			s.spare, t.slots, t.n = t.slots, nil, 0
		}
	}
	s.epoch = e
}

// table returns an empty table of at least n slots: the spare one, cleared,
// when its size fits, else a new one. Under steady traffic each generation
// takes over the table of the one dropped before it: unmapping and mapping
// tables (with a page fault for each page written) cost this VM ~0.3 ms per
// shard and generation, clearing one ~10 µs.
func (s *dupShard) table(n int) []dupKey {
	if sp := s.spare; sp != nil {
		s.spare = nil
		if len(sp) >= n && len(sp) <= n+n/2 {
			clear(sp)
			return sp
		}
		freeSlots(sp)
	}
	return allocSlots(n)
}

// dropOldest drops the oldest live generation, the current one if it is
// the only one, and returns how many ids it held.
func (s *dupShard) dropOldest() int {
	var oldest *dupTable
	for i := range s.gens {
		if t := &s.gens[i]; t.slots != nil && (oldest == nil || t.epoch < oldest.epoch) {
			oldest = t
		}
	}
	if oldest == nil {
		return 0
	}
	n := oldest.n
	s.n -= n
	oldest.release()
	return n
}

func (t *dupTable) pos(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *dupTable) has(k *dupKey, h uint64) bool {
	i := t.find(k, h)
	return t.slots[i] == *k
}

// insert adds k unless the table holds it; the table must have an empty
// slot.
func (t *dupTable) insert(k *dupKey, h uint64) bool {
	i := t.find(k, h)
	if t.slots[i] == *k {
		return false
	}
	t.slots[i] = *k
	t.n++
	return true
}

// find returns the slot that holds k, or else the empty slot where its
// probe ends; the table must have an empty slot.
func (t *dupTable) find(k *dupKey, h uint64) int {
	for i := t.pos(h); ; {
		if s := &t.slots[i]; *s == *k || *s == (dupKey{}) {
			return i
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// grow moves the table's ids to one twice as large.
func (t *dupTable) grow() {
	old := t.slots
	t.slots, t.n = allocSlots(2*len(old)), 0
	for i := range old {
		if k := &old[i]; *k != (dupKey{}) {
			t.insert(k, binary.LittleEndian.Uint64(k[8:]))
		}
	}
	freeSlots(old)
}

func (t *dupTable) release() {
	if t.slots != nil {
		freeSlots(t.slots)
	}
	t.slots, t.n = nil, 0
}

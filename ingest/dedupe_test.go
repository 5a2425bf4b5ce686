package ingest

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock for the duplicate index.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestIndex(t testing.TB, window time.Duration, maxEntries int) (*dupIndex, *fakeClock) {
	t.Helper()
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	x := newDupIndex(window, maxEntries)
	x.setClock(c.now)
	return x, c
}

func testSum(i int) *[32]byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	s := sha256.Sum256(b[:])
	return &s
}

// TestDupIndexWindow: an id is remembered at least the window from its
// add, whatever the moment within a generation's span, and forgotten once
// the window and one span have passed.
func TestDupIndexWindow(t *testing.T) {
	const window = 2 * time.Minute
	span := window / (dupGenerations - 1)
	for _, phase := range []time.Duration{0, time.Millisecond, span / 2, span - time.Millisecond} {
		x, c := newTestIndex(t, window, 1_000_000)
		c.advance(3*span + phase)
		id := testSum(1)
		if x.seen(id) {
			t.Fatalf("phase %s: seen before its add", phase)
		}
		x.add(id)
		if !x.seen(id) {
			t.Fatalf("phase %s: not seen right after its add", phase)
		}
		if x.seen(testSum(2)) {
			t.Fatalf("phase %s: another id seen", phase)
		}
		c.advance(window)
		if !x.seen(id) {
			t.Fatalf("phase %s: forgotten at the end of the window", phase)
		}
		c.advance(span)
		if x.seen(id) {
			t.Fatalf("phase %s: still seen a window and a span after its add", phase)
		}
		if n, _ := x.stats(); n != 0 {
			t.Fatalf("phase %s: %d ids held after the window, want 0", phase, n)
		}
	}
}

// TestDupIndexRotation: each span's ids form a generation that is dropped
// whole, with its table, once the window has passed for all of them; an id
// added again (a second ack for one body) is not held twice.
func TestDupIndexRotation(t *testing.T) {
	const window, perSpan = 40 * time.Second, 40_000
	x, c := newTestIndex(t, window, 1_000_000)
	span := window / (dupGenerations - 1)
	for g := 0; g < dupGenerations; g++ {
		for i := 0; i < perSpan; i++ {
			x.add(testSum(g*perSpan + i))
		}
		x.add(testSum(g * perSpan)) // again
		if n, _ := x.stats(); n != (g+1)*perSpan {
			t.Fatalf("after generation %d: %d ids held, want %d", g, n, (g+1)*perSpan)
		}
		c.advance(span)
	}
	// Generation 0 is gone, 1 to 4 are held.
	n, bytes := x.stats()
	if n != (dupGenerations-1)*perSpan {
		t.Fatalf("%d ids held, want %d", n, (dupGenerations-1)*perSpan)
	}
	if x.seen(testSum(0)) || x.seen(testSum(perSpan-1)) {
		t.Fatal("an id of the dropped generation is still seen")
	}
	for i := perSpan; i < dupGenerations*perSpan; i++ {
		if !x.seen(testSum(i)) {
			t.Fatalf("id %d of a live generation is not seen", i)
		}
	}
	// 16 bytes an id at 0.7 full, in page-sized steps.
	if per := float64(bytes) / float64(n); per > 40 {
		t.Errorf("%.1f bytes an id, want about 23 to 27", per)
	}
	// Each shard keeps the table it dropped last, for the next generation.
	c.advance(window + span)
	if n, spare := x.stats(); n != 0 || spare > bytes/(dupGenerations-1) {
		t.Fatalf("after the window: %d ids in %d bytes, want none in at most a generation's %d", n, spare, bytes/(dupGenerations-1))
	}
}

// TestDupIndexCap: at the cap the oldest generation is dropped early and
// counted; the newer ids stay.
func TestDupIndexCap(t *testing.T) {
	const window, maxEntries = 2 * time.Minute, 20_000
	x, c := newTestIndex(t, window, maxEntries)
	span := window / (dupGenerations - 1)
	const first = 15_000
	for i := 0; i < first; i++ {
		x.add(testSum(i))
	}
	c.advance(span)
	for i := first; i < 2*first; i++ {
		x.add(testSum(i))
	}
	n, _ := x.stats()
	if n > maxEntries+dupShards {
		t.Fatalf("%d ids held, want at most the cap %d (and a shard's rounding)", n, maxEntries)
	}
	ev := x.evictions()
	if ev == 0 || int(ev)+n != 2*first {
		t.Fatalf("%d evicted and %d held, want them to make %d", ev, n, 2*first)
	}
	for i := first; i < 2*first; i++ {
		if !x.seen(testSum(i)) {
			t.Fatalf("id %d of the newer generation is not seen", i)
		}
	}
	old := 0
	for i := 0; i < first; i++ {
		if x.seen(testSum(i)) {
			old++
		}
	}
	if old+int(ev) != first {
		t.Fatalf("%d ids of the older generation seen and %d evicted, want %d in all", old, ev, first)
	}
	// One generation alone over the cap drops itself and starts over.
	y, _ := newTestIndex(t, window, maxEntries)
	for i := 0; i < 3*maxEntries; i++ {
		y.add(testSum(i))
	}
	if n, _ := y.stats(); n > maxEntries+dupShards || y.evictions() == 0 {
		t.Fatalf("one generation: %d held, %d evicted; want at most %d held", n, y.evictions(), maxEntries)
	}
	if !y.seen(testSum(3*maxEntries - 1)) {
		t.Fatal("the id added last is not seen")
	}
}

// TestDupIndexGrows: a generation that takes many more ids than the one
// before it grows its tables and keeps every id.
func TestDupIndexGrows(t *testing.T) {
	x, c := newTestIndex(t, time.Minute, 4_000_000)
	for i := 0; i < 100; i++ {
		x.add(testSum(i))
	}
	c.advance(time.Minute / (dupGenerations - 1))
	const n = 200_000
	for i := 100; i < 100+n; i++ {
		x.add(testSum(i))
	}
	for i := 0; i < 100+n; i++ {
		if !x.seen(testSum(i)) {
			t.Fatalf("id %d lost", i)
		}
	}
	held, bytes := x.stats()
	if held != 100+n {
		t.Fatalf("%d held, want %d", held, 100+n)
	}
	if per := float64(bytes) / float64(held); per > 40 {
		t.Errorf("%.1f bytes an id, want at most 40", per)
	}
}

// TestDupIndexZeroKey: the all-zero key marks empty slots and is never
// remembered.
func TestDupIndexZeroKey(t *testing.T) {
	x, _ := newTestIndex(t, time.Minute, 100_000)
	var zero [32]byte
	zero[20] = 1 // beyond the key
	x.add(&zero)
	if x.seen(&zero) {
		t.Fatal("the all-zero key is seen")
	}
	if n, _ := x.stats(); n != 0 {
		t.Fatalf("%d held, want 0", n)
	}
}

// TestDupIndexConcurrent: goroutines add and look up at once while time
// moves on (run with -race).
func TestDupIndexConcurrent(t *testing.T) {
	x, c := newTestIndex(t, 4*time.Second, 100_000)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20_000; i++ {
				id := testSum(w*1_000_000 + i)
				if x.seen(id) {
					t.Errorf("worker %d: id %d seen before its add", w, i)
					return
				}
				x.add(id)
				if !x.seen(id) {
					t.Errorf("worker %d: id %d not seen right after its add", w, i)
					return
				}
				if i%1000 == 0 {
					c.advance(50 * time.Millisecond)
					x.stats()
				}
			}
		}()
	}
	wg.Wait()
}

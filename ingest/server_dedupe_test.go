package ingest_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// testClock is a settable clock for the duplicate index, read from the
// request handlers while the test moves it.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// shortStream is the RAW stream with a 1 s duplicate window, shorter than
// the gaps between the tests' retries.
func shortStream() ingest.StreamConfig {
	sc := ingest.DefaultStreamConfig()
	sc.DuplicateWindow = time.Second
	return sc
}

// pastStreamWindow waits until the stream has forgotten the ids published
// so far. A sleep, not a condition: the window is the subject, and asking
// the stream whether it forgot an id would be a publish. nats-server forgets
// an id on a timer that fires about the window after it (it does not check
// an id's age on lookup), so the sleep leaves that timer a second on a busy
// machine.
func pastStreamWindow() { time.Sleep(2 * time.Second) }

// TestRetryAcrossWindows follows one body through the windows: a retry
// after the stream's window but within the index's is still stored once; a
// retry after the index's window is stored again (the documented limit:
// downstream deduplicates it by event id). Without the index, the retry
// after the stream's window is stored twice, which shows the test reaches
// past the stream's window.
func TestRetryAcrossWindows(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		t.Run("index", func(t *testing.T) {
			h := newHarnessStream(t, cfg, shortStream())
			clock := newTestClock()
			ingest.SetDedupeClock(h.srv, clock.now)
			b := body(12)
			sig := schema.Sign([]byte(secretA), b)
			post := func(step string, wantStored int) {
				t.Helper()
				if r := h.post("/webhook", b, sig); r.status != 200 {
					t.Fatalf("%s: got %d %v, want 200", step, r.status, r.err)
				}
				if got := len(h.stored()); got != wantStored {
					t.Fatalf("%s: stored %d, want %d", step, got, wantStored)
				}
			}
			post("first post", 1)
			pastStreamWindow()
			clock.advance(time.Second)
			post("retry after the stream's window", 1)
			clock.advance(cfg.DedupeWindow - 2*time.Second)
			post("retry at the end of the index's window", 1)
			if got := h.counter("wahook_ingest_duplicates_total", "source", "index"); got != 2 {
				t.Fatalf("duplicates found in the index: got %v, want 2", got)
			}
			// An id is remembered at most a generation's span beyond the
			// window.
			clock.advance(cfg.DedupeWindow/(ingest.DedupeGenerations-1) + time.Second)
			post("retry after the index's window", 2)
			if got := h.counter("wahook_ingest_requests_total", "result", "ok"); got != 2 {
				t.Fatalf("bodies published and stored: got %v, want 2", got)
			}
		})
		t.Run("no index", func(t *testing.T) {
			cfg.DedupeWindow = 0
			h := newHarnessStream(t, cfg, shortStream())
			b := body(12)
			sig := schema.Sign([]byte(secretA), b)
			for i := 0; i < 2; i++ {
				if i > 0 {
					pastStreamWindow()
				}
				if r := h.post("/webhook", b, sig); r.status != 200 {
					t.Fatalf("post %d: got %d %v, want 200", i, r.status, r.err)
				}
			}
			if got := len(h.stored()); got != 2 {
				t.Fatalf("stored %d, want 2: the retry came after the stream's window", got)
			}
		})
	})
}

// TestConcurrentIdenticalBodies: copies of one body posted at once, none of
// them yet in the index, are stored once (the stream's window) and all
// answered 200.
func TestConcurrentIdenticalBodies(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.AckTimeout = 5 * time.Second // 2 cores, -race
		h := newHarness(t, cfg)
		b := body(13)
		sig := schema.Sign([]byte(secretA), b)
		const copies = 50
		var wg sync.WaitGroup
		statuses := make([]int, copies)
		start := make(chan struct{})
		for i := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[i] = h.post("/webhook", b, sig).status
			}()
		}
		close(start)
		wg.Wait()
		for i, s := range statuses {
			if s != 200 {
				t.Fatalf("copy %d: got %d, want 200", i, s)
			}
		}
		if got := len(h.stored()); got != 1 {
			t.Fatalf("stored %d, want 1", got)
		}
		// The batch publisher reports a copy in a busy batch as stored.
		ok := h.counter("wahook_ingest_requests_total", "result", "ok")
		dup := h.counter("wahook_ingest_requests_total", "result", "duplicate")
		if ok+dup != copies || ok < 1 {
			t.Fatalf("answered %v ok and %v duplicate, want %d in all", ok, dup, copies)
		}
	})
}

// TestFailedPublishNotRemembered: a body whose publish failed (NATS down,
// 503) leaves nothing in the index, so its retry is published and stored.
func TestFailedPublishNotRemembered(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		b := body(14)
		sig := schema.Sign([]byte(secretA), b)
		h.nats.Shutdown()
		for i := 0; i < 5; i++ {
			if r := h.post("/webhook", b, sig); r.status != 503 {
				t.Fatalf("post %d while NATS is down: got %d %v, want 503", i, r.status, r.err)
			}
		}
		// One warning for the outage's first failures, not one a request.
		if got := h.logs.FilterMessage("publish failed, answering 503").Len(); got != 1 {
			t.Errorf("publish failures logged %d times, want once", got)
		}
		h.nats.Start()
		testutil.Eventually(t, 20*time.Second, "a 200 for the retry once NATS is back", func() (bool, string) {
			r := h.post("/webhook", b, sig)
			if r.status != 200 && r.status != 503 {
				t.Fatalf("retry once NATS is back: got %d %v, want 503 until a 200 within 20s", r.status, r.err)
			}
			return r.status == 200, fmt.Sprintf("%d %v", r.status, r.err)
		})
		if got := h.counter("wahook_ingest_duplicates_total", "source", "index"); got != 0 {
			t.Fatalf("the retry was answered from the index (%v), want it published", got)
		}
		if got := h.counter("wahook_ingest_requests_total", "result", "ok"); got != 1 {
			t.Fatalf("bodies published and stored: got %v, want 1", got)
		}
		if got := len(h.stored()); got != 1 {
			t.Fatalf("stored %d, want 1", got)
		}
		// Now it is remembered.
		if r := h.post("/webhook", b, sig); r.status != 200 {
			t.Fatalf("second retry: got %d %v, want 200", r.status, r.err)
		}
		if got := h.counter("wahook_ingest_duplicates_total", "source", "index"); got != 1 {
			t.Fatalf("duplicates found in the index: got %v, want 1", got)
		}
	})
}

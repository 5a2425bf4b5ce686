package stage2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// queueTaken waits until the group's work queue holds nothing: every event
// sourced into it was acked by a member.
func (h *harness) queueTaken() {
	h.t.Helper()
	h.eventually("the group's work queue taken", func() (bool, string) {
		st, err := h.js.Stream(context.Background(), groupStream(DefaultConfig().Durable))
		if err != nil {
			return false, err.Error()
		}
		s := st.CachedInfo().State
		return s.Msgs == 0 && s.LastSeq >= uint64(h.sent.Load()), fmt.Sprintf("%d held, %d sourced", s.Msgs, s.LastSeq)
	})
}

// TestGroupMemoryWarmedAfterRestart: a group member's message memory is
// read back at its start, as a single stage 2's is: a later status of a
// message its group counted before the restart does not count it again
// (it did, for up to the memory, after every restart of a member: every
// rolling deploy of the Helm chart's StatefulSet); an event stored while
// it was down still counts. Without the warm-up the statuses count again,
// which shows the test sees the difference.
func TestGroupMemoryWarmedAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warmup time.Duration
		dups   int
	}{{"warmed", 10 * time.Second, len(testNumbers)}, {"not warmed", 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, sec(20), func(c *Config) {
				c.Partitions, c.Member, c.Members, c.MemoryWarmup = testPartitions, "a", []string{"a"}, tc.warmup
			})
			for i, n := range testNumbers {
				h.sent1(n, "before-"+n, sec(10+i%5))
			}
			h.flushed()
			h.queueTaken()

			h.close()
			h.sent.Store(0)
			h.sent1(testNumbers[0], "while-down", sec(21))
			h.run()
			h.clock.Set(sec(30))
			for _, n := range testNumbers {
				h.delivered(n, "before-"+n, sec(22))
			}
			h.flushed()
			// Applied exactly; duplicates at least (a redelivery on a slow
			// machine is one too).
			applied := len(testNumbers) - tc.dups + 1
			if d, a := h.count(resultDuplicate), h.count(resultApplied); d < tc.dups || a != applied {
				t.Errorf("after the restart: %d duplicates, %d applied; want %d and %d (the send while down, and the statuses of messages not remembered)",
					d, a, tc.dups, applied)
			}
			if tc.warmup > 0 {
				s := h.waitSignal(testNumbers[0], "the send while down counted", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
				if want := 1.0 / 60; s.Observed.S60 != want {
					t.Errorf("60 s rate %v, want %v: one message", s.Observed.S60, want)
				}
			}
			if n := h.warnings.Len(); n != 0 {
				t.Errorf("%d warnings: %v", n, h.warnings.All())
			}
			if w := metricValue(h.s.m.warmed); w != float64(tc.dups) {
				t.Errorf("%v messages warmed, want %d", w, tc.dups)
			}
		})
	}
}

// TestGroupMemoryWarmedOnHandover: partitions that move to a member bring
// their messages into its memory, read from what the group took before:
// when b joins, the statuses of messages a counted; when b leaves and its
// partitions come back to a, those of messages b counted meanwhile.
// Without the warm-up, b counts a's messages again.
func TestGroupMemoryWarmedOnHandover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warmup time.Duration
	}{{"warmed", 10 * time.Second}, {"not warmed", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			h := startServer(t, sec(20))
			cfg := func(name string, members ...string) Config {
				c := groupConfig(name, members...)
				// Quick hand-overs; a handover's warm-up has a third of
				// AckWait, 1.5 s, on a slow machine.
				c.AckWait, c.MemoryWarmup = 4500*time.Millisecond, tc.warmup
				return c
			}
			a := h.join(cfg("a", "a"))
			h.waitConsumer("a")
			for i, n := range testNumbers {
				h.sent1(n, "by-a-"+n, sec(10+i%5))
			}
			h.takenBy(a)
			h.queueTaken()

			b := h.join(cfg("b", "a", "b"))
			h.gauge(a, "partitions", a.s.m.partitions, testPartitions/2)
			h.gauge(b, "partitions", b.s.m.partitions, testPartitions/2)
			h.clock.Set(sec(25))
			for _, n := range testNumbers {
				h.delivered(n, "by-a-"+n, sec(21))
			}
			// And messages of b's numbers that b counts first.
			for _, n := range ofB {
				h.sent1(n, "by-b-"+n, sec(22))
			}
			h.takenBy(a, b)
			h.queueTaken()
			want := 0
			if tc.warmup > 0 {
				want = len(ofB)
			}
			// Applied exactly; duplicates at least (a redelivery on a slow
			// machine is one too).
			if d, ap := b.count(resultDuplicate), b.count(resultApplied); d < want || ap != 2*len(ofB)-want {
				t.Fatalf("b, after it joined: %d duplicates, %d applied; want %d (the statuses of a's messages) and %d", d, ap, want, 2*len(ofB)-want)
			}
			if tc.warmup == 0 {
				return
			}

			// Minutes go by, a sends meanwhile: its memory's head moves on,
			// past the windows (64 s) of b's messages, within the memory.
			h.clock.Set(sec(300))
			for _, n := range ofA {
				h.sent1(n, "later-by-a-"+n, sec(299))
			}
			h.takenBy(a, b)

			// b leaves: its partitions come back to a, with b's messages.
			// a's read-back kept only the windows' messages of them, so
			// their statuses minutes later counted them again.
			b.close()
			if err := SetMembers(context.Background(), h.js, DefaultConfig().Durable, []string{"a"}); err != nil {
				t.Fatal(err)
			}
			h.gauge(a, "partitions", a.s.m.partitions, testPartitions)
			before := a.count(resultApplied)
			for _, n := range ofB {
				h.delivered(n, "by-b-"+n, sec(300))
			}
			h.takenBy(a, b)
			if ap := a.count(resultApplied) - before; ap != 0 {
				t.Errorf("a, with b's partitions back: %d of the statuses of b's %d messages applied, want none (duplicates)", ap, len(ofB))
			}
		})
	}
}

// TestSourceSeq: the EVENTS sequence of a work-queue message, from the
// header nats-server sets on a sourced message.
func TestSourceSeq(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   uint64
	}{
		{schema.StreamEvents + " 1234 wahook.events.*.* {{Partition(8,1)}}.wahook.events.{{Wildcard(1)}}.{{Wildcard(2)}}", 1234},
		{schema.StreamEvents + " 7", 7},
		{"OTHER 1234 x y", 0},
		{schema.StreamEvents + " 0 x y", 0},
		{schema.StreamEvents + " x", 0},
		{"", 0},
	} {
		got, err := sourceSeq(nats.Header{headerStreamSource: []string{tc.header}})
		if got != tc.want || (err == nil) != (tc.want > 0) {
			t.Errorf("%q: %d, %v; want %d", tc.header, got, err, tc.want)
		}
	}
}

// TestGroupWarmupSpan: a member's warm-up reads, for each partition it
// warms, the events before the partition's first message still on the
// work queue (those after it were not taken: not remembered, even when
// other partitions' floors are past them), and nothing of the partitions
// it does not warm.
func TestGroupWarmupSpan(t *testing.T) {
	h := startServer(t, sec(20))
	cfg := groupConfig("a", "a")
	a := h.join(cfg)
	h.waitConsumer("a")
	for i, n := range testNumbers {
		h.sent1(n, "taken-"+n, sec(10+i%5))
	}
	h.takenBy(a)
	h.queueTaken()
	a.close()
	// While no member reads: two events of one of a's numbers, then one of
	// b's, stay on the work queue.
	h.sent1(ofA[0], "held-1", sec(15))
	h.sent1(ofB[0], "held-2", sec(15))
	h.sent1(ofA[0], "held-3", sec(15))
	select {
	case <-h.js.PublishAsyncComplete():
	case <-time.After(15 * time.Second):
		t.Fatal("publish acks did not come")
	}
	h.eventually("three events held on the work queue", func() (bool, string) {
		st, err := h.js.Stream(context.Background(), groupStream(cfg.Durable))
		if err != nil {
			return false, err.Error()
		}
		return st.CachedInfo().State.Msgs == 3, fmt.Sprint(st.CachedInfo().State.Msgs)
	})

	cfg.Now = h.clock.Now
	s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// Every partition but that of one of b's numbers without events held.
	var parts []int
	skipped := partitionOf(ofB[1], testPartitions)
	for p := range testPartitions {
		if p != skipped {
			parts = append(parts, p)
		}
	}
	w := warmup{s: s, began: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.run(ctx, func(ctx context.Context, w *warmup) error { return w.partitionSpan(ctx, parts) })
	w.close()
	if err != nil {
		t.Fatal(err)
	}
	at := sec(16).Unix()
	for _, n := range testNumbers {
		want := partitionOf(n, testPartitions) != skipped
		if got := s.dedupe.SeenMessage("wamid.taken-"+n, at); got != want {
			t.Errorf("the message taken of %s remembered: %v, want %v", n, got, want)
		}
	}
	for _, id := range []string{"held-1", "held-2", "held-3"} {
		if s.dedupe.SeenMessage("wamid."+id, at) {
			t.Errorf("%s remembered: it is still on the work queue", id)
		}
	}
	if want := len(testNumbers) - 1; w.remembered != want {
		t.Errorf("%d remembered, want %d", w.remembered, want)
	}
}

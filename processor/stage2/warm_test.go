package stage2

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/schema"
)

// ackedAll waits until stage 2's consumer has acked every event on EVENTS.
func (h *harness) ackedAll() {
	h.t.Helper()
	h.eventually("every event acked", func() (bool, string) {
		st, err := h.js.Stream(context.Background(), schema.StreamEvents)
		if err != nil {
			return false, err.Error()
		}
		c, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
		if err != nil {
			return false, err.Error()
		}
		ci, err := c.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		last := st.CachedInfo().State.LastSeq
		return ci.AckFloor.Stream == last, fmt.Sprintf("ack floor %d of %d", ci.AckFloor.Stream, last)
	})
}

// TestMessageMemoryWarmedAfterRestart: after a restart, a later status of a
// message counted before it does not count the message again (it did, as
// outbound at the status's second, for up to the message memory); an event
// stored but not acked before the restart still counts.
func TestMessageMemoryWarmedAfterRestart(t *testing.T) {
	const number = "9301"
	h := start(t, sec(20), nil)
	for i := range 5 {
		h.sent1(number, fmt.Sprintf("before-%d", i), sec(10+i))
	}
	h.flushed()
	h.ackedAll()

	// Stopped; meanwhile stage 1 publishes the send of another message,
	// which the next stage 2 must count (it is past the ack floor).
	h.close()
	h.sent.Store(0)
	h.sent1(number, "while-down", sec(21))
	h.run()
	h.clock.Set(sec(30))
	// The delivered statuses of the messages counted before the restart.
	for i := range 5 {
		h.delivered(number, fmt.Sprintf("before-%d", i), sec(22))
	}
	h.flushed()
	if d, a := h.count(resultDuplicate), h.count(resultApplied); d != 5 || a != 1 {
		t.Errorf("after the restart (moved %d, ignored %d): %d duplicates, %d applied; want 5 (the messages counted before it) and 1 (the send while down)",
			h.count(resultMoved), h.count(resultIgnored), d, a)
	}
	// The signal: one outbound message in the new process's windows, at
	// second 21; the five before the restart do not count at 22.
	s := h.waitSignal(number, "the send while down counted", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	if want := 1.0 / 60; s.Observed.S60 != want {
		t.Errorf("60 s rate %v, want %v: one message (the statuses of those counted before the restart count them again)", s.Observed.S60, want)
	}
	if n := h.warnings.Len(); n != 0 {
		t.Errorf("%d warnings: %v", n, h.warnings.All())
	}
	if w, c := metricValue(h.s.m.warmed), metricValue(h.s.m.warmups.WithLabelValues(warmComplete)); w != 5 || c != 1 {
		t.Errorf("metrics: %v messages warmed in %v complete read-backs; want 5 in 1", w, c)
	}
}

// TestMessageMemoryNotWarmed: with the warm-up off, the memory starts empty
// and such statuses count again, as the documentation says.
func TestMessageMemoryNotWarmed(t *testing.T) {
	const number = "9302"
	h := start(t, sec(20), func(c *Config) { c.MemoryWarmup = 0 })
	h.sent1(number, "before", sec(10))
	h.flushed()
	h.ackedAll()
	h.restart()
	h.clock.Set(sec(30))
	h.delivered(number, "before", sec(22))
	h.flushed()
	if d, a := h.count(resultDuplicate), h.count(resultApplied); d != 0 || a != 1 {
		t.Errorf("after the restart without warm-up: %d duplicates, %d applied; want 0 and 1", d, a)
	}

	// A warm-up whose time runs out before it can read its consumer says
	// so, and stage 2 goes on.
	h.cfg.MemoryWarmup = time.Nanosecond
	h.restart()
	h.eventually("the warning", func() (bool, string) {
		n := h.warnings.FilterMessageSnippet("message memory not warmed").Len()
		return n == 1, fmt.Sprint(h.warnings.All())
	})
	if f := metricValue(h.s.m.warmups.WithLabelValues(warmFailed)); f != 1 {
		t.Errorf("%v failed read-backs counted, want 1", f)
	}
	h.sent1(number, "after", sec(23))
	h.flushed()
}

// BenchmarkWarmMemory reads back events stored on EVENTS into the message
// memory, as a restarted stage 2 does (warmMemory), and reports how many it
// reads a second: how long --stage2-memory-warmup needs for the memory's
// events at a given rate. Each event is a status of a message of its own,
// ~560 bytes as stage 1 writes them.
//
//	go test ./processor/stage2 -run '^$' -bench WarmMemory -benchtime 1x -count 3
func BenchmarkWarmMemory(b *testing.B) {
	const events = 500_000
	h := startServer(b, sec(0))
	pad := strings.Repeat("x", 300) // a status row's other fields
	cons := consumedAll(b, h, events, func(i int) (string, any) {
		id := fmt.Sprintf("e-%d", i)
		return id, schema.StatusRow{EventID: id, EventTime: sec(i / 5000), PhoneNumberID: "9303", MessageID: "wamid." + id,
			Status: "delivered", RecipientHash: "r", ConversationID: pad}
	})
	cfg := DefaultConfig()
	cfg.Now, cfg.MemoryWarmup = h.clock.Now, 10*time.Minute
	b.ResetTimer()
	for range b.N {
		s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		n := s.warmMemory(context.Background(), cons)
		b.ReportMetric(events/time.Since(start).Seconds(), "events/s")
		if n != events {
			b.Fatalf("%d messages remembered, want %d", n, events)
		}
	}
}

// TestMessageMemoryWarmupKeepsNewest: when the events to read back would
// take longer than --stage2-memory-warmup, the newest are read: the
// messages sent just before the start, whose statuses come soonest after
// it. It read the oldest until its time ran out.
//
// Each fetch of 500 events is made to take 40 ms more, so that reading
// all 100,000 takes over 8 s on any machine and the 3 s given cannot; and
// small fetches, a good part of whose time is that wait, keep the pace
// the read-back plans with steady, so that a machine slower at the end
// than at the start (another package's tests) does not make it miss the
// newest. It was timed against a first read of them all, and failed when
// one of the two runs had the machine to itself.
func TestMessageMemoryWarmupKeepsNewest(t *testing.T) {
	const events = 100_000
	h := startServer(t, sec(0))
	cons := consumedAll(t, h, events, func(i int) (string, any) {
		id := fmt.Sprintf("e-%d", i)
		return id, schema.StatusRow{EventID: id, EventTime: sec(i / 1000), PhoneNumberID: "9303", MessageID: "wamid." + id, Status: "delivered", RecipientHash: "r"}
	})
	warmFetches(t, 500, func(*warmup) { time.Sleep(40 * time.Millisecond) })

	cfg := DefaultConfig()
	cfg.Now, cfg.MemoryWarmup = h.clock.Now, 3*time.Second
	core, logs := observer.New(zap.InfoLevel)
	s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	n := s.warmMemory(context.Background(), cons)
	t.Logf("%d of %d messages remembered in 3 s", n, events)
	if n == 0 || n >= events {
		t.Fatalf("%d messages remembered of %d in 3 s, with 200 fetches of 40 ms or more to read them all: want a part", n, events)
	}
	if !s.dedupe.SeenMessage(fmt.Sprintf("wamid.e-%d", events-1), sec(events/1000).Unix()) {
		t.Errorf("the newest message is not remembered (%d were): %v", n, logs.All())
	}
	if w := logs.FilterMessageSnippet("newest events only"); w.Len() != 1 {
		t.Errorf("no warning of the part skipped: %v", logs.All())
	}
}

// warmFetches sets, until the test ends, how many events a fetch of the
// warm-up asks for and what runs after each fetch.
func warmFetches(t *testing.T, batch int, after func(*warmup)) {
	old := warmBatch
	warmBatch, testHookWarmFetched = batch, after
	t.Cleanup(func() { warmBatch, testHookWarmFetched = old, nil })
}

// consumedAll makes stage 2's durable consumer, publishes n events (row
// gives each its id and row) and has the consumer take and ack them all,
// as a stage 2 that ran before would have.
func consumedAll(t testing.TB, h *harness, n int, row func(i int) (string, any)) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	cons, err := h.js.CreateOrUpdateConsumer(ctx, schema.StreamEvents, jetstream.ConsumerConfig{
		Durable: DefaultConfig().Durable, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id, r := row(i)
		h.publish(schema.KindStatus, "9303", id, r)
		if i%10_000 == 9_999 {
			<-h.js.PublishAsyncComplete()
		}
	}
	<-h.js.PublishAsyncComplete()
	for taken := 0; taken < n; {
		batch, err := cons.Fetch(min(10_000, n-taken), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var last jetstream.Msg
		for m := range batch.Messages() {
			last = m
			taken++
		}
		if last == nil {
			t.Fatalf("%d of %d taken: %v", taken, n, batch.Error())
		}
		if err := last.DoubleAck(ctx); err != nil { // acks every one before it
			t.Fatal(err)
		}
	}
	return cons
}

// TestMessageMemoryWarmupBounds: the read back stops at the consumer's ack
// floor (an event delivered and not acked comes again, and counts then; one
// acked past the floor is not read), reads nothing for a consumer that has
// taken nothing, and nothing stored before the consumer was made, which it
// never counted.
func TestMessageMemoryWarmupBounds(t *testing.T) {
	ctx := context.Background()
	h := startServer(t, sec(0))
	status := func(id string, at int) {
		h.publish(schema.KindStatus, "9304", id, schema.StatusRow{EventID: id, EventTime: sec(at), PhoneNumberID: "9304", MessageID: "wamid." + id, Status: "sent", RecipientHash: "r"})
	}
	warm := func(cons jetstream.Consumer) (*Stage2, int, *observer.ObservedLogs) {
		cfg := DefaultConfig()
		cfg.Now = h.clock.Now
		core, logs := observer.New(zap.InfoLevel)
		s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		return s, s.warmMemory(ctx, cons), logs
	}
	for i := range 3 {
		status(fmt.Sprintf("pre-%d", i), i) // before the consumer
	}
	<-h.js.PublishAsyncComplete()
	cfg := DefaultConfig()
	cons, err := ensureConsumer(ctx, h.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, n, logs := warm(cons); n != 0 || logs.Len() != 0 {
		t.Errorf("a consumer that took nothing: %d messages remembered, logs %v; want none", n, logs.All())
	}
	for i := range 10 {
		status(fmt.Sprintf("m-%d", i), 10+i)
	}
	<-h.js.PublishAsyncComplete()
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for m := range batch.Messages() {
		if i < 5 || i == 6 { // m-5 is delivered and never acked; m-6 is acked past the floor
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		i++
	}
	if i != 10 {
		t.Fatalf("%d of 10 delivered", i)
	}
	s, n, _ := warm(cons)
	if n != 5 {
		t.Errorf("%d messages remembered; want the 5 up to the ack floor", n)
	}
	for id, want := range map[string]bool{"m-0": true, "m-4": true, "m-5": false, "m-6": false, "m-9": false, "pre-0": false, "pre-2": false} {
		if got := s.dedupe.SeenMessage("wamid."+id, sec(20).Unix()); got != want {
			t.Errorf("%s remembered: %v, want %v", id, got, want)
		}
	}
}

// TestMessageMemoryWarmupBounded: a warm-up whose reading consumer cannot be
// made (its requests lost) ends within its time, and stage 2 goes on. The
// ordered consumer it used first made it again without end, whatever the
// time and the context.
func TestMessageMemoryWarmupBounded(t *testing.T) {
	ctx := context.Background()
	h := startServer(t, sec(0))
	cons := consumedAll(t, h, 10, func(i int) (string, any) {
		id := fmt.Sprintf("b-%d", i)
		return id, schema.StatusRow{EventID: id, EventTime: sec(i), PhoneNumberID: "9303", MessageID: "wamid." + id, Status: "sent", RecipientHash: "r"}
	})
	proxy, js := h.viaProxy()
	proxy.Drop("$JS.API.CONSUMER.CREATE")
	cfg := DefaultConfig()
	cfg.Now, cfg.MemoryWarmup = h.clock.Now, time.Second
	core, logs := observer.New(zap.InfoLevel)
	s, err := New(cfg, js, prometheus.NewRegistry(), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	n := s.warmMemory(ctx, cons)
	if took := time.Since(began); took > 4*time.Second || n != 0 {
		t.Errorf("warm-up without its consumer: %d remembered in %v; want none, within about its second", n, took)
	}
	if proxy.Dropped() == 0 || logs.FilterMessageSnippet("warmed in part or not at all").Len() != 1 {
		t.Errorf("%d requests dropped; logs %v", proxy.Dropped(), logs.All())
	}
}

// TestMessageMemoryWarmupSpan: what is read back is the memory and its 64 s
// of slack before the last event acked (not before now: the events past the
// floor are handled at their own seconds, however long stage 2 was down);
// an event stamped far ahead counts at the time it was stored, as it did
// when handled, and does not carry the memory past the others; the reading
// consumer is deleted.
func TestMessageMemoryWarmupSpan(t *testing.T) {
	ctx := context.Background()
	base := time.Now().Truncate(time.Second)
	h := startServer(t, base)
	status := func(id string, at time.Time) (string, any) {
		return id, schema.StatusRow{EventID: id, EventTime: at, PhoneNumberID: "9305", MessageID: "wamid." + id, Status: "sent", RecipientHash: "r"}
	}
	// One stored 2.5 s before the others: within the slack of a memory of
	// 1 s, not within the memory.
	i := 0
	cons := consumedAll(t, h, 7, func(int) (string, any) {
		i++
		switch i {
		case 1:
			id, row := status("early", base)
			<-h.js.PublishAsyncComplete()
			return id, row
		case 2:
			time.Sleep(2500 * time.Millisecond) // stored later than "early"
			return status("ahead", base.Add(time.Hour))
		default:
			return status(fmt.Sprintf("m-%d", i), base.Add(3*time.Second))
		}
	})
	cfg := DefaultConfig()
	cfg.Now, cfg.MessageMemory = h.clock.Now, time.Second
	s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// Started 20 minutes after the last event acked.
	w := warmup{s: s, began: time.Now().Add(20 * time.Minute)}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = w.run(wctx, func(ctx context.Context, w *warmup) error { return w.consumerSpan(ctx, cons) })
	w.close()
	if err != nil || w.remembered != 7 {
		t.Fatalf("%d messages remembered, error %v; want all 7 (the memory before the last event acked, with its slack)", w.remembered, err)
	}
	for _, id := range []string{"early", "ahead", "m-3", "m-7"} {
		if !s.dedupe.SeenMessage("wamid."+id, base.Add(4*time.Second).Unix()) {
			t.Errorf("%s not remembered", id)
		}
	}
	// The reading consumer is deleted (in 500 ms at most; on a loaded
	// machine, by its inactivity threshold of 10 s when that fails).
	st, err := h.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("stage 2's consumer alone on EVENTS", func() (bool, string) {
		var names []string
		for n := range st.ConsumerNames(ctx).Name() {
			names = append(names, n)
		}
		return len(names) == 1 && names[0] == cfg.Durable, fmt.Sprint(names)
	})
}

// TestMessageMemoryWarmupResumes: a reading consumer lost in the middle of
// a read-back (its server restarted, or it was deleted) is made again past
// the last event read, and the read-back completes; before, the first
// error ended it, with the messages after it not remembered.
func TestMessageMemoryWarmupResumes(t *testing.T) {
	const events = 10
	h := startServer(t, sec(0))
	cons := consumedAll(t, h, events, func(i int) (string, any) {
		id := fmt.Sprintf("r-%d", i)
		return id, schema.StatusRow{EventID: id, EventTime: sec(1), PhoneNumberID: "9306", MessageID: "wamid." + id, Status: "delivered", RecipientHash: "r"}
	})
	deleted, gone := 0, map[string]bool{}
	warmFetches(t, 3, func(w *warmup) {
		if w.rc == nil || deleted == 2 || w.read == 0 || gone[w.rc.CachedInfo().Name] {
			return
		}
		// Twice: after the first batch, and after the first batch of the
		// consumer made again.
		name := w.rc.CachedInfo().Name
		if err := h.js.DeleteConsumer(context.Background(), schema.StreamEvents, name); err != nil {
			t.Errorf("delete the reading consumer: %v", err)
		}
		gone[name] = true
		deleted++
	})

	cfg := DefaultConfig()
	cfg.Now, cfg.MemoryWarmup = h.clock.Now, time.Minute
	core, logs := observer.New(zap.DebugLevel)
	s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.warmMemory(context.Background(), cons); n != events {
		t.Errorf("%d messages remembered of %d: %v", n, events, logs.All())
	}
	if deleted != 2 {
		t.Errorf("the reading consumer was deleted %d times, want 2", deleted)
	}
	if r := logs.FilterMessageSnippet("reading again after an error").Len(); r < 2 {
		t.Errorf("%d reads again after an error logged, want 2 or more: %v", r, logs.All())
	}
	if c := metricValue(s.m.warmups.WithLabelValues(warmComplete)); c != 1 {
		t.Errorf("%v complete read-backs, want 1: %v", c, logs.All())
	}
	for i := range events {
		if !s.dedupe.SeenMessage(fmt.Sprintf("wamid.r-%d", i), sec(1).Unix()) {
			t.Errorf("message r-%d not remembered", i)
		}
	}
}

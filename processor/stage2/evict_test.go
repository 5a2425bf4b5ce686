package stage2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// Numbers that neither traffic nor a hold can change any more leave
// memory (300k send-result numbers held 1.6 GB for good); one seen again
// is seeded from its last signal, its upgrade included.
func TestIdleNumbersAreEvicted(t *testing.T) {
	h := start(t, sec(10), nil)
	const numbers = 200
	for i := 0; i < numbers; i++ {
		h.sent1(fmt.Sprint(90000+i), fmt.Sprintf("ev-%d", i), sec(5))
	}
	id := "ev-upgrade"
	h.publish(schema.KindNumber, "2001", id, schema.ManagementRow{
		EventID: id, Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: sec(5),
		PhoneNumberID: "2001", Event: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED",
	})
	h.flushed()
	h.waitSignal("2001", "upgrade", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	h.eventually("numbers held", func() (bool, string) {
		n := metricValue(h.s.m.numbers)
		return n == numbers+1, fmt.Sprint(n)
	})
	// Past the longest hold (a stop) and the traffic windows.
	h.clock.Set(sec(10 + int(holdHorizon) + 60))
	h.eventually("numbers evicted", func() (bool, string) {
		n, ev := metricValue(h.s.m.numbers), metricValue(h.s.m.evicted)
		return n == 0 && ev == numbers+1, fmt.Sprintf("numbers %v, evicted %v", n, ev)
	})
	// Seen again: its tier comes back from its last signal.
	at := sec(10 + int(holdHorizon) + 60)
	h.sent1("2001", "ev-again", at)
	h.flushed()
	h.waitSignal("2001", "seen again", func(s schema.PacingSignal) bool {
		return s.TierMPS == 1000 && s.TierSource == "throughput_upgrade" && s.UpdatedAt.Equal(at)
	})
}

// TestDirtyNumberStaysLive: a number changed without a change of its
// signal (an old error caught up after an outage, a failed write marked
// again) that a refresh found idle before the flush left the live set,
// but evict kept it, being dirty: written, it stayed in memory for good,
// outside the live set, and the numbers held grew with every number ever
// seen. It stays live until written, then leaves.
func TestDirtyNumberStaysLive(t *testing.T) {
	h := startServer(t, sec(10))
	cfg := DefaultConfig()
	cfg.Now = h.clock.Now
	s, err := New(cfg, h.js, prometheus.NewRegistry(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	now := sec(10 + int(holdHorizon) + 120)
	n := &number{id: "4001", p: pacing.NewNumber("4001")}
	n.last = n.p.Signal(now, cfg.Tiers) // the signal does not move
	s.nums[n.id] = n
	s.w.live[n] = struct{}{}
	s.w.mark(n)
	s.w.refresh(now)
	if _, live := s.w.live[n]; !live || s.nums[n.id] != n {
		t.Fatalf("a number with a write to make: live %v, held %v; want both", live, s.nums[n.id] == n)
	}
	n.dirty = false // written, as flush does
	s.w.refresh(now)
	if _, live := s.w.live[n]; live || s.nums[n.id] != nil {
		t.Errorf("written and idle: live %v, held %v; want neither", live, s.nums[n.id] != nil)
	}
}

// The signals bucket has a TTL, so that it does not keep numbers long gone
// for a restart to reload; a bucket made without one gets it.
func TestPacingBucketTTL(t *testing.T) {
	h := startServer(t, sec(1))
	ctx := context.Background()
	// Made by an earlier version, with an operator's limit on its size.
	if _, err := h.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketPacing, History: 1, MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	kv, _, _, err := ensureBuckets(ctx, h.js, 1, 48*time.Hour, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 48*time.Hour {
		t.Fatalf("TTL of %s: %s, want 48h", schema.BucketPacing, st.TTL())
	}
	// A bucket made by an earlier version gets its markers too, and keeps
	// the rest of its settings.
	if st.LimitMarkerTTL() != markerTTL {
		t.Fatalf("marker TTL of %s: %s, want %s", schema.BucketPacing, st.LimitMarkerTTL(), markerTTL)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); !ok || bs.StreamInfo().Config.MaxBytes != 1<<30 {
		t.Errorf("the bucket's size limit was not kept")
	}
	// wahook migrate, which has no --pacing-ttl, leaves the TTL stage 2
	// gave the bucket (it set its default back at every run); stage 2
	// gives its own again.
	if err := EnsureBuckets(ctx, h.js, 1, 720*time.Hour); err != nil {
		t.Fatal(err)
	}
	if st, err = kv.Status(ctx); err != nil || st.TTL() != 48*time.Hour {
		t.Fatalf("TTL after migrate: %v (%v), want 48h kept", st.TTL(), err)
	}
	if kv, _, _, err = ensureBuckets(ctx, h.js, 1, 24*time.Hour, true); err != nil {
		t.Fatal(err)
	}
	if st, err = kv.Status(ctx); err != nil || st.TTL() != 24*time.Hour || st.LimitMarkerTTL() != markerTTL {
		t.Fatalf("TTL after stage 2 with 24h: %v, markers %v (%v)", st.TTL(), st.LimitMarkerTTL(), err)
	}
}

// A signal that --pacing-ttl expires leaves a marker, which the bucket's
// watchers (the live page, the pacers) see as the number's deletion: they
// showed or used its last signal until their next start.
func TestExpiredSignalSeenGone(t *testing.T) {
	h := startServer(t, sec(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, _, _, err := ensureBuckets(ctx, h.js, 1, 2*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop() //nolint:errcheck
	if _, err := kv.Put(ctx, "5001", []byte(`{"phone_number_id":"5001"}`)); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			ops = append(ops, e.Key()+" "+e.Operation().String())
			if e.Operation() != jetstream.KeyValuePut {
				if want := []string{"5001 KeyValuePutOp", "5001 KeyValuePurgeOp"}; !slices.Equal(ops, want) {
					t.Fatalf("watched %q, want %q", ops, want)
				}
				if _, err := kv.Get(ctx, "5001"); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("the expired signal read: %v, want not found", err)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("no marker 30 s after a signal of a 2 s TTL; watched %q", ops)
		}
	}
}

// The advice gauge counts the numbers by the advice of their last signal,
// so that an alert can say "a number is at stop" from the metrics alone.
func TestAdviceGauge(t *testing.T) {
	h := start(t, sec(10), nil)
	h.sent1("3001", "ev-ok", sec(5))
	h.stop131048("3002")
	h.flushed()
	h.waitSignal("3002", "stop", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop })
	h.eventually("advice gauge", func() (bool, string) {
		ok, stop := metricValue(h.s.m.advice.WithLabelValues("ok")), metricValue(h.s.m.advice.WithLabelValues("stop"))
		return ok == 1 && stop == 1, fmt.Sprintf("ok %v, stop %v", ok, stop)
	})
	// Past the stop's hold and the windows, both are forgotten.
	h.clock.Set(sec(10 + int(holdHorizon) + 60))
	h.eventually("advice gauge after eviction", func() (bool, string) {
		var sum float64
		for _, a := range []string{"ok", "slow_down", "pause", "stop"} {
			sum += metricValue(h.s.m.advice.WithLabelValues(a))
		}
		return sum == 0, fmt.Sprint(sum)
	})
}

// A value-level error (value.errors[], no status of its own) reaches the
// signal like a failed status's: a 131048 there stops the number. Two
// errors of one owner count as two.
func TestValueLevelErrorStops(t *testing.T) {
	h := start(t, sec(10), nil)
	for i, code := range []int32{130429, 131048} {
		r := schema.ErrorRow{EventID: "ev-value", Index: uint16(i), Origin: schema.OriginValue, EventTime: sec(5), PhoneNumberID: "4001", Code: code}
		h.publish(schema.KindError, "4001", schema.ErrorEventID(&r), r)
	}
	h.flushed()
	s := h.waitSignal("4001", "stop", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop })
	if s.RecentErrors["quality"] != 1 || s.RecentErrors["throughput"] != 1 {
		t.Fatalf("recent errors %v, want one quality and one throughput", s.RecentErrors)
	}
}

// An event that changes a decision is acked only once the KV holds the
// decision: a THROUGHPUT_UPGRADE applied while its write fails, then lost
// with the process's memory, comes back to the next instance (it was
// acked at once, and the upgrade was lost).
func TestDecisionAckedAfterItsWrite(t *testing.T) {
	h := start(t, sec(10), func(c *Config) { c.AckWait = 2 * time.Second })
	ctx := context.Background()
	if err := h.js.DeleteKeyValue(ctx, schema.BucketPacing); err != nil {
		t.Fatal(err)
	}
	id := "ev-upgrade-lost"
	h.publish(schema.KindNumber, "5001", id, schema.ManagementRow{
		EventID: id, Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: sec(5),
		PhoneNumberID: "5001", Event: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED",
	})
	h.eventually("the write failed", func() (bool, string) {
		n := metricValue(h.s.m.writeFails)
		return n > 0, fmt.Sprint(n)
	})
	info, err := h.js.Consumer(ctx, schema.StreamEvents, h.cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); ci.AckFloor.Stream >= 1 && ci.NumAckPending == 0 {
		t.Fatalf("the upgrade was acked while its write failed: %+v", ci.AckFloor)
	}
	// The process stops with the upgrade in memory only, and says so; the
	// next one provisions the bucket again and gets the upgrade
	// redelivered.
	if err := h.closeErr(); err == nil || !strings.Contains(err.Error(), "stopped with signals not written: 1 signal(s) not written") {
		t.Errorf("Run, stopped with the write failing: %v", err)
	}
	h.sent.Store(0)
	h.run()
	h.waitSignal("5001", "upgrade after the restart", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
}

// Stage 2 started before the EVENTS stream exists (a cluster still
// forming, stage 1 not there yet) waits for it instead of ending the
// process.
func TestRunWaitsForTheStream(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(DefaultConfig(), js, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(500 * time.Millisecond) // the test: Run goes on without the stream for a while, retrying
	select {
	case err := <-done:
		t.Fatalf("Run returned without the stream: %v", err)
	default:
	}
	if err := processor.EnsureEventsStream(ctx, js, processor.DefaultEventsConfig(), false); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, js: js}
	h.eventually("stage 2's consumer once the stream exists", func() (bool, string) {
		_, err := js.Consumer(ctx, schema.StreamEvents, DefaultConfig().Durable)
		return err == nil, fmt.Sprint(err)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The consumer of every EVENTS subject is unfiltered (cheaper for the
// server to deliver from); one made with the filter by an earlier release
// is updated in place and keeps its position: an event published while
// no stage 2 ran is still delivered.
func TestConsumerUnfilteredUpgrade(t *testing.T) {
	h := startServer(t, sec(10))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	if _, err := h.js.CreateOrUpdateConsumer(ctx, schema.StreamEvents, jetstream.ConsumerConfig{
		Durable: cfg.Durable, DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cfg.AckWait, MaxAckPending: cfg.MaxAckPending, FilterSubject: schema.SubjectEventsAll,
	}); err != nil {
		t.Fatal(err)
	}
	id := "ev-unfiltered"
	h.publish(schema.KindNumber, "5101", id, schema.ManagementRow{
		EventID: id, Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: sec(5),
		PhoneNumberID: "5101", Event: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED",
	})
	cfg.Now = h.clock.Now
	h.cfg = cfg
	h.run()
	t.Cleanup(h.close)
	h.waitSignal("5101", "the upgrade published before the update", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	c, err := h.js.Consumer(ctx, schema.StreamEvents, cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.Config.FilterSubject != "" || len(ci.Config.FilterSubjects) != 0 {
		t.Fatalf("consumer still filtered: %q %q", ci.Config.FilterSubject, ci.Config.FilterSubjects)
	}
}

// A number seen again whose last signal cannot be read (a read lost on its
// way) keeps its tier: its event waits and is tried again, instead of
// seeding the number from nothing, whose next write put the default tier
// in the KV for good (the upgrade, acked long ago, never comes back).
func TestSeedReadFailureKeepsTier(t *testing.T) {
	h := startServer(t, sec(10))
	cfg := DefaultConfig()
	cfg.Now = h.clock.Now
	h.cfg = cfg
	h.run()
	t.Cleanup(h.close)
	h.publish(schema.KindNumber, "7301", "up", schema.ManagementRow{EventID: "up", Kind: schema.KindNumber,
		Field: "phone_number_quality_update", EventTime: sec(0), PhoneNumberID: "7301", Event: "THROUGHPUT_UPGRADE"})
	h.flushed()
	h.waitSignal("7301", "the upgrade", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	h.clock.Set(sec(2000))
	h.waitSignal("7301", "ok after the window", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceOK })
	h.eventually("the idle number evicted", func() (bool, string) { return metricValue(h.s.m.numbers) == 0, "" })

	// The next instance reads through a proxy that loses the reads of the
	// bucket until told otherwise.
	proxy, js2 := h.viaProxy()
	h.close()
	h.js = js2
	h.sent.Store(0)
	h.run()
	proxy.Drop("$JS.API.DIRECT.GET.KV_" + schema.BucketPacing)
	h.sent1("7301", "m1", sec(1999))
	h.eventually("a read failed", func() (bool, string) {
		n := metricValue(h.s.m.seedFailures)
		return n > 0, fmt.Sprint(n)
	})
	proxy.Drop("")
	h.flushed()
	h.eventually("the event applied once the read works", func() (bool, string) {
		n := metricValue(h.s.m.events.WithLabelValues(resultApplied))
		return n > 0, fmt.Sprint(n)
	})
	s, raw, err := h.signal("7301")
	if err != nil {
		t.Fatal(err)
	}
	if s.TierMPS != 1000 || s.TierSource != schema.TierSourceThroughputUpgrade {
		t.Errorf("after a lost read: %s; want the upgrade's tier", raw)
	}
}

// A number at slow_down (or with traffic) in its last signal, whose traffic
// stops as stage 2 restarts, is written again by the new instance: before,
// only stops and pauses were seeded at the start, and the old slow_down
// with its rates stayed in the KV for good.
func TestStaleSignalRewrittenAfterRestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			h := start(t, sec(12), nil)
			h.traffic("5001", 0, 10, 75, 0)
			h.flushed()
			h.waitSignal("5001", "slow_down", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceSlowDown })
			if restart {
				h.restart()
			}
			h.clock.Set(sec(600))
			h.waitSignal("5001", "ok, without the old rates", func(s schema.PacingSignal) bool {
				return s.Advice == schema.AdviceOK && s.Observed.S10 == 0
			})
		})
	}
}

// A number seeded for an event that counts nothing (a late delivered status
// of a message counted already, after the number was evicted), and one
// seeded at the start for its stale signal, are evicted again once nothing
// can change them: seeded outside the live set, both stayed in memory for
// good.
func TestSeededNumbersAreEvictedAgain(t *testing.T) {
	h := start(t, sec(10), nil)
	h.sent1("8801", "m1", sec(5))
	h.flushed()
	h.waitSignal("8801", "a signal", func(s schema.PacingSignal) bool { return true })
	h.clock.Set(sec(300))
	h.eventually("evicted", func() (bool, string) { n := metricValue(h.s.m.numbers); return n == 0, fmt.Sprint(n) })
	h.delivered("8801", "m1", sec(120))
	h.flushed()
	h.eventually("the duplicate taken", func() (bool, string) {
		n := metricValue(h.s.m.events.WithLabelValues(resultDuplicate))
		return n >= 1, fmt.Sprint(n)
	})
	h.clock.Set(sec(5000))
	h.eventually("evicted again", func() (bool, string) { n := metricValue(h.s.m.numbers); return n == 0, fmt.Sprint(n) })

	h.clock.Set(sec(5012))
	h.traffic("5001", 5000, 5010, 75, 0)
	h.flushed()
	h.waitSignal("5001", "slow_down", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceSlowDown })
	h.restart()
	h.clock.Set(sec(5600))
	h.waitSignal("5001", "ok", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceOK && s.Observed.S10 == 0 })
	h.clock.Set(sec(9000))
	h.eventually("the number seeded at the start evicted", func() (bool, string) { n := metricValue(h.s.m.numbers); return n == 0, fmt.Sprint(n) })
}

// While the reads of the pacing bucket are lost, events of numbers not in
// memory fail fast and do not hold up a known number's stop for long:
// before, each waited for its own read (2 s, and again on redelivery).
func TestSeedReadOutageDoesNotStallKnownNumbers(t *testing.T) {
	h := startServer(t, sec(10))
	proxy, js2 := h.viaProxy()
	direct := h.js
	h.js = js2
	h.cfg = DefaultConfig()
	h.cfg.Now = h.clock.Now
	h.run()
	t.Cleanup(h.close)
	h.sent1("9900", "k1", sec(5))
	h.flushed()
	h.waitSignal("9900", "the known number", func(s schema.PacingSignal) bool { return true })
	proxy.Drop("$JS.API.DIRECT.GET.KV_" + schema.BucketPacing)
	for i := range 10 {
		h.sent1(fmt.Sprint(9000+i), fmt.Sprint("n", i), sec(6))
	}
	start := time.Now()
	h.failed("9900", "f1", "r1", sec(7), 131048)
	testutil.Eventually(t, 60*time.Second, "the known number's stop", func() (bool, string) {
		kv, err := direct.KeyValue(context.Background(), schema.BucketPacing)
		if err != nil {
			return false, err.Error()
		}
		e, err := kv.Get(context.Background(), schema.PacingKey("9900"))
		if err != nil {
			return false, err.Error()
		}
		var s schema.PacingSignal
		_ = json.Unmarshal(e.Value(), &s)
		return s.Advice == schema.AdviceStop, string(s.Advice)
	})
	// One read waited for (0.5 s), the others failed at once: well under
	// the 20 s ten reads of 2 s each took.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the known number's stop was written %v after its event, behind the new numbers' reads", took)
	}
}

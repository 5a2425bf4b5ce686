package stage2

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// Traffic of two numbers at known rates over 20 s of Meta's time: the KV
// holds observed_mps.10s within 1% of the truth, and utilization against
// the default tier of 80.
func TestObservedRatesInKV(t *testing.T) {
	h := start(t, sec(22), nil) // the windows end with second 19
	type num struct {
		id      string
		out, in int
	}
	nums := []num{{"1001", 50, 10}, {"1002", 30, 5}}
	for _, n := range nums {
		h.traffic(n.id, 0, 20, n.out, n.in)
	}
	h.flushed()
	for _, n := range nums {
		want := float64(n.out + n.in)
		s := h.waitSignal(n.id, "observed rate of "+n.id, func(s schema.PacingSignal) bool {
			return math.Abs(s.Observed.S10-want) <= 0.01*want
		})
		if s.TierMPS != 80 || s.TierSource != "default" || math.Abs(s.Utilization-want/80) > 0.01*want/80 {
			t.Errorf("number %s: tier %d (%s), utilization %v, want %v", n.id, s.TierMPS, s.TierSource, s.Utilization, want/80)
		}
		if s.Observed.Outbound10 != float64(n.out) || s.Observed.Inbound10 != float64(n.in) {
			t.Errorf("number %s: outbound %v inbound %v, want %d %d", n.id, s.Observed.Outbound10, s.Observed.Inbound10, n.out, n.in)
		}
		if !s.UpdatedAt.Equal(sec(22)) || s.PhoneNumberID != n.id || s.Version != schema.PacingVersion {
			t.Errorf("number %s: %+v", n.id, s)
		}
	}
	if got := metricValue(h.s.m.numbers); got != 2 {
		t.Errorf("numbers tracked: %v", got)
	}
	// The rates decay to 0 in the KV once the traffic is a minute old.
	h.clock.Set(sec(90))
	h.waitSignal("1001", "rates decay", func(s schema.PacingSignal) bool {
		return s.Observed.S60 == 0 && s.Observed.S10 == 0 && s.Advice == schema.AdviceOK && s.RecommendedMPS == 80
	})
}

// A THROUGHPUT_UPGRADE raises the tier to 1,000 and opens a maintenance
// window: pause until a minute after it.
func TestThroughputUpgrade(t *testing.T) {
	h := start(t, sec(10), nil)
	id := "ev-upgrade"
	h.publish(schema.KindNumber, "2001", id, schema.ManagementRow{
		EventID: id, Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: sec(0),
		PhoneNumberID: "2001", DisplayPhoneNumber: "15550001", Event: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED",
	})
	h.flushed()
	s := h.waitSignal("2001", "upgrade", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	if s.TierSource != "throughput_upgrade" || s.Advice != schema.AdvicePause || s.RecommendedMPS != 0 ||
		s.MaintenanceUntil == nil || !s.MaintenanceUntil.Equal(sec(60)) || s.MessagingLimit != "TIER_UNLIMITED" {
		t.Fatalf("after THROUGHPUT_UPGRADE: %+v", s)
	}
	// After the window, without further events, the refresh writes ok.
	h.clock.Set(sec(61))
	h.waitSignal("2001", "maintenance over", func(s schema.PacingSignal) bool {
		return s.Advice == schema.AdviceOK && s.RecommendedMPS == 1000 && s.MaintenanceUntil == nil
	})
}

// 130429 turns ok into slow_down at a lower recommended rate; 131048 into
// stop.
func TestThrottleThenStop(t *testing.T) {
	h := start(t, sec(22), nil)
	h.traffic("3001", 0, 20, 40, 5)
	h.flushed()
	before := h.waitSignal("3001", "traffic", func(s schema.PacingSignal) bool { return s.Observed.S10 == 45 })
	if before.Advice != schema.AdviceOK || before.RecommendedMPS != 75 {
		t.Fatalf("before: %+v", before)
	}
	for k := 0; k < 30; k++ { // of messages sent at 19 s: no more traffic
		h.failedOf("3001", fmt.Sprintf("thr-%d", k), fmt.Sprintf("3001-o-19-%d", k), fmt.Sprintf("r%d", k), sec(19), 130429)
	}
	h.flushed()
	s := h.waitSignal("3001", "slow_down", func(s schema.PacingSignal) bool {
		return s.Advice == schema.AdviceSlowDown && s.RecentErrors[schema.ClassThroughput] == 30
	})
	if s.RecommendedMPS >= before.RecommendedMPS || s.RecommendedMPS != 20 || s.RecentErrors[schema.ClassThroughput] != 30 {
		t.Fatalf("after 130429: %+v", s)
	}
	h.failed("3001", "spam-1", "r1", sec(20), 131048)
	h.flushed()
	s = h.waitSignal("3001", "stop", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop })
	if s.RecommendedMPS != 0 || s.RecentErrors[schema.ClassQuality] != 1 {
		t.Fatalf("after 131048: %+v", s)
	}
}

// A 131056 for r1 writes a cool-down for (number, r1) alone, with a
// per-key TTL; a second one in a row gives strike 2.
func TestPairCooldown(t *testing.T) {
	h := start(t, sec(1), nil)
	h.traffic("4001", 0, 1, 3, 0)
	h.failed("4001", "pair-1", "r1", sec(0), 131056)
	h.flushed()
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, schema.BucketPairCooldown)
	if err != nil {
		t.Fatal(err)
	}
	key := schema.PairCooldownKey("4001", "r1")
	read := func(strikes int) schema.PairCooldown {
		t.Helper()
		var c schema.PairCooldown
		h.eventually(fmt.Sprintf("strike %d", strikes), func() (bool, string) {
			e, err := kv.Get(ctx, key)
			if err != nil {
				return false, err.Error()
			}
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return false, err.Error()
			}
			return c.Strikes == strikes, string(e.Value())
		})
		return c
	}
	c := read(1)
	if c.PhoneNumberID != "4001" || c.Recipient != "r1" || !c.Until.Equal(sec(6)) {
		t.Fatalf("first: %+v", c)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for k := range keys.Keys() {
		all = append(all, k)
	}
	if len(all) != 1 || all[0] != key {
		t.Fatalf("keys %v, want only %s", all, key)
	}
	// The entry carries its TTL: until and its wait once more (6 s),
	// from the clock (11 s): a 131056 in that time is the next strike.
	stream, err := h.js.Stream(ctx, "KV_"+schema.BucketPairCooldown)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetLastMsgForSubject(ctx, "$KV."+schema.BucketPairCooldown+"."+key)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := raw.Header.Get("Nats-TTL"); ttl != "11s" {
		t.Errorf("Nats-TTL %q, want 11s", ttl)
	}
	h.clock.Set(sec(2))
	h.failed("4001", "pair-2", "r1", sec(2), 131056)
	h.flushed()
	if c = read(2); !c.Until.Equal(sec(8)) { // max(6 s, 4^1 s) after second 2
		t.Fatalf("second: %+v", c)
	}
	if n := metricValue(h.s.m.cooldowns); n != 2 {
		t.Errorf("cool-downs written: %v", n)
	}
	h.waitSignal("4001", "pair-rate errors in the signal", func(s schema.PacingSignal) bool {
		return s.RecentErrors[schema.ClassPairRate] == 2
	})
	if fmt.Sprint(c.EventIDs) != "[pair-1 pair-2]" {
		t.Errorf("the cool-down does not name its strikes' events: %+v", c)
	}

	// The second strike's event delivered again after a restart (a crash
	// before its ack; the new instance remembers no event id): no third
	// strike. Before, it found its own cool-down running and counted it.
	h.restart()
	// Another message id: EVENTS' duplicate window would drop the same.
	h.publish(schema.KindStatus, "4001", "pair-2-again", schema.StatusRow{EventID: "pair-2", EventTime: sec(2), PhoneNumberID: "4001",
		MessageID: "wamid.pair-2", Status: "failed", RecipientHash: "r1", ErrorCodes: []int32{131056}})
	h.flushed()
	h.eventually("the redelivery applied", func() (bool, string) {
		n := metricValue(h.s.m.events.WithLabelValues(resultApplied))
		return n > 0, fmt.Sprint(n)
	})
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var again schema.PairCooldown
	if err := json.Unmarshal(e.Value(), &again); err != nil || again.Strikes != 2 || !again.Until.Equal(sec(8)) {
		t.Errorf("after the redelivery: %s, want strike 2 until second 8", e.Value())
	}
}

// The same events published again under other Nats-Msg-Ids (a replay after
// the duplicate window) leave the KV signal as it was.
func TestReplayCountsOnce(t *testing.T) {
	h := start(t, sec(22), nil)
	publishAll := func(suffix string) {
		for s := 0; s < 20; s++ {
			for k := 0; k < 20; k++ {
				id := fmt.Sprintf("o-%d-%d", s, k)
				h.publish(schema.KindStatus, "5001", id+suffix, schema.StatusRow{EventID: id, EventTime: sec(s), PhoneNumberID: "5001", MessageID: "wamid." + id, Status: "sent"})
			}
			id := fmt.Sprintf("i-%d", s)
			h.publish(schema.KindInbound, "5001", id+suffix, schema.InboundRow{EventID: id, EventTime: sec(s), PhoneNumberID: "5001"})
		}
		for k := 0; k < 3; k++ {
			id := fmt.Sprintf("f-%d", k)
			h.publish(schema.KindStatus, "5001", id+suffix, schema.StatusRow{EventID: id, EventTime: sec(18), PhoneNumberID: "5001", Status: "failed", ErrorCodes: []int32{131026}})
		}
	}
	publishAll("")
	h.flushed()
	once := h.waitSignal("5001", "first pass", func(s schema.PacingSignal) bool { return s.Observed.S10 == 21 })
	_, onceJSON, _ := h.signal("5001")
	written := metricValue(h.s.m.signals)
	publishAll("-replay")
	h.flushed()
	if d := h.count(resultDuplicate); d != 20*21+3 {
		t.Fatalf("%d duplicates, want %d", d, 20*21+3)
	}
	// Wait for a write after the replay (the refresh rewrites a live
	// number every second), then compare.
	h.eventually("a write after the replay", func() (bool, string) {
		return metricValue(h.s.m.signals) > written+1, ""
	})
	_, twiceJSON, err := h.signal("5001")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onceJSON, twiceJSON) {
		t.Fatalf("after the replay:\n%s\nonce:\n%s", twiceJSON, onceJSON)
	}
	if once.RecentErrors[schema.ClassUndeliverable] != 3 {
		t.Fatalf("recent errors %v", once.RecentErrors)
	}
}

// A subscriber of wahook.pacing.<id> gets the updates, coalesced: far
// fewer messages than events, the last equal to the KV.
func TestSignalSubjectCoalesced(t *testing.T) {
	h := start(t, sec(22), nil)
	sub, err := h.nc.SubscribeSync(schema.PacingSubject("6001"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const events = 1000
	for k := 0; k < events; k++ {
		h.sent1("6001", fmt.Sprintf("c-%d", k), sec(k/50))
	}
	h.flushed()
	var last []byte
	got := 0
	h.eventually("the subject's last message equals the KV", func() (bool, string) {
		for {
			m, err := sub.NextMsg(10 * time.Millisecond)
			if err != nil {
				break
			}
			got++
			last = m.Data
		}
		sig, kv, err := h.signal("6001")
		return err == nil && sig.Observed.S10 == 50 && bytes.Equal(kv, last), fmt.Sprintf("kv %s, subject %s", kv, last)
	})
	var s schema.PacingSignal
	if err := json.Unmarshal(last, &s); err != nil || s.Observed.S10 != 50 {
		t.Fatalf("last message %s: %v", last, err)
	}
	t.Logf("%d events, %d messages on %s", events, got, sub.Subject)
	if got < 1 || got >= events/10 {
		t.Fatalf("%d messages for %d events", got, events)
	}
}

// modes runs test without partitions and as the one member of a group.
func modes(t *testing.T, test func(t *testing.T, edit func(*Config))) {
	t.Run("single", func(t *testing.T) { test(t, nil) })
	t.Run("group", func(t *testing.T) {
		test(t, func(c *Config) { c.Partitions, c.Member, c.Members = 8, "a", []string{"a"} })
	})
}

// A restarted stage 2 keeps what the EVENTS it will not see again said: a
// number upgraded or on the Business app keeps its tier (from the KV).
func TestRestartKeepsTier(t *testing.T) { modes(t, testRestartKeepsTier) }

func testRestartKeepsTier(t *testing.T, edit func(*Config)) {
	h := start(t, sec(10), edit)
	h.publish(schema.KindNumber, "7001", "up", schema.ManagementRow{
		EventID: "up", Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: sec(0),
		PhoneNumberID: "7001", Event: "THROUGHPUT_UPGRADE",
	})
	h.publish(schema.KindOther, "7002", "echo", schema.ManagementRow{
		EventID: "echo", Kind: schema.KindOther, Field: "smb_message_echoes", EventTime: sec(0), PhoneNumberID: "7002", Event: "text",
	})
	h.flushed()
	h.waitSignal("7001", "upgrade", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	h.waitSignal("7002", "coexistence", func(s schema.PacingSignal) bool {
		return s.TierMPS == 20 && s.TierSource == "coexistence" && s.Observed.Outbound10 == 0.1
	})
	h.restart()
	h.clock.Set(sec(200))
	h.traffic("7001", 190, 198, 10, 0)
	h.traffic("7002", 190, 198, 1, 0)
	h.flushed()
	h.waitSignal("7001", "tier after restart", func(s schema.PacingSignal) bool {
		return s.TierMPS == 1000 && s.TierSource == "throughput_upgrade" && s.Observed.S1 == 10 && s.Advice == schema.AdviceOK
	})
	h.waitSignal("7002", "tier after restart", func(s schema.PacingSignal) bool {
		return s.TierMPS == 20 && s.TierSource == "coexistence" && s.Observed.S1 == 1
	})
}

// TestLateEchoMarksCoexistence: a Business-app echo older than the
// windows (a backlog, Meta's retries, a replay) no longer counts as
// traffic, but still makes its number a coexistence one: tier 20. It was
// ignored, and the number was told 80, four times Meta's tier.
func TestLateEchoMarksCoexistence(t *testing.T) {
	h := start(t, sec(300), nil)
	h.traffic("7101", 290, 298, 5, 0)
	h.flushed()
	h.waitSignal("7101", "traffic now", func(s schema.PacingSignal) bool { return s.Observed.S10 > 0 })
	h.publish(schema.KindOther, "7102", "late-echo", schema.ManagementRow{
		EventID: "late-echo", Kind: schema.KindOther, Field: "smb_message_echoes", EventTime: sec(10), PhoneNumberID: "7102", Event: "text",
	})
	h.flushed()
	h.waitSignal("7102", "coexistence from a late echo", func(s schema.PacingSignal) bool {
		return s.TierMPS == 20 && s.TierSource == "coexistence" && s.RecommendedMPS <= 20 && s.Observed.S60 == 0
	})
	if n := h.count(resultIgnored); n != 0 {
		t.Errorf("%d events ignored, want 0: the echo's number is coexistence", n)
	}
}

// A cool-down that cannot be written (its bucket is gone) is written when
// the event comes again, once, with its first strike.
func TestCooldownRetried(t *testing.T) {
	h := start(t, sec(1), nil)
	ctx := context.Background()
	if err := h.js.DeleteKeyValue(ctx, schema.BucketPairCooldown); err != nil {
		t.Fatal(err)
	}
	h.failed("4101", "pair-x", "r9", sec(0), 131056)
	h.eventually("a failed write", func() (bool, string) {
		return metricValue(h.s.m.writeFails) > 0, ""
	})
	kv, err := h.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketPairCooldown, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("the cool-down after the redelivery", func() (bool, string) {
		e, err := kv.Get(ctx, schema.PairCooldownKey("4101", "r9"))
		if err != nil {
			return false, err.Error()
		}
		var c schema.PairCooldown
		return json.Unmarshal(e.Value(), &c) == nil && c.Strikes == 1, string(e.Value())
	})
	h.waitSignal("4101", "counted once", func(s schema.PacingSignal) bool {
		return s.RecentErrors[schema.ClassPairRate] == 1
	})
	if metricValue(h.s.m.cooldowns) != 1 || h.count(resultApplied) != 1 {
		t.Fatalf("cool-downs %v, applied %d", metricValue(h.s.m.cooldowns), h.count(resultApplied))
	}
}

// Stage 2 rides out a restart of the server: it goes on applying events
// and writing signals.
func TestServerRestart(t *testing.T) { modes(t, testServerRestart) }

func testServerRestart(t *testing.T, edit func(*Config)) {
	h := start(t, sec(12), edit)
	h.traffic("8001", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("8001", "before", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	h.srv.Shutdown()
	h.srv.Start()
	h.eventually("reconnected", func() (bool, string) { return h.nc.IsConnected(), h.nc.Status().String() })
	h.clock.Set(sec(22))
	h.traffic("8001", 10, 20, 20, 0)
	h.flushed()
	h.waitSignal("8001", "after", func(s schema.PacingSignal) bool { return s.Observed.S10 == 20 })
}

// A consumer deleted under a running stage 2 (by hand, or lost with a
// server's store) ends neither stage 2 nor the process: it is provisioned
// again, and the signals go on.
func TestRunRecreatesDeletedConsumer(t *testing.T) {
	h := start(t, sec(12), nil)
	// Deleted once stage 2 reads it (a pull request of its waits): deleted
	// while Run still sets it up (provisions it, reads its memory back),
	// it is made again by the start-up's retry, which is not this test's
	// subject, and no restart is counted (a CI run failed so).
	h.reading()
	if err := h.js.DeleteConsumer(context.Background(), schema.StreamEvents, h.cfg.Durable); err != nil {
		t.Fatal(err)
	}
	h.eventually("the consumer read again", func() (bool, string) {
		_, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
		n := metricValue(h.s.m.restarts)
		return err == nil && n >= 1, fmt.Sprintf("restarts %v, %v", n, err)
	})
	h.traffic("8001", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("8001", "after the consumer came back", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	select {
	case err := <-h.done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
}

// TestRecreatedConsumerMissesNothing: the events published while the
// consumer was gone reach the signals once it is made again: made anew, it
// started with the events published from then on, and skipped them (a
// 131048's stop here). The events it had taken already come again, and
// count once.
func TestRecreatedConsumerMissesNothing(t *testing.T) {
	h := start(t, sec(12), func(c *Config) { c.StallAfter = 2 * time.Second }) // a look for the consumer every second
	h.traffic("8003", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("8003", "before the consumer is deleted", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	if err := h.js.DeleteConsumer(context.Background(), schema.StreamEvents, h.cfg.Durable); err != nil {
		t.Fatal(err)
	}
	h.failed("8004", "f1", "r1", sec(0), 131048) // while it is gone
	h.eventually("the consumer made again", func() (bool, string) {
		_, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
		n := metricValue(h.s.m.restarts)
		return err == nil && n >= 1, fmt.Sprintf("restarts %v, %v", n, err)
	})
	h.waitSignal("8004", "the stop published while the consumer was gone", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop })
	h.eventually("every event taken again", func() (bool, string) {
		c, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0, fmt.Sprint(info, err)
	})
	if sig, _, err := h.signal("8003"); err != nil || sig.Observed.S10 != 10 {
		t.Errorf("8003 after its events came again: %+v, %v; want 10 in the last 10 s", sig.Observed, err)
	}
	// The next start provisions the consumer made from a sequence: the
	// server refuses to change where a consumer starts, and every start
	// after the remake failed.
	if _, err := ensureConsumer(context.Background(), h.js, h.cfg); err != nil {
		t.Errorf("the next start's consumer: %v", err)
	}
}

// TestGroupMemberRecreatesDeletedConsumer: a group member whose consumer
// is deleted (by hand, or by the server once it was inactive for its
// threshold) joins again. pcgroups makes a member's consumer again only
// when the membership changes, and its reader ended for good: the member
// kept its partitions and applied none of their events, and the group's
// work queue grew until the sourcing stopped for every member.
func TestGroupMemberRecreatesDeletedConsumer(t *testing.T) {
	h := start(t, sec(12), func(c *Config) {
		c.Partitions, c.Member, c.Members = 8, "a", []string{"a"}
		c.StallAfter = 2 * time.Second // a look for the consumer every second
	})
	h.traffic("8002", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("8002", "the first events", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	if err := h.js.DeleteConsumer(context.Background(), groupStream(h.cfg.Durable), h.cfg.Member); err != nil {
		t.Fatal(err)
	}
	h.eventually("the member joined again", func() (bool, string) {
		_, err := h.js.Consumer(context.Background(), groupStream(h.cfg.Durable), h.cfg.Member)
		n := metricValue(h.s.m.restarts)
		return err == nil && n >= 1, fmt.Sprintf("restarts %v, %v", n, err)
	})
	h.traffic("8003", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("8003", "events after the consumer came back", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	select {
	case err := <-h.done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
}

// TestGroupStopWhileOutOfTheGroup: a member whose consumer ended while its
// signals could not be written (the pacing bucket gone), stopped while it
// waited to join again, returned nil: the process exited 0 with the
// signals not written. The stop says so, as one in the group does.
func TestGroupStopWhileOutOfTheGroup(t *testing.T) {
	h := start(t, sec(22), func(c *Config) {
		c.Partitions, c.Member, c.Members = 8, "a", []string{"a"}
		c.StallAfter = 2 * time.Second // a look for the consumer every second
	})
	h.sent1("8102", "before", sec(10))
	h.flushed()
	h.waitSignal("8102", "the first signal", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	if err := h.js.DeleteKeyValue(context.Background(), schema.BucketPacing); err != nil {
		t.Fatal(err)
	}
	h.sent1("8102", "after", sec(11))
	h.flushed()
	h.eventually("a write refused", func() (bool, string) {
		n := metricValue(h.s.m.writeFails.WithLabelValues(schema.BucketPacing))
		return n >= 1, fmt.Sprintf("failed writes %v", n)
	})
	// Out of the group: its consumer gone, it waits 250 ms to join again.
	if err := h.js.DeleteConsumer(context.Background(), groupStream(h.cfg.Durable), h.cfg.Member); err != nil {
		t.Fatal(err)
	}
	h.eventually("the member out of the group", func() (bool, string) {
		n := metricValue(h.s.m.restarts)
		return n >= 1, fmt.Sprintf("restarts %v", n)
	})
	if err := h.closeErr(); err == nil || !strings.Contains(err.Error(), "stopped with signals not written: 1 signal(s) not written") {
		t.Errorf("Run: %v, want the signal not written said", err)
	}
}

// reading waits until stage 2 reads its consumer (a pull request of its
// waits there).
func (h *harness) reading() {
	h.t.Helper()
	h.eventually("stage 2 reading its consumer", func() (bool, string) {
		c, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
		if err != nil {
			return false, err.Error()
		}
		n := c.CachedInfo().NumWaiting
		return n > 0, fmt.Sprintf("%d pull requests waiting", n)
	})
}

// TestStopWhileConsumerCannotBeMade: stopped while its consumer is lost
// and cannot be made again (its stream gone, a NATS node away), Run
// called the reader with the nil consumer of the last failed try and
// panicked, taking serve down instead of writing its last signals. It
// returns now.
func TestStopWhileConsumerCannotBeMade(t *testing.T) {
	h := start(t, sec(12), nil)
	h.reading()
	if err := h.js.DeleteStream(context.Background(), schema.StreamEvents); err != nil {
		t.Fatal(err)
	}
	h.eventually("the consumer's loss", func() (bool, string) {
		n := metricValue(h.s.m.restarts)
		return n >= 1, fmt.Sprintf("restarts %v", n)
	})
	// Tries to make it again fail from 250 ms on: stop after some.
	time.Sleep(2 * time.Second)
	if err := h.closeErr(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Send results count like webhooks: an accepted send is outbound traffic,
// once per message with its sent status; a burst of failed sends with
// 130429 gives slow_down, a 131056 a cool-down for that recipient alone,
// and a 131048 stop.
func TestSendResults(t *testing.T) {
	h := start(t, sec(22), nil)
	accepted := func(number, msg string, at time.Time) {
		id := "sr-" + msg
		h.publish(schema.KindSendResult, number, id, schema.SendResultRow{EventID: id, EventTime: at, PhoneNumberID: number,
			MessageID: "wamid." + msg, Status: schema.SendAccepted, RecipientHash: "r"})
	}
	failed := func(number, id, recipient string, at time.Time, code int32) {
		h.publish(schema.KindSendResult, number, id, schema.SendResultRow{EventID: id, EventTime: at, PhoneNumberID: number,
			Status: schema.SendFailed, RecipientHash: recipient, ErrorCodes: []int32{code}})
	}
	// 30 sends a second for 20 s; every other message's sent status also
	// comes, some of them in the next second: still 30 a second.
	for s := 0; s < 20; s++ {
		for k := 0; k < 30; k++ {
			msg := fmt.Sprintf("5001-%d-%d", s, k)
			accepted("5001", msg, sec(s))
			if k%2 == 0 {
				h.sent1("5001", msg, sec(s+k%3/2))
			}
		}
	}
	h.flushed()
	before := h.waitSignal("5001", "send results as traffic", func(s schema.PacingSignal) bool { return s.Observed.Outbound10 == 30 })
	if before.Advice != schema.AdviceOK || before.Observed.S60 != 20*30/60.0 {
		t.Fatalf("before: %+v", before)
	}
	for k := 0; k < 30; k++ {
		failed("5001", fmt.Sprintf("thr-%d", k), fmt.Sprintf("r%d", k), sec(19), 130429)
	}
	failed("5001", "pair-1", "r-pair", sec(19), 131056)
	h.flushed()
	s := h.waitSignal("5001", "slow_down", func(s schema.PacingSignal) bool {
		return s.Advice == schema.AdviceSlowDown && s.RecentErrors[schema.ClassThroughput] == 30 && s.RecentErrors[schema.ClassPairRate] == 1
	})
	if s.RecommendedMPS >= before.RecommendedMPS || s.RecentErrors[schema.ClassThroughput] != 30 || s.RecentErrors[schema.ClassPairRate] != 1 {
		t.Fatalf("after 130429: %+v", s)
	}
	kv, err := h.js.KeyValue(context.Background(), schema.BucketPairCooldown)
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("cool-down of r-pair alone", func() (bool, string) {
		keys, err := kv.ListKeys(context.Background())
		if err != nil {
			return false, err.Error()
		}
		var all []string
		for k := range keys.Keys() {
			all = append(all, k)
		}
		return len(all) == 1 && all[0] == schema.PairCooldownKey("5001", "r-pair"), fmt.Sprint(all)
	})
	// A minute after the last 130429, ok again.
	h.clock.Set(sec(85))
	h.waitSignal("5001", "ok a minute later", func(s schema.PacingSignal) bool {
		return s.Advice == schema.AdviceOK && len(s.RecentErrors) == 0 && s.RecommendedMPS == 80
	})
	failed("5001", "spam-1", "r1", sec(84), 131048)
	h.flushed()
	h.waitSignal("5001", "stop", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop && s.RecommendedMPS == 0 })
}

// Coalescing spaces the writes that move rates and counts; an event that
// changes what a sender must do is written at once. With a coalescing
// interval of a minute, a busy number's quality change still reaches the
// KV within moments, with the traffic that came before it.
func TestDecisionWrittenAtOnce(t *testing.T) {
	h := start(t, sec(22), func(c *Config) { c.Coalesce, c.Refresh, c.AckWait = time.Minute, time.Minute, 5*time.Minute })
	h.traffic("6001", 0, 10, 10, 0)
	h.flushed()
	h.waitSignal("6001", "first write, at once", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	h.traffic("6001", 10, 20, 10, 0) // rates move: coalesced, due in a minute
	h.flushed()
	before := metricValue(h.s.m.signals)
	h.publish(schema.KindNumber, "6001", "q-1", schema.ManagementRow{EventID: "q-1", Kind: schema.KindNumber,
		Field: "phone_number_quality_update", EventTime: sec(20), PhoneNumberID: "6001", Event: "FLAGGED", NewValue: "TIER_1K"})
	h.flushed()
	s := h.waitSignal("6001", "quality at once", func(s schema.PacingSignal) bool { return s.Quality == "flagged" })
	if s.Observed.S10 != 10 || s.MessagingLimit != "TIER_1K" {
		t.Fatalf("the urgent write has all the state: %+v", s)
	}
	if got := metricValue(h.s.m.signals) - before; got != 1 {
		t.Fatalf("%v writes after the quality event, want 1", got)
	}
	if metricValue(h.s.m.urgent) != 1 {
		t.Fatalf("urgent writes: %v", metricValue(h.s.m.urgent))
	}
}

// TestEventAheadOfTheClockCountsAsNow: a send result stamped an hour ahead
// (a sender's clock, or a bad stamp) counts as now. Counted at its own time
// it moved the de-duplication's newest second an hour on, and every other
// number's traffic fell behind the windows: A's rate went to 0.
func TestEventAheadOfTheClockCountsAsNow(t *testing.T) {
	h := start(t, sec(22), nil)
	h.traffic("A", 0, 20, 10, 0)
	h.flushed()
	h.waitSignal("A", "A at 10 mps", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	h.publish(schema.KindSendResult, "B", "sr-ahead", schema.SendResultRow{EventID: "sr-ahead", EventTime: sec(3600),
		PhoneNumberID: "B", MessageID: "wamid.ahead", Status: schema.SendAccepted})
	h.flushed()
	h.clock.Set(sec(42))
	h.traffic("A", 20, 40, 10, 0)
	h.flushed()
	if n := metricValue(h.s.m.clamped); n != 1 {
		t.Errorf("events counted as now: %v, want 1", n)
	}
	if n := h.count(resultIgnored); n != 0 {
		t.Errorf("%d events ignored as older than the windows, want 0", n)
	}
	h.waitSignal("A", "A still at 10 mps after B's send result", func(s schema.PacingSignal) bool { return s.Observed.S10 == 10 })
	// Taken at 22 s as if sent then: in B's last minute at 42 s.
	h.waitSignal("B", "B's send result counted in its last minute", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
}

// TestEventAheadOfTheClockCountsOnce: an inbound message stamped an hour
// ahead counts as now, once: delivered again when the clock has moved on
// (a redelivery, a replay under another Nats-Msg-Id), it counted again,
// its id remembered by the second it counted at. It is remembered by
// itself now, also once the clock has reached its own second.
func TestEventAheadOfTheClockCountsOnce(t *testing.T) {
	h := start(t, sec(22), nil)
	row := schema.InboundRow{EventID: "in-ahead", EventTime: sec(3600), PhoneNumberID: "B", MessageID: "wamid.in-ahead", Type: "text", FromHash: "u"}
	h.publish(schema.KindInbound, "B", "in-ahead", row)
	h.flushed()
	h.clock.Set(sec(25))
	h.publish(schema.KindInbound, "B", "in-ahead-again", row)
	h.flushed()
	if n := metricValue(h.s.m.clamped); n != 2 {
		t.Errorf("events counted as now: %v, want 2", n)
	}
	if a, d := h.count(resultApplied), h.count(resultDuplicate); a != 1 || d != 1 {
		t.Errorf("ahead of the clock and again 3 s later: %d applied, %d duplicates; want 1 and 1", a, d)
	}
	h.clock.Set(sec(3601))
	h.publish(schema.KindInbound, "B", "in-ahead-at-its-time", row)
	h.flushed()
	if a, d := h.count(resultApplied), h.count(resultDuplicate); a != 1 || d != 2 {
		t.Errorf("again once the clock has reached it: %d applied, %d duplicates; want 1 and 2", a, d)
	}
}

// TestRestoredStopEndsOnTime: a stop restored after a restart ends 15
// minutes after its error, although traffic kept rewriting its signal, and
// the signal says so once it ends, although no event comes then.
func TestRestoredStopEndsOnTime(t *testing.T) {
	h := start(t, sec(1), nil)
	h.stop131048("C")
	h.clock.Set(sec(890))
	h.inbound("C", "i1", sec(888))
	h.flushed()
	h.waitSignal("C", "stop rewritten at 890 s", func(s schema.PacingSignal) bool { return s.UpdatedAt.Equal(sec(890)) })
	h.restart()
	h.clock.Set(sec(895))
	h.inbound("C", "i2", sec(893))
	h.flushed()
	h.waitSignal("C", "the restored stop still holds at 895 s, until 900 s", func(s schema.PacingSignal) bool {
		return s.Advice == schema.AdviceStop && s.StopUntil != nil && s.StopUntil.Equal(sec(900))
	})
	// Past the stop and the traffic's minute: no event, and the signal
	// is written when the stop ends.
	h.clock.Set(sec(1000))
	h.waitSignal("C", "ok once the stop ended", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceOK && s.StopUntil == nil })
}

// TestRestoredStopWrittenWhenItEnds: after a restart, a number whose
// restored stop outlasts its traffic stays live until the stop ends, and
// its signal is written then; it used to leave the live set a minute after
// its traffic, and the KV said stop for good.
func TestRestoredStopWrittenWhenItEnds(t *testing.T) {
	h := start(t, sec(1), nil)
	h.stop131048("D")
	h.restart()
	h.clock.Set(sec(60))
	h.inbound("D", "i1", sec(58))
	h.flushed()
	h.clock.Set(sec(62))
	h.waitSignal("D", "the inbound message counted after the restart", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	// Past the traffic's minute, the stop still on: the rates settle to 0.
	h.clock.Set(sec(200))
	h.waitSignal("D", "the rates settled, still stop", func(s schema.PacingSignal) bool {
		return s.UpdatedAt.Equal(sec(200)) && s.Observed.S60 == 0 && s.Advice == schema.AdviceStop
	})
	// Give the refresh (every second) the turns in which a number with
	// nothing left to change leaves the live set: the eviction is what is
	// tested, and is seen only by the signal that follows.
	time.Sleep(2500 * time.Millisecond)
	h.clock.Set(sec(2000))
	h.waitSignal("D", "ok once the stop ended", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceOK })
}

// TestHeldNumberSeededAtStart: a number stopped before a restart, with no
// event after it, is seeded at the start from its signal, and its signal
// says ok once the stop has ended.
func TestHeldNumberSeededAtStart(t *testing.T) {
	h := start(t, sec(1), nil)
	h.stop131048("E")
	h.restart()
	h.clock.Set(sec(2000))
	h.waitSignal("E", "ok once the stop ended, without an event", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceOK })
}

// TestHeldNumberSeededAfterAFailedRead: the read of the signals at the
// start failed once (its request lost, as while a cluster elects a
// leader): the held numbers were never seeded, and a stop with no event
// after it said stop in the KV for good. The read is tried again.
func TestHeldNumberSeededAfterAFailedRead(t *testing.T) {
	h := start(t, sec(1), nil)
	h.stop131048("G")
	h.close()
	proxy, pjs := h.viaProxy()
	h.js = pjs
	// The watches of wahook_pacing are lost on the way, for a while.
	proxy.Drop("$JS.API.CONSUMER.CREATE.KV_" + schema.BucketPacing)
	h.run()
	h.eventually("the first read lost", func() (bool, string) { return proxy.Dropped() > 0, fmt.Sprint(proxy.Dropped()) })
	proxy.Drop("")
	h.clock.Set(sec(2000))
	h.eventually("ok once the stop ended, without an event", func() (bool, string) {
		s, _, err := h.signal("G")
		return err == nil && s.Advice == schema.AdviceOK, fmt.Sprintf("%+v %v", s.Advice, err)
	})
}

// stop131048 has the number fail a message with 131048 at 0 s and waits
// until its signal says stop.
func (h *harness) stop131048(number string) {
	h.t.Helper()
	h.failed(number, "f1", "r1", sec(0), 131048)
	h.flushed()
	h.waitSignal(number, "stop", func(s schema.PacingSignal) bool { return s.Advice == schema.AdviceStop })
}

// TestPruneCooldownRetries: the ids of events whose cool-down is to be
// written again are kept while a redelivery could still write one (the
// event's partition may move away and come back), and forgotten once no
// cool-down of theirs can still run; they were kept for ever before.
func TestPruneCooldownRetries(t *testing.T) {
	s := &Stage2{cooldownRetry: map[string]time.Time{}}
	now := time.Now()
	for i := range cooldownRetryPrune {
		s.cooldownRetry[fmt.Sprintf("old-%d", i)] = now.Add(-cooldownRetryKeep - time.Minute)
	}
	s.cooldownRetry["recent"] = now.Add(-pacing.MaxPairCooldown)
	s.pruneCooldownRetries(now)
	if _, kept := s.cooldownRetry["recent"]; !kept || len(s.cooldownRetry) != 1 {
		t.Fatalf("after pruning: %d ids, the recent one kept %v; want it alone", len(s.cooldownRetry), kept)
	}
}

// TestStopWithSignalsNotWritten: a stop whose last writes of the signals
// fail (the pacing bucket gone) returns an error naming how many numbers'
// signals were not written; it returned nil, and the process exited 0.
// Their events stay unacked, applied again at the next start. In a group
// too (where the error was taken for a failed join, and Run returned nil).
func TestStopWithSignalsNotWritten(t *testing.T) { modes(t, testStopWithSignalsNotWritten) }

func testStopWithSignalsNotWritten(t *testing.T, edit func(*Config)) {
	h := start(t, sec(22), edit)
	h.sent1("8101", "before", sec(10))
	h.flushed()
	h.waitSignal("8101", "the first signal", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	if err := h.js.DeleteKeyValue(context.Background(), schema.BucketPacing); err != nil {
		t.Fatal(err)
	}
	h.sent1("8101", "after", sec(11))
	h.flushed()
	h.eventually("a write refused", func() (bool, string) {
		n := metricValue(h.s.m.writeFails.WithLabelValues(schema.BucketPacing))
		return n >= 1, fmt.Sprintf("failed writes %v", n)
	})
	if err := h.closeErr(); err == nil || !strings.Contains(err.Error(), "stopped with signals not written: 1 signal(s) not written") {
		t.Errorf("Run: %v, want the signal not written said", err)
	}
}

package stage2

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/synadia-io/orbit.go/pcgroups"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/schema"
)

// testPartitions is the partitions of the tests' groups. With members a
// and b, a owns 0-3 and b 4-7; of the numbers 1001-1008, a owns 1002,
// 1004, 1005 and 1007 (TestPartitionOfMatchesServer checks the hash).
const testPartitions = 8

var (
	testNumbers = []string{"1001", "1002", "1003", "1004", "1005", "1006", "1007", "1008"}
	ofA         = []string{"1002", "1004", "1005", "1007"}
	ofB         = []string{"1001", "1003", "1006", "1008"}
)

// member is a stage 2 instance on a connection of its own.
type member struct {
	t    testing.TB
	name string
	s    *Stage2
	js   jetstream.JetStream
	stop context.CancelFunc
	done chan error
}

// groupConfig is the config of member name in a group of members.
func groupConfig(name string, members ...string) Config {
	cfg := DefaultConfig()
	cfg.Partitions, cfg.Member, cfg.Members = testPartitions, name, members
	return cfg
}

// connect is a JetStream context on a new connection to h's server.
func (h *harness) connect() jetstream.JetStream {
	h.t.Helper()
	nc, err := nats.Connect(h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	return js
}

// join starts a stage 2 with cfg on a new connection to h's server.
func (h *harness) join(cfg Config) *member {
	h.t.Helper()
	js := h.connect()
	cfg.Now = h.clock.Now
	name := cfg.Member
	if name == "" {
		name = "single"
	}
	log := zaptest.NewLogger(h.t).Named(name)
	s, err := New(cfg, js, prometheus.NewRegistry(), log)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &member{t: h.t, name: name, s: s, js: js, stop: stop, done: make(chan error, 1)}
	go func() { m.done <- s.Run(ctx) }()
	h.t.Cleanup(m.close)
	return m
}

// close stops the instance and waits for Run.
func (m *member) close() {
	if m.stop == nil {
		return
	}
	m.stop()
	m.stop = nil
	select {
	case err := <-m.done:
		if err != nil {
			m.t.Errorf("%s: Run: %v", m.name, err)
		}
	case <-time.After(15 * time.Second):
		m.t.Errorf("%s: Run did not return", m.name)
	}
}

// taken is the events m took for good: every result but not_owned (an
// event nak'ed for its owner).
func (m *member) taken() int {
	n := 0
	for _, r := range []string{resultApplied, resultDuplicate, resultIgnored, resultBad} {
		n += int(metricValue(m.s.m.events.WithLabelValues(r)))
	}
	return n
}

func (m *member) count(result string) int {
	return int(metricValue(m.s.m.events.WithLabelValues(result)))
}

// numbers is the numbers m holds; call it after close.
func (m *member) numbers() []string { return slices.Sorted(maps.Keys(m.s.nums)) }

// waitConsumer waits for member's consumer on the group's stream.
func (h *harness) waitConsumer(member string) {
	h.t.Helper()
	h.eventually("the consumer of "+member, func() (bool, string) {
		_, err := h.js.Consumer(context.Background(), groupStream(DefaultConfig().Durable), member)
		return err == nil, fmt.Sprint(err)
	})
}

// gauge waits until the gauge of m is want.
func (h *harness) gauge(m *member, what string, g prometheus.Gauge, want int) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("%s: %s %d", m.name, what, want), func() (bool, string) {
		got := int(metricValue(g))
		return got == want, strconv.Itoa(got)
	})
}

// takenBy waits until ms took every event published.
func (h *harness) takenBy(ms ...*member) {
	h.t.Helper()
	select {
	case <-h.js.PublishAsyncComplete():
	case <-time.After(15 * time.Second):
		h.t.Fatal("publish acks did not come")
	}
	h.eventually("every event taken", func() (bool, string) {
		n := 0
		for _, m := range ms {
			n += m.taken()
		}
		return int64(n) >= h.sent.Load(), fmt.Sprintf("%d of %d", n, h.sent.Load())
	})
}

// op is one event to publish.
type op struct {
	kind          schema.Kind
	number, msgID string
	row           any
}

// mixedTraffic is traffic of eight numbers over seconds 0-29: sent and
// delivered statuses, inbound messages, accepted sends with their sent
// statuses (counted once), replays, 130429 (slow_down), 131056 (cool-downs,
// four in a row for a pair), a 131048 (stop), a THROUGHPUT_UPGRADE
// (pause), a FLAGGED, and a template event without a number.
func mixedTraffic() []op {
	var ops []op
	status := func(number, id string, at int, st, recipient string, codes ...int32) {
		ops = append(ops, op{schema.KindStatus, number, id, schema.StatusRow{EventID: id, EventTime: sec(at), PhoneNumberID: number,
			MessageID: "wamid." + strings.TrimSuffix(id, "-d"), Status: st, RecipientHash: recipient, ErrorCodes: codes}})
	}
	for s := 10; s < 25; s++ {
		for i, n := range testNumbers {
			for k := 0; k < 2+i; k++ {
				id := fmt.Sprintf("%s-o-%d-%d", n, s, k)
				status(n, id, s, "sent", "r")
				status(n, id+"-d", s+1, "delivered", "r")
				if n == "1002" && k == 0 {
					ops = append(ops, op{schema.KindStatus, n, id + "-replay", ops[len(ops)-2].row})
				}
			}
			for k := 0; k < i%3; k++ {
				id := fmt.Sprintf("%s-i-%d-%d", n, s, k)
				ops = append(ops, op{schema.KindInbound, n, id, schema.InboundRow{EventID: id, EventTime: sec(s), PhoneNumberID: n,
					MessageID: "wamid." + id, Type: "text", FromHash: "u"}})
			}
		}
		if s >= 15 && s < 21 {
			for k := 0; k < 5; k++ {
				msg := fmt.Sprintf("1004-sr-%d-%d", s, k)
				ops = append(ops, op{schema.KindSendResult, "1004", "sr-" + msg, schema.SendResultRow{EventID: "sr-" + msg, EventTime: sec(s),
					PhoneNumberID: "1004", MessageID: "wamid." + msg, Status: schema.SendAccepted, RecipientHash: "r"}})
				if k%2 == 0 {
					status("1004", msg, s, "sent", "r")
				}
			}
		}
	}
	for _, n := range []string{"1001", "1004", "1006"} {
		for k := 0; k < 4; k++ {
			status(n, fmt.Sprintf("%s-thr-%d", n, k), 24, "failed", fmt.Sprintf("rt%d", k), 130429)
		}
	}
	for _, n := range []string{"1002", "1003", "1008"} {
		for k := 0; k < 4; k++ { // strike 4: until second 93, 63 s after Now
			status(n, fmt.Sprintf("%s-pair-%d", n, k), 29, "failed", "rp", 131056)
		}
	}
	status("1007", "1007-spam", 27, "failed", "rs", 131048)
	ops = append(ops,
		op{schema.KindNumber, "1006", "1006-up", schema.ManagementRow{EventID: "1006-up", Kind: schema.KindNumber, Field: "phone_number_quality_update",
			EventTime: sec(5), PhoneNumberID: "1006", Event: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED"}},
		op{schema.KindNumber, "1005", "1005-flag", schema.ManagementRow{EventID: "1005-flag", Kind: schema.KindNumber, Field: "phone_number_quality_update",
			EventTime: sec(12), PhoneNumberID: "1005", Event: "FLAGGED", NewValue: "TIER_1K"}},
		op{schema.KindTemplate, "", "tpl-1", schema.ManagementRow{EventID: "tpl-1", Kind: schema.KindTemplate, Field: "message_template_status_update",
			EventTime: sec(20), Event: "APPROVED"}},
	)
	return ops
}

// publishPOSTs publishes ops in order, in "POSTs" of seven events that go
// round the publishers, as bodies reaching different ingest instances do:
// a number's events come through every publisher. Each POST is acked
// before the next, so the order is the same on every run.
func (h *harness) publishPOSTs(ops []op, pubs ...jetstream.JetStream) {
	h.t.Helper()
	for i := 0; i < len(ops); i += 7 {
		js := pubs[i/7%len(pubs)]
		for _, o := range ops[i:min(i+7, len(ops))] {
			h.publishTo(js, o.kind, o.number, o.msgID, o.row)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(15 * time.Second):
			h.t.Fatal("publish acks did not come")
		}
	}
}

// publishers are n JetStream contexts on connections of their own.
func (h *harness) publishers(n int) []jetstream.JetStream {
	var pubs []jetstream.JetStream
	for range n {
		pubs = append(pubs, h.connect())
	}
	return pubs
}

// bucket reads every key of a KV bucket.
func (h *harness) bucket(name string) map[string][]byte {
	h.t.Helper()
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, name)
	if err != nil {
		h.t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]byte{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			h.t.Fatalf("%s %s: %v", name, k, err)
		}
		out[k] = e.Value()
	}
	return out
}

// The same traffic, its numbers' events split across POSTs that reach two
// publishers, gives the same signals and cool-downs through one stage 2
// (no partitions) as through two instances sharing the numbers; each
// number is held by exactly one of the two, the one owning its partition.
func TestTwoInstancesSameSignals(t *testing.T) {
	ops := mixedTraffic()
	at := sec(30)

	// One instance, as on one machine.
	one := startServer(t, at)
	single := one.join(DefaultConfig())
	one.eventually("the durable consumer", func() (bool, string) {
		_, err := one.js.Consumer(context.Background(), schema.StreamEvents, DefaultConfig().Durable)
		return err == nil, fmt.Sprint(err)
	})
	one.publishPOSTs(ops, one.publishers(2)...)
	one.takenBy(single)
	single.close()
	wantSignals, wantCooldowns := one.bucket(schema.BucketPacing), one.bucket(schema.BucketPairCooldown)

	// The runs must say something: check a few signals.
	if len(wantSignals) != len(testNumbers) || len(wantCooldowns) != 3 {
		t.Fatalf("one instance: %d signals, %d cool-downs; want %d and 3", len(wantSignals), len(wantCooldowns), len(testNumbers))
	}
	for n, want := range map[string]string{
		"1001": `"advice":"slow_down"`, "1006": `"advice":"pause"`, "1007": `"advice":"stop"`,
		"1005": `"quality":"flagged"`, "1002": `"pair_rate":4`,
	} {
		if !bytes.Contains(wantSignals[n], []byte(want)) {
			t.Errorf("one instance: %s: %s lacks %s", n, wantSignals[n], want)
		}
	}

	// Two instances sharing the numbers.
	two := startServer(t, at)
	a := two.join(groupConfig("a", "a", "b"))
	two.waitConsumer("a")
	b := two.join(groupConfig("b", "a", "b"))
	two.waitConsumer("b")
	two.gauge(a, "partitions", a.s.m.partitions, testPartitions/2)
	two.gauge(b, "partitions", b.s.m.partitions, testPartitions/2)
	two.publishPOSTs(ops, two.publishers(2)...)
	two.takenBy(a, b)
	a.close()
	b.close()
	gotSignals, gotCooldowns := two.bucket(schema.BucketPacing), two.bucket(schema.BucketPairCooldown)

	for _, n := range testNumbers {
		if !bytes.Equal(gotSignals[n], wantSignals[n]) {
			t.Errorf("signal of %s:\ntwo instances: %s\none instance:  %s", n, gotSignals[n], wantSignals[n])
		}
	}
	if len(gotSignals) != len(wantSignals) {
		t.Errorf("%d signals, want %d", len(gotSignals), len(wantSignals))
	}
	for k, want := range wantCooldowns {
		if !bytes.Equal(gotCooldowns[k], want) {
			t.Errorf("cool-down %s:\ntwo instances: %s\none instance:  %s", k, gotCooldowns[k], want)
		}
	}
	if len(gotCooldowns) != len(wantCooldowns) {
		t.Errorf("%d cool-downs, want %d", len(gotCooldowns), len(wantCooldowns))
	}
	if got := a.numbers(); !slices.Equal(got, ofA) {
		t.Errorf("a holds %v, want %v", got, ofA)
	}
	if got := b.numbers(); !slices.Equal(got, ofB) {
		t.Errorf("b holds %v, want %v", got, ofB)
	}
	for _, r := range []string{resultApplied, resultDuplicate, resultIgnored, resultBad} {
		if got, want := a.count(r)+b.count(r), single.count(r); got != want {
			t.Errorf("%s: a %d + b %d, one instance %d", r, a.count(r), b.count(r), want)
		}
	}
	if a.count(resultNotOwned)+b.count(resultNotOwned) != 0 {
		t.Errorf("not owned: a %d, b %d", a.count(resultNotOwned), b.count(resultNotOwned))
	}
	t.Logf("%d events; applied: one instance %d, a %d, b %d", len(ops), single.count(resultApplied), a.count(resultApplied), b.count(resultApplied))
}

// rates publishes, for each test number i, (i+1)*mult sent statuses a
// second over seconds [from, to).
func (h *harness) rates(from, to, mult int) {
	for s := from; s < to; s++ {
		for i, n := range testNumbers {
			for k := 0; k < (i+1)*mult; k++ {
				h.sent1(n, fmt.Sprintf("%s-%d-%d", n, s, k), sec(s))
			}
		}
	}
}

// waitRates waits until every test number's signal shows (i+1)*mult over
// the last 10 s.
func (h *harness) waitRates(mult int, what string) {
	h.t.Helper()
	for i, n := range testNumbers {
		want := float64((i + 1) * mult)
		h.waitSignal(n, fmt.Sprintf("%s: %s at %v/s", what, n, want), func(s schema.PacingSignal) bool { return s.Observed.S10 == want })
	}
}

// Partitions move when members join and leave: the old owner forgets the
// numbers it loses, the new owner seeds them from their last signal (a
// tier and a quality it never saw the events of), and a member left alone
// takes over the partitions of one that stopped.
func TestPartitionsMove(t *testing.T) {
	h := startServer(t, sec(12))
	short := func(c Config) Config { c.AckWait = 2 * time.Second; return c } // quick hand-overs

	// a alone owns every partition.
	a := h.join(short(groupConfig("a", "a")))
	h.waitConsumer("a")
	h.publish(schema.KindNumber, "1006", "up", schema.ManagementRow{EventID: "up", Kind: schema.KindNumber, Field: "phone_number_quality_update",
		EventTime: sec(0), PhoneNumberID: "1006", Event: "THROUGHPUT_UPGRADE"})
	h.publish(schema.KindNumber, "1008", "flag", schema.ManagementRow{EventID: "flag", Kind: schema.KindNumber, Field: "phone_number_quality_update",
		EventTime: sec(1), PhoneNumberID: "1008", Event: "FLAGGED"})
	h.rates(0, 10, 1)
	h.takenBy(a)
	h.waitRates(1, "a alone")
	h.gauge(a, "numbers", a.s.m.numbers, len(testNumbers))
	h.gauge(a, "partitions", a.s.m.partitions, testPartitions)

	// b joins: a forgets b's numbers, b takes them with what the KV says.
	b := h.join(short(groupConfig("b", "a", "b")))
	h.gauge(a, "partitions", a.s.m.partitions, testPartitions/2)
	h.gauge(a, "numbers", a.s.m.numbers, len(ofA))
	h.gauge(b, "partitions", b.s.m.partitions, testPartitions/2)
	h.clock.Set(sec(22))
	h.rates(10, 20, 2)
	h.waitRates(2, "a and b")
	h.waitSignal("1006", "b seeds the tier", func(s schema.PacingSignal) bool {
		return s.TierMPS == 1000 && s.TierSource == "throughput_upgrade"
	})
	h.waitSignal("1008", "b seeds the quality", func(s schema.PacingSignal) bool { return s.Quality == "flagged" })
	h.gauge(b, "numbers", b.s.m.numbers, len(ofB))
	h.gauge(a, "numbers", a.s.m.numbers, len(ofA))

	// b stops; with a the only member, a takes b's partitions over.
	b.close()
	if got := b.numbers(); !slices.Equal(got, ofB) {
		t.Errorf("b held %v, want %v", got, ofB)
	}
	if err := SetMembers(context.Background(), h.js, DefaultConfig().Durable, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	h.gauge(a, "partitions", a.s.m.partitions, testPartitions)
	h.clock.Set(sec(32))
	h.rates(20, 30, 3)
	h.waitRates(3, "a takes over")
	h.waitSignal("1006", "a seeds the tier again", func(s schema.PacingSignal) bool { return s.TierMPS == 1000 })
	h.gauge(a, "numbers", a.s.m.numbers, len(testNumbers))
	a.close()
	if got := a.numbers(); !slices.Equal(got, testNumbers) {
		t.Errorf("a holds %v, want %v", got, testNumbers)
	}
}

// partitionOf gives a number the partition the server's transform gives
// its subject; and a group made on a stream with events sources them all.
func TestPartitionOfMatchesServer(t *testing.T) {
	h := startServer(t, sec(1))
	ctx := context.Background()
	ids := []string{"a.b", "x y", "_"}
	for i := range 40 {
		ids = append(ids, strconv.Itoa(100_000_000_000_000+i*7919))
	}
	publish := func(ids []string) {
		for _, id := range ids {
			h.inbound(id, "ev-"+id, sec(0))
		}
	}
	publish(ids[:20])
	cfg := groupConfig("a") // no members: nothing is consumed
	if err := ensureGroup(ctx, h.js, cfg); err != nil {
		t.Fatal(err)
	}
	publish(ids[20:])
	stream, err := h.js.Stream(ctx, groupStream(cfg.Durable))
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.StreamInfo
	h.eventually("every event in the group's stream", func() (bool, string) {
		info, err = stream.Info(ctx, jetstream.WithSubjectFilter(">"))
		return err == nil && info.State.Msgs == uint64(len(ids)), fmt.Sprint(info.State.Msgs, err)
	})
	parts := map[int]bool{}
	for subj := range info.State.Subjects {
		p, rest, _ := strings.Cut(subj, ".")
		tok := strings.Split(rest, ".")[2]
		want := partitionOf(tok, testPartitions)
		if p != strconv.Itoa(want) {
			t.Errorf("%s: partitionOf gives %d", subj, want)
		}
		parts[want] = true
	}
	if len(parts) != testPartitions {
		t.Errorf("the numbers fill %d partitions of %d", len(parts), testPartitions)
	}
	for _, id := range testNumbers {
		if got, want := slices.Contains(ofA, id), partitionOf(id, testPartitions) < testPartitions/2; got != want {
			t.Errorf("%s: partition %d, in ofA %v", id, partitionOf(id, testPartitions), got)
		}
	}
	// Stage 2 watches the group's configuration where pcgroups keeps it.
	kv, err := h.js.KeyValue(ctx, groupBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, groupKey(cfg.Durable)); err != nil {
		t.Fatalf("group configuration: %v", err)
	}
	gc, err := pcgroups.GetElasticConsumerGroupConfig(ctx, h.js, schema.StreamEvents, cfg.Durable)
	if err != nil || gc.MaxMembers != testPartitions || len(gc.Members) != 0 {
		t.Fatalf("group configuration %+v: %v", gc, err)
	}
	// The partitions of a group are fixed.
	cfg.Partitions = 16
	if err := ensureGroup(ctx, h.js, cfg); err == nil || !strings.Contains(err.Error(), "has 8 partitions, not 16") {
		t.Fatalf("16 partitions on a group of 8: %v", err)
	}
}

// A consumer group deleted under a running member ends neither the
// member nor the process: it joins again (provisioning the group), and
// takes the events published after.
func TestRunRejoinsDeletedGroup(t *testing.T) {
	h := startServer(t, sec(1))
	a := h.join(groupConfig("a", "a"))
	h.waitConsumer("a")
	if err := pcgroups.DeleteElastic(context.Background(), h.js, schema.StreamEvents, DefaultConfig().Durable); err != nil {
		t.Fatal(err)
	}
	h.eventually("the member joined again", func() (bool, string) {
		n := metricValue(a.s.m.restarts)
		return n >= 1, fmt.Sprintf("restarts %v", n)
	})
	h.waitConsumer("a")
	select {
	case err := <-a.done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
}

// TestRejoinForgetsPartitionsLost: a member whose consumer failed joins
// again, and its partitions moved meanwhile. It forgets the numbers of those
// it lost as it joins, as it does when they move while it runs: it kept
// them, and went on writing their signals, stale, over their new owner's.
// Here the group's configuration is changed in a way pcgroups refuses (it
// stops the member, and joining fails until the configuration is written
// back), then written back as it was with b beside a.
func TestRejoinForgetsPartitionsLost(t *testing.T) {
	h := startServer(t, sec(12))
	ctx := context.Background()
	if err := ensureGroup(ctx, h.js, groupConfig("x", "a")); err != nil {
		t.Fatal(err)
	}
	a := h.join(groupConfig("a")) // the membership as it is: a alone
	h.waitConsumer("a")
	h.rates(0, 10, 1)
	h.takenBy(a)
	h.waitRates(1, "a alone")
	h.gauge(a, "numbers", a.s.m.numbers, len(testNumbers))
	kv, err := h.js.KeyValue(ctx, groupBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := groupKey(DefaultConfig().Durable)
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var gc pcgroups.ElasticConsumerGroupConfig
	if err := json.Unmarshal(e.Value(), &gc); err != nil {
		t.Fatal(err)
	}
	// A change pcgroups refuses (its buffer), which leaves the membership:
	// stage 2's own watch of it changes nothing.
	bad := gc
	bad.MaxBufferedMsgs++
	badJSON, err := json.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, badJSON); err != nil {
		t.Fatal(err)
	}
	h.eventually("a stopped", func() (bool, string) {
		n := metricValue(a.s.m.restarts)
		return n >= 1, fmt.Sprintf("restarts %v", n)
	})
	gc.Members = []string{"a", "b"}
	fixed, err := json.Marshal(gc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, fixed); err != nil {
		t.Fatal(err)
	}
	h.gauge(a, "partitions", a.s.m.partitions, testPartitions/2)
	h.gauge(a, "numbers", a.s.m.numbers, len(ofA))
}

// SetMembers sets the membership exactly, and leaves it when it is equal.
func TestSetMembers(t *testing.T) {
	h := startServer(t, sec(1))
	ctx := context.Background()
	if err := ensureGroup(ctx, h.js, groupConfig("a", "a", "b")); err != nil {
		t.Fatal(err)
	}
	members := func() []string {
		gc, err := pcgroups.GetElasticConsumerGroupConfig(ctx, h.js, schema.StreamEvents, DefaultConfig().Durable)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(slices.Values(gc.Members))
	}
	if got := members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("members %v", got)
	}
	for _, want := range [][]string{{"a", "c"}, {"c"}, {"a", "b", "c"}, {"a", "b", "c"}} {
		if err := SetMembers(ctx, h.js, DefaultConfig().Durable, want); err != nil {
			t.Fatal(err)
		}
		if got := members(); !slices.Equal(got, want) {
			t.Fatalf("members %v, want %v", got, want)
		}
	}
}

func TestConfigPartitions(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string // "" for none
	}{
		{"default", func(*Config) {}, ""},
		{"group", func(c *Config) { c.Partitions, c.Member, c.Members = 16, "a", []string{"a", "b"} }, ""},
		{"no members", func(c *Config) { c.Partitions, c.Member = 16, "a" }, ""},
		{"member without partitions", func(c *Config) { c.Member = "a" }, "need partitions"},
		{"negative", func(c *Config) { c.Partitions = -1 }, "between 0 and"},
		{"too many", func(c *Config) { c.Partitions, c.Member = 10_000, "a" }, "between 0 and"},
		{"no member", func(c *Config) { c.Partitions = 16 }, "member must not be empty"},
		{"bad member", func(c *Config) { c.Partitions, c.Member = 16, "a.b" }, "member name"},
		{"bad group", func(c *Config) { c.Partitions, c.Member, c.Durable = 16, "a", "g>" }, "names the consumer group"},
		{"filters", func(c *Config) {
			c.Partitions, c.Member, c.FilterSubjects = 16, "a", []string{"wahook.events.1.>"}
		}, "filter subjects"},
		{"not a member", func(c *Config) { c.Partitions, c.Member, c.Members = 16, "a", []string{"b"} }, "must be one of"},
		{"twice", func(c *Config) { c.Partitions, c.Member, c.Members = 16, "a", []string{"a", "a"} }, "twice"},
		{"outnumber", func(c *Config) { c.Partitions, c.Member, c.Members = 1, "a", []string{"a", "b"} }, "outnumber"},
		{"coalesce past the ack wait", func(c *Config) { c.Coalesce, c.Refresh = 10*time.Second, 10*time.Second }, "quarter of the ack wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
}

package stage2

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// t0 is Meta's time of the tests' first events.
var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// clock is a settable clock for Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// harness is a JetStream server with the EVENTS stream and a running stage 2.
type harness struct {
	t     testing.TB
	url   string
	srv   *schematest.JetStream
	nc    *nats.Conn
	js    jetstream.JetStream
	s     *Stage2
	clock *clock
	done  chan error
	stop  context.CancelFunc
	sent  atomic.Int64 // EVENTS messages published
	cfg   Config
	// warnings has what every stage 2 run logged at warn and above.
	warnings *observer.ObservedLogs
	warnCore zapcore.Core
}

func start(t testing.TB, at time.Time, edit func(*Config)) *harness {
	t.Helper()
	h := startServer(t, at)
	cfg := DefaultConfig()
	cfg.Now = h.clock.Now
	if edit != nil {
		edit(&cfg)
	}
	h.cfg = cfg
	h.run()
	t.Cleanup(h.close)
	return h
}

// startServer starts a JetStream server with the EVENTS stream, and no
// stage 2.
func startServer(t testing.TB, at time.Time) *harness {
	t.Helper()
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := processor.EnsureEventsStream(ctx, js, processor.DefaultEventsConfig(), false); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, url: srv.URL(), srv: srv, nc: nc, js: js, clock: &clock{now: at}, done: make(chan error, 1)}
}

// viaProxy connects to the server through a proxy the test can make lose
// messages, and returns the proxy and a JetStream on that connection.
func (h *harness) viaProxy() (*testutil.NATSProxy, jetstream.JetStream) {
	h.t.Helper()
	proxy := testutil.StartNATSProxy(h.t, h.url)
	nc, err := nats.Connect(proxy.URL)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	return proxy, js
}

// run starts a new stage 2 and waits for its consumer.
func (h *harness) run() {
	h.t.Helper()
	if h.warnings == nil {
		h.warnCore, h.warnings = observer.New(zap.WarnLevel)
	}
	log := zap.New(h.warnCore)
	if tt, ok := h.t.(*testing.T); ok {
		log = zap.New(zapcore.NewTee(zaptest.NewLogger(tt).Core(), h.warnCore))
	}
	var err error
	h.s, err = New(h.cfg, h.js, prometheus.NewRegistry(), log)
	if err != nil {
		h.t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.done <- h.s.Run(runCtx) }()
	// The consumer delivers what is published once it exists.
	stream, name := schema.StreamEvents, h.cfg.Durable
	if h.cfg.Partitions > 0 {
		stream, name = groupStream(h.cfg.Durable), h.cfg.Member
	}
	h.eventually("the consumer exists", func() (bool, string) {
		_, err := h.js.Consumer(context.Background(), stream, name)
		return err == nil, fmt.Sprint(err)
	})
}

// restart stops stage 2 and starts a new one on the same server: its
// durable consumer resumes, its in-memory state is gone.
func (h *harness) restart() {
	h.t.Helper()
	h.close()
	h.sent.Store(0)
	h.run()
}

func (h *harness) close() {
	if h.stop == nil {
		return
	}
	if err := h.closeErr(); err != nil {
		h.t.Errorf("Run: %v", err)
	}
}

// closeErr stops stage 2 and returns what Run returned (a test failed if
// it did not return).
func (h *harness) closeErr() error {
	h.t.Helper()
	h.stop()
	h.stop = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(15 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// eventually polls cond until it holds, for up to 15 s.
func (h *harness) eventually(what string, cond func() (bool, string)) {
	h.t.Helper()
	testutil.Eventually(h.t, 15*time.Second, what, cond)
}

// publish publishes rows as stage 1 does: {"kind","v":1,"row"} on the
// row's per-number subject with Nats-Msg-Id = msgID (the event id unless
// a test replays it under another id).
func (h *harness) publish(k schema.Kind, number, msgID string, row any) {
	h.t.Helper()
	h.publishTo(h.js, k, number, msgID, row)
}

// publishTo publishes like publish, through js.
func (h *harness) publishTo(js jetstream.JetStream, k schema.Kind, number, msgID string, row any) {
	h.t.Helper()
	data, err := json.Marshal(processor.Event{Kind: k, V: 1, Row: row})
	if err != nil {
		h.t.Fatal(err)
	}
	m := &nats.Msg{Subject: schema.EventsSubject(number, k), Data: data, Header: nats.Header{schema.HeaderMsgID: []string{msgID}}}
	if _, err := js.PublishMsgAsync(m); err != nil {
		h.t.Fatal(err)
	}
	h.sent.Add(1)
}

// flushed waits for the publishes' acks, then until stage 2 has taken every
// published event.
func (h *harness) flushed() {
	h.t.Helper()
	select {
	case <-h.js.PublishAsyncComplete():
	case <-time.After(15 * time.Second):
		h.t.Fatal("publish acks did not come")
	}
	h.eventually("stage 2 takes every event", func() (bool, string) {
		n, sent := int64(metricValue(h.s.m.events)), h.sent.Load()
		return n >= sent, fmt.Sprintf("%d of %d", n, sent)
	})
}

func (h *harness) count(result string) int {
	return int(metricValue(h.s.m.events.WithLabelValues(result)))
}

// signal reads the number's signal from the KV.
func (h *harness) signal(id string) (schema.PacingSignal, []byte, error) {
	kv, err := h.js.KeyValue(context.Background(), schema.BucketPacing)
	if err != nil {
		return schema.PacingSignal{}, nil, err
	}
	e, err := kv.Get(context.Background(), schema.PacingKey(id))
	if err != nil {
		return schema.PacingSignal{}, nil, err
	}
	var s schema.PacingSignal
	err = json.Unmarshal(e.Value(), &s)
	return s, e.Value(), err
}

// waitSignal polls the number's KV signal until ok holds.
func (h *harness) waitSignal(id, what string, ok func(schema.PacingSignal) bool) schema.PacingSignal {
	h.t.Helper()
	var s schema.PacingSignal
	h.eventually(what, func() (bool, string) {
		var raw []byte
		var err error
		s, raw, err = h.signal(id)
		if err != nil {
			return false, err.Error()
		}
		return ok(s), string(raw)
	})
	return s
}

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func (h *harness) sent1(number, id string, at time.Time) {
	h.publish(schema.KindStatus, number, id, schema.StatusRow{EventID: id, EventTime: at, PhoneNumberID: number, MessageID: "wamid." + id, Status: "sent", RecipientHash: "r"})
}

// delivered publishes the delivered status of the message that sent1 sent
// as event sentID.
func (h *harness) delivered(number, sentID string, at time.Time) {
	id := sentID + "-d"
	h.publish(schema.KindStatus, number, id, schema.StatusRow{EventID: id, EventTime: at, PhoneNumberID: number, MessageID: "wamid." + sentID, Status: "delivered", RecipientHash: "r"})
}

func (h *harness) inbound(number, id string, at time.Time) {
	h.publish(schema.KindInbound, number, id, schema.InboundRow{EventID: id, EventTime: at, PhoneNumberID: number, MessageID: "wamid." + id, Type: "text", FromHash: "u"})
}

// failed publishes a failed status of a message of its own (its first
// evidence: it counts as outbound).
func (h *harness) failed(number, id, recipient string, at time.Time, codes ...int32) {
	h.failedOf(number, id, id, recipient, at, codes...)
}

// failedOf publishes a failed status, event id, of the message that sent1
// sent as event sentID.
func (h *harness) failedOf(number, id, sentID, recipient string, at time.Time, codes ...int32) {
	h.publish(schema.KindStatus, number, id, schema.StatusRow{EventID: id, EventTime: at, PhoneNumberID: number, MessageID: "wamid." + sentID, Status: "failed", RecipientHash: recipient, ErrorCodes: codes})
}

// traffic publishes out sent statuses (each with its message's delivered
// status a second later, which does not count the message again) and in
// inbound messages per second of [from, to).
func (h *harness) traffic(number string, from, to, out, in int) {
	for s := from; s < to; s++ {
		for k := 0; k < out; k++ {
			id := fmt.Sprintf("%s-o-%d-%d", number, s, k)
			h.sent1(number, id, sec(s))
			h.delivered(number, id, sec(s+1))
		}
		for k := 0; k < in; k++ {
			h.inbound(number, fmt.Sprintf("%s-i-%d-%d", number, s, k), sec(s))
		}
	}
}

// metricValue is the sum of the values of c's metrics.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		switch {
		case d.Counter != nil:
			sum += d.Counter.GetValue()
		case d.Gauge != nil:
			sum += d.Gauge.GetValue()
		}
	}
	return sum
}

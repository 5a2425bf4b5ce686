package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

const fixturesDir = "../testdata/webhooks"

// pipeline is stage 1 on a real embedded JetStream and a real ClickHouse.
type pipeline struct {
	t      testing.TB
	nats   *schematest.JetStream
	js     jetstream.JetStream
	db     *schematest.ClickHouseDB
	cfg    processor.Config
	writer *chwriter.Writer
	// faults, when set, stands between stage 1 and the writer.
	faults func(processor.Writer) processor.Writer
	// stageJS, when set, is the JetStream stage 1 uses instead of js.
	stageJS jetstream.JetStream
	norm    *processor.Normalizer
	numbers *processor.NumberMap
	cancel  context.CancelFunc
	done    chan error
	regs    []*prometheus.Registry // one per started instance
	ctx     context.Context
	running int
	// warnings has what every started instance logged at warn and above.
	warnCore zapcore.Core
	warnings *observer.ObservedLogs
}

func newPipeline(t testing.TB, db *schematest.ClickHouseDB) *pipeline {
	t.Helper()
	p := &pipeline{t: t, nats: schematest.StartJetStream(t), db: db}
	nc, err := nats.Connect(p.nats.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrations.Apply(ctx, db.Conn, db.Database); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := p.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: schema.StreamRaw, Subjects: []string{schema.SubjectRawAll}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	if err := processor.EnsureEventsStream(ctx, p.js, processor.DefaultEventsConfig(), false); err != nil {
		t.Fatal(err)
	}
	numbers, err := processor.NewNumberMap(ctx, p.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	p.numbers = numbers
	p.norm = processor.NewNormalizer(schema.NewHasher([]byte("test-key")))
	p.writer = chwriter.New(db.Conn, db.Database)
	p.cfg = processor.DefaultConfig()
	// Short flushes and waits, so that tests of outages finish quickly.
	p.cfg.FlushInterval = 100 * time.Millisecond
	p.cfg.AckWait = 5 * time.Second
	p.cfg.BackoffMin = 100 * time.Millisecond
	p.cfg.BackoffMax = 500 * time.Millisecond
	return p
}

// start runs stage 1 until the test ends or stop is called.
// start runs one more stage 1 instance on the shared durable consumer.
func (p *pipeline) start() {
	p.t.Helper()
	reg := prometheus.NewRegistry()
	var w processor.Writer = p.writer
	if p.faults != nil {
		w = p.faults(w)
	}
	if p.warnings == nil {
		p.warnCore, p.warnings = observer.New(zap.WarnLevel)
	}
	logger := zap.New(zapcore.NewTee(zaptest.NewLogger(p.t).Core(), p.warnCore))
	js := p.js
	if p.stageJS != nil {
		js = p.stageJS
	}
	s1, err := processor.NewStage1(p.cfg, js, w, p.norm, p.numbers, reg, logger)
	if err != nil {
		p.t.Fatal(err)
	}
	p.regs = append(p.regs, reg)
	if p.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p.ctx, p.cancel, p.done = ctx, cancel, make(chan error, 8)
		p.t.Cleanup(p.stop)
	}
	p.running++
	go func() { p.done <- s1.Run(p.ctx) }()
}

func (p *pipeline) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	for ; p.running > 0; p.running-- {
		if err := <-p.done; err != nil {
			p.t.Errorf("stage 1: %v", err)
		}
	}
	p.cancel = nil
}

// metric returns the value of a counter of instance i.
func (p *pipeline) metric(i int, name string) float64 {
	p.t.Helper()
	mfs, err := p.regs[i].Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

// publish stores a body in RAW as ingest does.
func (p *pipeline) publish(app string, body []byte) {
	p.t.Helper()
	p.publishAt(app, body, time.Now())
}

// publishAt publishes body as ingest would have received it at t (the
// minute of receipt is part of a value-level error's id).
func (p *pipeline) publishAt(app string, body []byte, t time.Time) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := &nats.Msg{Subject: schema.RawSubject(app), Data: body, Header: nats.Header{
		schema.HeaderMsgID:      []string{schema.RawMsgID(body)},
		schema.HeaderReceivedAt: []string{schema.FormatReceivedAt(t)},
		schema.HeaderApp:        []string{app},
	}}
	if _, err := p.js.PublishMsg(ctx, msg); err != nil {
		p.t.Fatalf("publish: %v", err)
	}
}

// drained waits until stage 1 has acked every RAW message.
func (p *pipeline) drained(timeout time.Duration) {
	p.t.Helper()
	testutil.Eventually(p.t, timeout, "stage 1 to ack every RAW message", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := p.js.Stream(ctx, schema.StreamRaw)
		var last uint64
		if err == nil {
			last = s.CachedInfo().State.LastSeq
		}
		cancel()
		info, err2 := p.consumerInfo()
		ok := err == nil && err2 == nil && info.AckFloor.Stream >= last && info.NumAckPending == 0
		return ok, fmt.Sprintf("last %d, info %+v, %v %v", last, info, err, err2)
	})
}

// consumerInfo returns the state of stage 1's consumer on the server.
func (p *pipeline) consumerInfo() (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.js.Consumer(ctx, schema.StreamRaw, p.cfg.Consumer)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// pulling waits until stage 1's consumer has n pull requests waiting: the
// instances started have asked for messages.
func (p *pipeline) pulling(n int, timeout time.Duration) {
	p.t.Helper()
	testutil.Eventually(p.t, timeout, fmt.Sprintf("%d pull requests waiting on stage 1's consumer", n), func() (bool, string) {
		info, err := p.consumerInfo()
		if err != nil {
			return false, err.Error()
		}
		return info.NumWaiting >= n, fmt.Sprintf("%d waiting", info.NumWaiting)
	})
}

func (p *pipeline) count(query string, args ...any) uint64 {
	p.t.Helper()
	q := strings.ReplaceAll(query, "{db}", p.db.Database)
	var n uint64
	if err := p.db.Conn.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		p.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// codeCounts returns code -> count from a query yielding (code, count).
func (p *pipeline) codeCounts(query string) map[string]uint64 {
	p.t.Helper()
	q := strings.ReplaceAll(query, "{db}", p.db.Database)
	rows, err := p.db.Conn.Query(context.Background(), q)
	if err != nil {
		p.t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var k string
		var n uint64
		if err := rows.Scan(&k, &n); err != nil {
			p.t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

// expectedTotals adds up the facts of every fixture.
type expectedTotals struct {
	files                                                             []string
	statuses, inbound                                                 uint64
	statusValues, statusCodes, valueCodes, inboundCodes, inboundTypes map[string]uint64
}

func loadExpected(t testing.TB) expectedTotals {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixturesDir, "expected.json"))
	if err != nil {
		t.Fatalf("test bodies (testdata/webhooks): %v", err)
	}
	var facts map[string]struct {
		StatusEvents      uint64            `json:"status_events"`
		Statuses          map[string]uint64 `json:"statuses"`
		StatusErrorCodes  map[string]uint64 `json:"status_error_codes"`
		ValueErrorCodes   map[string]uint64 `json:"value_error_codes"`
		InboundMessages   uint64            `json:"inbound_messages"`
		InboundTypes      map[string]uint64 `json:"inbound_types"`
		InboundErrorCodes map[string]uint64 `json:"inbound_error_codes"`
		Sig               string            `json:"x_hub_signature_256"`
	}
	if err := json.Unmarshal(raw, &facts); err != nil {
		t.Fatal(err)
	}
	e := expectedTotals{statusValues: map[string]uint64{}, statusCodes: map[string]uint64{}, valueCodes: map[string]uint64{},
		inboundCodes: map[string]uint64{}, inboundTypes: map[string]uint64{}}
	add := func(dst, src map[string]uint64) {
		for k, v := range src {
			dst[k] += v
		}
	}
	for name, f := range facts {
		if f.Sig == "" {
			continue
		}
		e.files = append(e.files, name)
		e.statuses += f.StatusEvents
		e.inbound += f.InboundMessages
		add(e.statusValues, f.Statuses)
		add(e.statusCodes, f.StatusErrorCodes)
		add(e.valueCodes, f.ValueErrorCodes)
		add(e.inboundCodes, f.InboundErrorCodes)
		add(e.inboundTypes, f.InboundTypes)
	}
	sort.Strings(e.files)
	return e
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func equalCounts(t testing.TB, what string, got, want map[string]uint64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// checkFixtureTotals asserts that ClickHouse holds exactly the facts of
// every fixture once, however often they were written.
func (p *pipeline) checkFixtureTotals(e expectedTotals) {
	p.t.Helper()
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != e.statuses {
		p.t.Errorf("status events: got %d, want %d", got, e.statuses)
	}
	equalCounts(p.t, "statuses", p.codeCounts("SELECT status, uniqExact(event_id) FROM {db}.status_events GROUP BY status"), e.statusValues)
	equalCounts(p.t, "status error codes", p.codeCounts(
		"SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin = 'status' GROUP BY code"), e.statusCodes)
	equalCounts(p.t, "value error codes", p.codeCounts(
		"SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin IN ('value', 'history') GROUP BY code"), e.valueCodes)
	equalCounts(p.t, "inbound error codes", p.codeCounts(
		"SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin = 'inbound' GROUP BY code"), e.inboundCodes)
	equalCounts(p.t, "inbound types", p.codeCounts("SELECT type, uniqExact(event_id) FROM {db}.inbound_messages GROUP BY type"), e.inboundTypes)
	// The failure distribution from the aggregate table agrees, exactly.
	equalCounts(p.t, "failures_by_minute", p.codeCounts(
		"SELECT toString(code), uniqExactMerge(error_keys) FROM {db}.failures_by_minute WHERE origin = 'status' GROUP BY code"), e.statusCodes)
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL"); got != 0 {
		p.t.Errorf("dead letters: got %d, want 0", got)
	}
}

// TestStage1Fixtures: every test body through RAW -> stage 1 ->
// ClickHouse, every fact found exactly; then the same bodies again (a
// redelivery), the same statuses inside other POSTs, and a replay of RAW:
// each event still counts once.
func TestStage1Fixtures(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	e := loadExpected(t)
	if len(e.files) != 40 {
		t.Fatalf("found %d fixtures, want the 40 of testdata/webhooks", len(e.files))
	}
	p.start()
	for _, name := range e.files {
		p.publish("default", readFixture(t, name))
	}
	p.drained(30 * time.Second)
	p.checkFixtureTotals(e)

	// Every event is on WAHOOK_EVENTS once, on its number's subject, with
	// Nats-Msg-Id = its event id.
	events := p.count("SELECT uniqExact(event_id) FROM {db}.status_events") + p.count("SELECT uniqExact(event_id) FROM {db}.inbound_messages") +
		p.count("SELECT uniqExact(event_id) FROM {db}.management_events") +
		p.count("SELECT uniqExact(event_id, error_index) FROM {db}.errors WHERE origin IN ('value', 'history')")
	ctx := context.Background()
	es, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := es.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != events {
		t.Errorf("WAHOOK_EVENTS holds %d messages, want one per event: %d", info.State.Msgs, events)
	}
	last, err := es.GetLastMsgForSubject(ctx, schema.EventsSubject("120447163309875", schema.KindStatus))
	if err != nil {
		t.Fatalf("no status event of 120447163309875: %v", err)
	}
	var ev struct {
		Kind string `json:"kind"`
		Row  struct {
			EventID       string `json:"event_id"`
			PhoneNumberID string `json:"phone_number_id"`
		} `json:"row"`
	}
	if err := json.Unmarshal(last.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != "status" || ev.Row.PhoneNumberID != "120447163309875" || last.Header.Get(schema.HeaderMsgID) != ev.Row.EventID {
		t.Errorf("event %+v with Nats-Msg-Id %q: want kind status, its number, and the event id as message id", ev, last.Header.Get(schema.HeaderMsgID))
	}
	if got := p.count("SELECT count() FROM {db}.status_events WHERE event_id = ?", ev.Row.EventID); got == 0 {
		t.Errorf("event %s on EVENTS is not in ClickHouse", ev.Row.EventID)
	}

	// A quality event carries only the display number; it reaches the
	// phone number id learned from message webhooks.
	if got := p.count(`SELECT count() FROM {db}.management_events FINAL
		WHERE kind = 'number' AND event = 'THROUGHPUT_UPGRADE' AND phone_number_id = '107655290331184'`); got != 1 {
		t.Errorf("THROUGHPUT_UPGRADE for 107655290331184: got %d rows, want 1", got)
	}
	// The unknown field is kept verbatim.
	if got := p.count(`SELECT count() FROM {db}.management_events FINAL
		WHERE field = 'conversation_health_update' AND position(raw, '"health_score": 0.82') > 0
		AND position(raw, '"low_block_rate"') > 0 AND position(raw, '"end": 1781517600') > 0`); got != 1 {
		t.Errorf("unknown field rows: got %d, want 1", got)
	}

	// The same events inside other POSTs (other bytes: another RAW id, so
	// RAW's duplicate check does not catch them), and a replay of RAW.
	for _, name := range e.files {
		p.publish("other-app", append(readFixture(t, name), '\n', ' '))
	}
	p.drained(30 * time.Second)
	p.stop()
	res, err := processor.Replay(context.Background(), p.cfg, p.js, p.writer, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if res.Bodies != 2*len(e.files) {
		t.Errorf("replayed %d bodies, want %d", res.Bodies, 2*len(e.files))
	}
	p.checkFixtureTotals(e)
	// The replayed copy of the number-level event is stored with the id
	// stage 1 found for its display number: the table keeps the last copy.
	if got := p.count(`SELECT count() FROM {db}.management_events FINAL
		WHERE kind = 'number' AND event = 'THROUGHPUT_UPGRADE' AND phone_number_id = '107655290331184'`); got != 1 {
		t.Errorf("THROUGHPUT_UPGRADE for 107655290331184 after the replay: got %d rows, want 1", got)
	}
	if got := p.count("SELECT count() FROM {db}.status_events"); got < 3*e.statuses {
		t.Errorf("raw status rows: got %d, want at least %d (the test must really write duplicates)", got, 3*e.statuses)
	}
	// Batches of one body each, by their bytes: the same totals.
	small := p.cfg
	small.BatchBytes = 1
	res, err = processor.Replay(context.Background(), small, p.js, p.writer, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("replay in batches of one body: %v", err)
	}
	if res.Batches != res.Bodies || res.Bodies != 2*len(e.files) {
		t.Errorf("replay with BatchBytes 1: %d batches of %d bodies, want %d of each", res.Batches, res.Bodies, 2*len(e.files))
	}
	p.checkFixtureTotals(e)
}

// TestStage1DeadLetters: a signed body that is not JSON, one that is JSON
// but no webhook, and one bad status among good ones.
func TestStage1DeadLetters(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	p.publish("default", []byte("this is not json"))
	p.publish("default", []byte(`{"object":"whatsapp_business_account"}`))
	p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[
		{"id":"wamid.a","status":"sent","timestamp":"1781514312","recipient_id":"4915155500001"},
		{"id":"wamid.b","status":"sent","timestamp":{"bad":true},"recipient_id":"4915155500002"},
		{"id":"wamid.c","status":"delivered","timestamp":"1781514313","recipient_id":"4915155500003"}]}}]}]}`))
	fixture := readFixture(t, "status_failed_131048.json")
	p.publish("default", fixture) // the stream moves on past the bad bodies
	p.drained(30 * time.Second)
	reasons := p.codeCounts("SELECT concat(reason, ' ', item), count() FROM {db}.dead_letters FINAL GROUP BY reason, item")
	want := map[string]uint64{"not_json ": 1, "no_entry ": 1, "bad_item entry[0].changes[0].value.statuses[1]": 1}
	equalCounts(t, "dead letters by reason and item", reasons, want)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id IN ('wamid.a', 'wamid.c')"); got != 2 {
		t.Errorf("good statuses beside the bad one: got %d, want 2", got)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE reason = 'not_json' AND body = 'this is not json'"); got != 1 {
		t.Errorf("the not-JSON body is not kept verbatim")
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.errors WHERE code = 131048"); got != 1 {
		t.Errorf("the body after the bad ones: 131048 rows %d, want 1", got)
	}
	if got := p.metric(0, "wahook_processor_dead_letters_total"); got != 3 {
		t.Errorf("dead letters counted: got %v, want 3", got)
	}
}

// TestStage1ClickHouseOutage stops ClickHouse while bodies keep coming, then
// starts it again: nothing is lost, nothing counted twice.
func TestStage1ClickHouseOutage(t *testing.T) {
	srv := schematest.StartClickHouse(t)
	p := newPipeline(t, srv.Database(t))
	p.start()
	const n = 300
	body := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.outage-%d","status":"failed","timestamp":"%d","recipient_id":"4915155500734","errors":[{"code":130429,"title":"Rate limit hit"}]}]}}]}]}`, i, 1781514312+i))
	}
	for i := 0; i < n/3; i++ {
		p.publish("default", body(i))
	}
	p.drained(30 * time.Second)
	srv.Stop()
	for i := n / 3; i < 2*n/3; i++ {
		p.publish("default", body(i))
	}
	testutil.Eventually(t, 15*time.Second, "stage 1 meeting the outage", func() (bool, string) {
		f := p.metric(0, "wahook_processor_write_failures_total")
		return f > 0, fmt.Sprintf("%v write failures", f)
	})
	// The events do not wait for ClickHouse: those of the bodies taken
	// during the outage are on EVENTS already, each once.
	var events uint64
	testutil.Poll(15*time.Second, func() bool {
		st, err := p.js.Stream(context.Background(), schema.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		events = st.CachedInfo().State.Msgs
		return events >= 2*n/3
	})
	if events != 2*n/3 {
		t.Fatalf("events on %s during the ClickHouse outage: got %d, want %d", schema.StreamEvents, events, 2*n/3)
	}
	srv.Start()
	for i := 2 * n / 3; i < n; i++ {
		p.publish("default", body(i))
	}
	p.drained(60 * time.Second)
	if got := p.metric(0, "wahook_processor_write_failures_total"); got == 0 {
		t.Fatal("no write failed during the outage: the test did not test an outage")
	}
	// The bodies of the failed batches were normalized again and again;
	// each counts once, when written.
	if got := p.metric(0, "wahook_processor_bodies_total"); got != n {
		t.Errorf("bodies counted: got %v, want %d", got, n)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Fatalf("statuses after the outage: got %d, want %d", got, n)
	}
	if got := p.count("SELECT toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute WHERE code = 130429"); got != n {
		t.Fatalf("130429 failures after the outage: got %d, want %d", got, n)
	}
}

// TestStage1EventsOutage: while EVENTS does not answer (here it is gone;
// in a cluster, its leader died and no new one is elected yet: "no
// responders" either way) and ClickHouse and the connection are fine,
// bodies fail on every delivery, far past --max-deliver, and still none is
// made a dead letter: an outage delays them. Once EVENTS answers again,
// each is stored and published once.
func TestStage1EventsOutage(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.start()
	const n = 60
	for i := range n / 2 {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.before-%d", i), 1781514312+i))
	}
	p.drained(30 * time.Second)
	ctx := context.Background()
	if err := p.js.DeleteStream(ctx, schema.StreamEvents); err != nil {
		t.Fatal(err)
	}
	for i := range n / 2 {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.during-%d", i), 1781514400+i))
	}
	// Every body of the outage delivered more than --max-deliver times.
	testutil.Eventually(t, 30*time.Second, "bodies redelivered past --max-deliver", func() (bool, string) {
		info, err := p.consumerInfo()
		if err != nil {
			return false, err.Error()
		}
		return info.NumRedelivered >= n/2 && p.metric(0, "wahook_processor_write_failures_total") >= 4,
			fmt.Sprintf("%d redelivered, %v write failures", info.NumRedelivered, p.metric(0, "wahook_processor_write_failures_total"))
	})
	time.Sleep(2 * p.cfg.BackoffMax) // deliveries past the limit, one by one
	if got := p.metric(0, "wahook_processor_dead_letters_total"); got != 0 {
		t.Fatalf("%v dead letters while EVENTS did not answer, want none", got)
	}
	if err := processor.EnsureEventsStream(ctx, p.js, processor.DefaultEventsConfig(), false); err != nil {
		t.Fatal(err)
	}
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.during-')"); got != n/2 {
		t.Errorf("statuses of the outage stored: %d, want %d", got, n/2)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters"); got != 0 {
		t.Errorf("%d dead letters, want none", got)
	}
	st, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != n/2 {
		t.Errorf("events on %s after the outage: %d, want %d (the bodies of the outage, once each)", schema.StreamEvents, got, n/2)
	}
}

// readOnly answers every write of statuses with the exception a replicated
// table gives while it cannot reach ZooKeeper (TABLE_IS_READ_ONLY), as long
// as on is set, while the server itself answers and dead_letters takes
// writes (a replica can lose one table's ZooKeeper session, not all).
type readOnly struct {
	processor.Writer
	on      atomic.Bool
	refused atomic.Int64
}

func (r *readOnly) Write(ctx context.Context, rows *schema.Rows) error {
	if r.on.Load() && len(rows.Statuses) > 0 {
		r.refused.Add(1)
		return fmt.Errorf("chwriter: insert %d rows into status_events: prepare: %w", len(rows.Statuses),
			&clickhouse.Exception{Code: 242, Name: "DB::Exception", Message: "Table is in readonly mode"})
	}
	return r.Writer.Write(ctx, rows)
}

// TestStage1ReadOnlyClickHouse: while ClickHouse answers but its tables
// take no writes (ZooKeeper away: TABLE_IS_READ_ONLY), bodies fail on
// every delivery, far past --max-deliver, and none is made a dead letter:
// an outage delays them. Once the tables take writes again, each is stored
// once.
func TestStage1ReadOnlyClickHouse(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	w := &readOnly{}
	w.on.Store(true)
	p.faults = func(inner processor.Writer) processor.Writer {
		w.Writer = inner
		return w
	}
	p.start()
	began := time.Now()
	const n = 30
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.readonly-%d", i), 1781514312+i))
	}
	testutil.Eventually(t, 30*time.Second, "bodies redelivered past --max-deliver", func() (bool, string) {
		info, err := p.consumerInfo()
		if err != nil {
			return false, err.Error()
		}
		return info.NumRedelivered >= n && w.refused.Load() >= 6,
			fmt.Sprintf("%d redelivered, %d writes refused", info.NumRedelivered, w.refused.Load())
	})
	time.Sleep(2 * p.cfg.BackoffMax) // deliveries past the limit, one by one
	if got := p.metric(0, "wahook_processor_dead_letters_total"); got != 0 {
		t.Fatalf("%v dead letters while the tables were read-only, want none", got)
	}
	w.on.Store(false)
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.readonly-')"); got != n {
		t.Errorf("statuses stored after the outage: %d, want %d", got, n)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters"); got != 0 {
		t.Errorf("%d dead letters, want none", got)
	}
	// Each refused body was not logged on its own: one line per 10 s
	// at most, with the count.
	lines := p.warnings.FilterMessage("body not stored on its own, will retry").All()
	var counted int64
	for _, l := range lines {
		n, _ := l.ContextMap()["bodies_since_last_line"].(int64)
		counted += n
	}
	if most := 1 + int(time.Since(began)/(10*time.Second)); len(lines) == 0 || len(lines) > most || counted > w.refused.Load() {
		t.Errorf("%d writes refused, logged in %d lines counting %d bodies; want 1 to %d lines, counting no more bodies than writes refused", w.refused.Load(), len(lines), counted, most)
	}
}

// TestStage1HungClickHouse: while a write hangs (the server is frozen, so
// the connection stays open and the insert waits), stage 1 keeps reading
// and publishing events: a batch that falls due meanwhile grows instead of
// stopping the reader. Once the server resumes, every event is stored
// once.
func TestStage1HungClickHouse(t *testing.T) {
	srv := schematest.StartClickHouse(t)
	p := newPipeline(t, srv.Database(t))
	// A write may hang 20 s (AckWait/2) and a batch grow 10 s (AckWait/4)
	// before the reader waits for the writer: what the test does while the
	// server is frozen (120 publishes, each waiting for its ack, and the
	// flush intervals) must fit in the 10 s on a busy machine.
	p.cfg.AckWait = 40 * time.Second
	p.start()
	body := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.hung-%d","status":"delivered","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i))
	}
	const per = 40
	events := func() uint64 {
		st, err := p.js.Stream(context.Background(), schema.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}
	waitEvents := func(want uint64, within time.Duration) {
		t.Helper()
		testutil.Eventually(t, within, fmt.Sprintf("%d events on %s", want, schema.StreamEvents), func() (bool, string) {
			n := events()
			return n >= want, fmt.Sprint(n)
		})
	}
	for i := 0; i < per; i++ {
		p.publish("default", body(i))
	}
	p.drained(30 * time.Second)

	srv.Freeze()
	t.Cleanup(srv.Thaw)
	frozen := time.Now()
	// A: its batch falls due and goes to the writer, whose insert hangs.
	for i := per; i < 2*per; i++ {
		p.publish("default", body(i))
	}
	waitEvents(2*per, p.cfg.AckWait/4-time.Since(frozen))
	// The batch falling due (FlushInterval after its first body) is what
	// is tested: nothing outside stage 1 shows it, so the test lets the
	// interval pass, here and below.
	time.Sleep(3 * p.cfg.FlushInterval)
	// B: its batch falls due while the writer hangs.
	for i := 2 * per; i < 3*per; i++ {
		p.publish("default", body(i))
	}
	time.Sleep(3 * p.cfg.FlushInterval)
	// C: read and published all the same, long before the write's
	// deadline (20 s) would free a blocked reader.
	for i := 3 * per; i < 4*per; i++ {
		p.publish("default", body(i))
	}
	waitEvents(4*per, p.cfg.AckWait/4-time.Since(frozen))
	if d := time.Since(frozen); d > p.cfg.AckWait/4 {
		t.Fatalf("the test took %v while frozen, past the batch's age limit: it proves nothing", d)
	}
	srv.Thaw()
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != 4*per {
		t.Fatalf("statuses after the server resumed: got %d, want %d", got, 4*per)
	}
	if got := p.count("SELECT count() FROM {db}.status_events FINAL"); got != 4*per {
		t.Fatalf("status rows after the server resumed (FINAL): got %d, want %d", got, 4*per)
	}
	if got := events(); got != 4*per {
		t.Fatalf("events on %s: got %d, want %d", schema.StreamEvents, got, 4*per)
	}
}

// TestStage1TwoInstances: two instances on one durable consumer share the
// work, and every event is stored exactly once.
func TestStage1TwoInstances(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxAckPending = 100 // small prefetch, so that both get work
	p.cfg.BatchRows = 200
	p.start()
	p.start()
	// Both must be pulling before the bodies come, or the first may take
	// them all before the second has asked (seen under -race -count=3).
	p.pulling(2, 30*time.Second)
	const n = 2000
	for i := 0; i < n; i++ {
		p.publish("default", []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"15557810009","phone_number_id":"109"},"statuses":[{"id":"wamid.two-%d","status":"read","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i)))
	}
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Fatalf("statuses: got %d, want %d", got, n)
	}
	a, b := p.metric(0, "wahook_processor_bodies_total"), p.metric(1, "wahook_processor_bodies_total")
	if a == 0 || b == 0 {
		t.Fatalf("work not shared: instance bodies %v and %v", a, b)
	}
	t.Logf("bodies per instance: %v and %v", a, b)
}

// TestStage1ConsumerUnfiltered checks the upgrade from a consumer that
// filtered on every RAW subject (releases before 2026-12-04) to the
// unfiltered one stage 1 now asks for: the durable keeps its position, so
// the bodies acked under the old filter are not delivered again and the
// others are, once each.
func TestStage1ConsumerUnfiltered(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	// No redelivery of a body whose write is slow on a loaded machine (the
	// shared pipeline's AckWait is 5 s): the test counts redeliveries.
	p.cfg.AckWait = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := p.cfg
	oldCfg := jetstream.ConsumerConfig{
		Durable: old.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: old.AckWait,
		MaxAckPending: old.MaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: schema.SubjectRawAll, MaxDeliver: -1,
	}
	cons, err := p.js.CreateOrUpdateConsumer(ctx, schema.StreamRaw, oldCfg)
	if err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"15557810009","phone_number_id":"109"},"statuses":[{"id":"wamid.upgrade-%d","status":"sent","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i))
	}
	for i := 0; i < 5; i++ {
		p.publish("default", body(i))
	}
	// The old release took and acked the first two.
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 2 {
		t.Fatalf("the old consumer took %d bodies, want 2", acked)
	}
	p.start()
	p.drained(30 * time.Second)
	info, err := p.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.FilterSubject != "" || len(info.Config.FilterSubjects) != 0 {
		t.Fatalf("consumer still filtered: %q %q", info.Config.FilterSubject, info.Config.FilterSubjects)
	}
	if got := p.count("SELECT count() FROM {db}.status_events FINAL"); got != 3 {
		t.Fatalf("status rows: got %d, want 3 (the bodies the old consumer had not acked)", got)
	}
	if got := p.count("SELECT count() FROM {db}.status_events WHERE message_id IN ('wamid.upgrade-0', 'wamid.upgrade-1')"); got != 0 {
		t.Fatalf("%d rows of bodies acked under the old filter: delivered again", got)
	}
	if info.NumRedelivered != 0 {
		t.Fatalf("%d redelivered", info.NumRedelivered)
	}
}

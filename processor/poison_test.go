package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
	"github.com/wahook/wahook/schema/schematest"
)

// statusBody is a body of one sent status of number id with message id
// msgID.
func statusBody(id, display, msgID string, ts int) []byte {
	return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},"statuses":[{"id":%q,"status":"sent","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`,
		display, id, msgID, ts))
}

// publishAround publishes n bodies of a sent status each (message ids
// wamid.good-0 and on), and after the middle one a body of message id bad.
func (p *pipeline) publishAround(n int, bad string) {
	p.t.Helper()
	for i := 0; i < n; i++ {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
		if i == n/2 {
			p.publish("default", statusBody("107655290331184", "15557810001", bad, 1781514300))
		}
	}
}

// TestStage1ImpossibleIDs: a phone number id, a display number or a WABA id
// of thousands of characters (it would be a subject token or a KV key longer
// than nats-server takes, which closes the connection) makes its change a
// dead letter with its path; stage 1 goes on, and the bodies after it are
// stored.
func TestStage1ImpossibleIDs(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	p.publish("default", statusBody(strings.Repeat("7", 5000), "15557810001", "wamid.long-id", 1781514312))
	p.publish("default", statusBody("107655290331184", strings.Repeat("5", 5000), "wamid.long-display", 1781514313))
	p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781514314,"changes":[{"field":"phone_number_quality_update","value":{"display_phone_number":"`+strings.Repeat("1", 5000)+`","event":"THROUGHPUT_UPGRADE","current_limit":"TIER_UNLIMITED"}}]}]}`))
	// A WABA id (an entry's id) of thousands of characters: its key in
	// wahook_accounts closed stage 2's connection, which ingest shares.
	p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"`+strings.Repeat("2", 5000)+`","time":1781514314,"changes":[{"field":"account_update","value":{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}}]}]}`))
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.after", 1781514315))
	p.drained(30 * time.Second)
	got := p.codeCounts("SELECT concat(reason, ' ', item), count() FROM {db}.dead_letters FINAL GROUP BY reason, item")
	equalCounts(t, "dead letters", got, map[string]uint64{"bad_item entry[0].changes[0]": 3, "bad_item entry[0]": 1})
	if n := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE position(error, 'WABA id') > 0 AND position(error, 'string of 5000 bytes') > 0"); n != 1 {
		t.Errorf("the long WABA id's dead letter does not name its length")
	}
	if n := p.count("SELECT count() FROM {db}.management_events WHERE length(waba_id) > 64"); n != 0 {
		t.Errorf("%d number or account events kept an impossible WABA id", n)
	}
	if n := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE position(error, 'value.metadata.phone_number_id') > 0 AND position(error, 'string of 5000 bytes') > 0"); n != 1 {
		t.Errorf("the long phone number id's dead letter does not name its path and length")
	}
	if n := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id = 'wamid.after'"); n != 1 {
		t.Errorf("the body after the impossible ids: %d statuses, want 1", n)
	}
	if n := p.count("SELECT count() FROM {db}.status_events WHERE length(phone_number_id) > 32 OR length(display_phone_number) > 40"); n != 0 {
		t.Errorf("%d statuses kept an impossible id", n)
	}
}

// TestStage1OversizedEvent: a status whose message id escapes in JSON to
// more than the server's max_payload (300,000 '<' become 1.8 MB of
// \u003c) was refused by EVENTS on every delivery and held its batch for
// ever. Its event goes out cut to fit, ClickHouse keeps the row whole, and
// the bodies beside it are stored.
func TestStage1OversizedEvent(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	huge := strings.Repeat("<", 300_000)
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.before", 1781514311))
	p.publish("default", statusBody("107655290331184", "15557810001", huge, 1781514312))
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.after", 1781514313))
	p.drained(30 * time.Second)
	if n := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id IN ('wamid.before', 'wamid.after')"); n != 2 {
		t.Errorf("bodies beside the oversized one: %d statuses, want 2", n)
	}
	if n := p.count("SELECT count() FROM {db}.status_events WHERE length(message_id) = 300000"); n == 0 {
		t.Errorf("ClickHouse does not hold the oversized status whole")
	}
	st, err := p.js.Stream(context.Background(), schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != 3 {
		t.Errorf("events on %s: %d, want 3", schema.StreamEvents, got)
	}
	if got := p.metric(0, "wahook_processor_write_failures_total"); got != 0 {
		t.Errorf("write failures: %v, want 0", got)
	}
}

// TestStage1OversizedAccountEvent: an account_update too large for EVENTS
// with its value (a large field beside its ban, or a ban date of 200 KB)
// went out without the value, or with it cut to invalid JSON, and stage 2,
// which reads the ban from it, counted it bad: the ban was lost. The event
// goes out with its event, ban and restrictions, each string cut to 64
// bytes; the row keeps the value whole.
func TestStage1OversizedAccountEvent(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	ctx := context.Background()
	st, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{
		"a large field beside the ban": `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE","waba_ban_date":"December 7, 2026"},"new_thing":"` + strings.Repeat("<", 300_000) + `"}`,
		"a large ban date":             `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE","waba_ban_date":"` + strings.Repeat("<", 200_000) + `"}}`,
	} {
		p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781514312,"changes":[{"field":"account_update","value":`+value+`}]}]}`))
		p.drained(30 * time.Second)
		m, err := st.GetLastMsgForSubject(ctx, schema.EventsSubject("", schema.KindAccount))
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Row schema.ManagementRow `json:"row"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		var u meta.AccountUpdate
		if err := json.Unmarshal([]byte(ev.Row.Raw), &u); err != nil || u.BanInfo == nil || u.BanInfo.WABABanState != "DISABLE" || u.Event != "DISABLED_UPDATE" ||
			len(u.BanInfo.WABABanDate) > 64 {
			t.Errorf("%s: the account event's value on EVENTS: %.200q (%v), want its event and ban", name, ev.Row.Raw, err)
		}
	}
	if n := p.count("SELECT count() FROM {db}.management_events WHERE field = 'account_update' AND length(raw) > 200000"); n != 2 {
		t.Errorf("ClickHouse holds %d of the 2 account events' values whole", n)
	}
}

// TestStage1OversizedValueError: a value-level error whose details escape
// in JSON to more than max_payload was refused by EVENTS on every delivery:
// its body, a good status with it, became a dead letter (retries
// exhausted). Its event goes out cut to fit, ClickHouse keeps the row
// whole, and the status beside it is stored.
func TestStage1OversizedValueError(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.start()
	huge := strings.Repeat("<", 300_000)
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.before", 1781514311))
	p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.beside","status":"sent","timestamp":"1781514312","recipient_id":"4915155500734"}],"errors":[{"code":131000,"title":"Something went wrong","error_data":{"details":"`+huge+`"}}]}}]}]}`))
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.after", 1781514313))
	p.drained(30 * time.Second)
	if n := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id IN ('wamid.before', 'wamid.beside', 'wamid.after')"); n != 3 {
		t.Errorf("statuses stored: %d, want 3 (the one beside the oversized error too)", n)
	}
	if n := p.count("SELECT count() FROM {db}.errors WHERE origin = 'value' AND code = 131000 AND length(details) = 300000"); n == 0 {
		t.Errorf("ClickHouse does not hold the oversized error whole")
	}
	if n := p.count("SELECT count() FROM {db}.dead_letters"); n != 0 {
		t.Errorf("dead letters: %d, want none", n)
	}
	st, err := p.js.Stream(context.Background(), schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != 4 {
		t.Errorf("events on %s: %d, want 4 (three statuses and the error)", schema.StreamEvents, got)
	}
}

// refuse is a writer that refuses every batch holding a status with
// message id bad, as a store refuses a row it cannot take, and passes
// the others to the real writer.
type refuse struct {
	processor.Writer
	bad     string
	refused atomic.Int64
	alone   atomic.Int64 // of the refusals, those of the status alone
}

func (r *refuse) Write(ctx context.Context, rows *schema.Rows) error {
	for i := range rows.Statuses {
		if rows.Statuses[i].MessageID == r.bad {
			r.refused.Add(1)
			if len(rows.Statuses) == 1 {
				r.alone.Add(1)
			}
			return errors.New("refused: a row the store cannot take")
		}
	}
	return r.Writer.Write(ctx, rows)
}

// TestStage1PoisonBody: a body that fails on every delivery while the
// stores answer no longer holds its batch-mates: the failed batch is
// written again in halves, the good bodies are stored at once, and the bad
// one becomes a dead letter (retries_exhausted) after --max-deliver
// deliveries, and is acked.
func TestStage1PoisonBody(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 3
	p.cfg.FlushInterval = 300 * time.Millisecond // batches of several bodies
	var w *refuse
	p.faults = func(inner processor.Writer) processor.Writer {
		w = &refuse{Writer: inner, bad: "wamid.poison"}
		return w
	}
	const n = 40
	p.publishAround(n, "wamid.poison")
	p.start()
	testutil.Eventually(t, 10*time.Second, "the good bodies beside a poison body stored", func() (bool, string) {
		got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.good-')")
		return got == uint64(n), fmt.Sprintf("%d of %d stored", got, n)
	})
	p.drained(30 * time.Second)
	if got := p.codeCounts("SELECT reason, count() FROM {db}.dead_letters FINAL GROUP BY reason"); fmt.Sprint(got) != fmt.Sprint(map[string]uint64{processor.ReasonRetriesExhausted: 1}) {
		t.Errorf("dead letters: %v, want one %s", got, processor.ReasonRetriesExhausted)
	}
	if n := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE position(body, 'wamid.poison') > 0 AND position(error, 'refused') > 0"); n != 1 {
		t.Errorf("the dead letter does not keep the body and the error")
	}
	if got := p.metric(0, "wahook_processor_retries_exhausted_total"); got != 1 {
		t.Errorf("retries exhausted: %v, want 1", got)
	}
	if got := w.refused.Load(); got < 3 {
		t.Errorf("the poison body was refused %d times, want at least --max-deliver (3)", got)
	}
	if got := p.metric(0, "wahook_processor_bodies_total"); got != n {
		t.Errorf("bodies counted: %v, want %d", got, n)
	}
}

// TestReplayPoisonBody: a replay meets the body stage 1 made a dead letter
// for, and the store refuses it again. The replay retried that batch
// without end and stored nothing after it; now it writes the batch in
// halves as stage 1 does, makes the body a dead letter again once it has
// failed --max-deliver times on its own, and finishes.
func TestReplayPoisonBody(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 3
	var w *refuse
	p.faults = func(inner processor.Writer) processor.Writer {
		w = &refuse{Writer: inner, bad: "wamid.poison"}
		return w
	}
	const n = 30
	p.publishAround(n, "wamid.poison")
	p.start()
	p.drained(30 * time.Second)
	p.stop()
	before := w.alone.Load()
	// Bodies received after the poison one, which the replay reaches only
	// past it.
	for i := n; i < n+10; i++ {
		p.publish("other-app", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := processor.Replay(ctx, p.cfg, p.js, w, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("replay: %v (%+v)", err, res)
	}
	if res.Bodies != n+11 || res.Rows != n+10 || res.DeadLetters != 1 {
		t.Errorf("replay: %d bodies, %d rows, %d dead letters; want %d, %d and 1", res.Bodies, res.Rows, res.DeadLetters, n+11, n+10)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.good-')"); got != n+10 {
		t.Errorf("good bodies stored: %d, want %d", got, n+10)
	}
	if got := p.codeCounts("SELECT reason, count() FROM {db}.dead_letters FINAL GROUP BY reason"); fmt.Sprint(got) != fmt.Sprint(map[string]uint64{processor.ReasonRetriesExhausted: 1}) {
		t.Errorf("dead letters: %v, want one %s", got, processor.ReasonRetriesExhausted)
	}
	// The table keeps the last copy: the replay's, which says so.
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE position(body, 'wamid.poison') > 0 AND position(error, 'replay') > 0"); got != 1 {
		t.Errorf("the poison body's dead letter is not the replay's, with the body")
	}
	if got := w.alone.Load() - before; got != 3 {
		t.Errorf("the replay tried the poison body alone %d times, want --max-deliver (3)", got)
	}
}

// TestStage1ManyBadItems: a body of 200,000 bad items made a dead-letter
// row each (2.1 M rows and 2.3 GB for a 4 MiB body); now the first 100
// have rows of their own and one more row counts the rest, with the body.
func TestStage1ManyBadItems(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	const items = 200_000
	body := []byte(`{"object":"whatsapp_business_account","entry":[0` + strings.Repeat(",0", items-1) + `]}`)
	p.publish("default", body)
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.after", 1781514315))
	p.drained(30 * time.Second)
	got := p.codeCounts("SELECT reason, count() FROM {db}.dead_letters FINAL GROUP BY reason")
	equalCounts(t, "dead letters", got, map[string]uint64{"bad_item": 100, "too_many_bad_items": 1})
	if n := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE reason = 'too_many_bad_items' AND length(body) = ? AND position(error, '199900 more bad items') > 0", len(body)); n != 1 {
		t.Errorf("the summary row does not keep the body and the count")
	}
	if n := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id = 'wamid.after'"); n != 1 {
		t.Errorf("the body after: %d statuses, want 1", n)
	}
}

// gauge reads a gauge of instance i.
func (p *pipeline) gauge(i int, name string) float64 {
	p.t.Helper()
	mfs, err := p.regs[i].Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	p.t.Fatalf("no gauge %s", name)
	return 0
}

// TestStage1BacklogAndErrorMetrics: the backlog on RAW and the errors by
// class are metrics, for alerts that need no ClickHouse query.
func TestStage1BacklogAndErrorMetrics(t *testing.T) {
	srv := schematest.StartClickHouse(t)
	p := newPipeline(t, srv.Database(t))
	p.start()
	p.publish("default", readFixture(t, "status_failed_131048.json"))
	p.publish("default", readFixture(t, "status_failed_130429.json"))
	p.drained(30 * time.Second)
	srv.Stop()
	for i := 0; i < 20; i++ {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.backlog-%d", i), 1781514312+i))
	}
	waitFor := func(what string, ok func(float64) bool) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, "wahook_processor_raw_pending "+what, func() (bool, string) {
			v := p.gauge(0, "wahook_processor_raw_pending")
			return ok(v), fmt.Sprint(v)
		})
	}
	waitFor("while ClickHouse is down", func(v float64) bool { return v == 20 })
	srv.Start()
	p.drained(60 * time.Second)
	waitFor("once written", func(v float64) bool { return v == 0 })
	mfs, err := p.regs[0].Gather()
	if err != nil {
		t.Fatal(err)
	}
	byClass := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "wahook_processor_errors_total" {
			for _, m := range mf.GetMetric() {
				byClass[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if byClass["quality"] != 1 || byClass["throughput"] != 1 || byClass["unknown"] != 0 || len(byClass) < 10 {
		t.Errorf("errors by class: %v, want quality 1 and throughput 1, every class present", byClass)
	}
}

// slowWriter is a writer that never finishes a batch for which hang says
// so: it waits for the write's deadline, as an insert that hangs does.
type slowWriter struct {
	processor.Writer
	hang  func(rows *schema.Rows) bool
	hangs atomic.Int64
}

func (w *slowWriter) Write(ctx context.Context, rows *schema.Rows) error {
	if w.hang(rows) {
		w.hangs.Add(1)
		<-ctx.Done()
		return fmt.Errorf("insert: %w", ctx.Err())
	}
	return w.Writer.Write(ctx, rows)
}

// holding is a hang of the batches holding a status of message id id.
func holding(id string) func(rows *schema.Rows) bool {
	return func(rows *schema.Rows) bool {
		return slices.ContainsFunc(rows.Statuses, func(r schema.StatusRow) bool { return r.MessageID == id })
	}
}

// TestStage1SlowBody: a body whose write runs out of its deadline while
// the stores answer is isolated like one the store refuses. The check of
// the stores asked under the write's own context, done by then, so every
// such failure looked like an outage: the whole batch was nak'ed again and
// again, its good bodies never stored, the slow one never a dead letter.
func TestStage1SlowBody(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.cfg.FlushInterval = 300 * time.Millisecond // batches of several bodies
	p.cfg.AckWait = 2 * time.Second              // writes of 1 s, then 500 ms
	p.faults = func(inner processor.Writer) processor.Writer {
		return &slowWriter{Writer: inner, hang: holding("wamid.slow")}
	}
	const n = 20
	p.publishAround(n, "wamid.slow")
	p.start()
	// A timeout counts against the slow body only while bodies like it
	// are stored: traffic goes on, as it does in production.
	more := 0
	testutil.Eventually(t, 60*time.Second, "the slow body a dead letter", func() (bool, string) {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-more-%d", more), 1781515000+more))
		more++
		got := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE reason = 'retries_exhausted' AND position(body, 'wamid.slow') > 0 AND position(error, 'deadline exceeded') > 0")
		return got == 1, fmt.Sprint(got)
	})
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.good-')"); got != uint64(n+more) {
		t.Errorf("good bodies stored: %d, want %d", got, n+more)
	}
}

// TestStage1StalledStore: while every insert of statuses hangs and the
// store answers pings (and takes inbound messages), each body's write
// alone ran out of its deadline like a slow body's, and was struck: every
// good body became a dead letter, acked, and missing from the tables once
// the store recovered. A timeout counts against a body only when the store
// took writes of its kinds of rows meanwhile: the bodies wait, and are
// stored once it does.
func TestStage1StalledStore(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.cfg.AckWait = time.Second // writes of 500 ms, then 250 ms
	p.cfg.FlushInterval = 200 * time.Millisecond
	// Until then, every insert of statuses hangs (the store answers pings
	// and takes dead letters).
	until := time.Now().Add(15 * time.Second)
	st := &slowWriter{hang: func(rows *schema.Rows) bool { return len(rows.Statuses) > 0 && time.Now().Before(until) }}
	p.faults = func(inner processor.Writer) processor.Writer { st.Writer = inner; return st }
	const n = 4
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
	}
	p.start()
	// Inbound messages, in other tables, are stored all along: no
	// evidence that the statuses' store takes writes (an ALTER of
	// status_events holds its inserts alone).
	for i := 0; time.Now().Before(until); i++ {
		p.publish("default", inboundBody(fmt.Sprintf("wamid.in-%d", i), 1781514400+i))
		time.Sleep(400 * time.Millisecond)
	}
	p.drained(60 * time.Second)
	if st.hangs.Load() < 4 {
		t.Fatalf("the store stalled %d writes: the test did not stall it", st.hangs.Load())
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE startsWith(message_id, 'wamid.good-')"); got != n {
		t.Errorf("statuses stored after the stall: %d, want %d", got, n)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL"); got != 0 {
		t.Errorf("dead letters: %d, want none", got)
	}
}

// TestStage1SlowBodyAlone: a body slow on its own with nothing stored
// beside it (no traffic, or a kind of rows seldom written) has no sign of
// its fault from other writes, and came back for ever, each time costing
// its batch's write and the halves'. Once it has failed so for unsureFor
// AckWaits, its failures count: it is a dead letter.
func TestStage1SlowBodyAlone(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.cfg.FlushInterval = 200 * time.Millisecond
	p.cfg.AckWait = time.Second // 20 s before its failures count
	p.faults = func(inner processor.Writer) processor.Writer {
		return &slowWriter{Writer: inner, hang: holding("wamid.slow")}
	}
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.slow", 1781514312))
	p.start()
	p.drained(90 * time.Second)
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL WHERE reason = 'retries_exhausted' AND position(body, 'wamid.slow') > 0"); got != 1 {
		t.Errorf("dead letters of the slow body: %d, want 1", got)
	}
}

// inboundBody is a body of one inbound text message of id msgID.
func inboundBody(msgID string, ts int) []byte {
	return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"messages":[{"from":"4915155500999","id":%q,"timestamp":"%d","type":"text","text":{"body":"hi"}}]}}]}]}`, msgID, ts))
}

// outageThenRefuse is a writer for which a batch holding a status of
// message id flaky first finds the store away (outages times), then is
// refused while the body is not alone, then once more alone, and then is
// taken. With whenAlone, the store is away only for the body alone: a
// batch holding it beside others is refused at once.
type outageThenRefuse struct {
	processor.Writer
	flaky     string
	outages   int
	alone     int // refusals of the body alone left
	whenAlone bool
}

func (w *outageThenRefuse) Write(ctx context.Context, rows *schema.Rows) error {
	for i := range rows.Statuses {
		if rows.Statuses[i].MessageID != w.flaky {
			continue
		}
		switch {
		case w.outages > 0 && (!w.whenAlone || len(rows.Statuses) == 1):
			w.outages--
			return fmt.Errorf("store away: %w", nats.ErrNoResponders)
		case len(rows.Statuses) > 1:
			return errors.New("refused beside others")
		case w.alone > 0:
			w.alone--
			return errors.New("refused once on its own: a passing error")
		}
	}
	return w.Writer.Write(ctx, rows)
}

// TestStage1OutageDoesNotCountTowardMaxDeliver: the deliveries a body costs
// during an outage (its batch nak'ed each time) do not count toward
// --max-deliver: after an outage longer than it, the body's first failure
// on its own is tried again, and the body is stored, not made a dead
// letter.
func TestStage1OutageDoesNotCountTowardMaxDeliver(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	p.cfg.FlushInterval = 300 * time.Millisecond
	w := &outageThenRefuse{flaky: "wamid.flaky", outages: 5, alone: 1}
	p.faults = func(inner processor.Writer) processor.Writer {
		w.Writer = inner
		return w
	}
	const n = 10
	for i := 0; i < n; i++ {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
	}
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.flaky", 1781514300))
	p.start()
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n+1 {
		t.Errorf("statuses stored: %d, want %d", got, n+1)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL"); got != 0 {
		t.Errorf("dead letters: %d, want 0", got)
	}
	if w.outages != 0 || w.alone != 0 {
		t.Errorf("the writer's faults did not all happen: %d outages, %d refusals alone left", w.outages, w.alone)
	}
}

// TestStage1StoreFullIsAnOutage: JetStream refuses every event for want of
// room (the account's limits reached: 400, err_code 10002; a server's
// storage spent answers 10047). That was taken for a refusal of the events
// themselves while NATS and ClickHouse answered: each body was tried
// alone, struck MaxDeliver times and made a dead letter, and the whole
// backlog was acked without its rows. Now the bodies wait, and are stored
// once there is room again.
func TestStage1StoreFullIsAnOutage(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	const n = 8
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.full-%d", i), 1781514312+i))
	}
	acc := p.nats.Server().GlobalAccount()
	limit := func(store int64) {
		t.Helper()
		if err := acc.UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": {MaxMemory: -1, MaxStore: store, MaxStreams: -1, MaxConsumers: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	limit(int64(acc.JetStreamUsage().Store)) // full: no event fits
	p.start()
	// Tried a few times (or, as before, dead letters made of them).
	testutil.Eventually(t, 30*time.Second, "stage 1 to meet the full store", func() (bool, string) {
		got, dead := p.metric(0, "wahook_processor_write_failures_total"), p.count("SELECT count() FROM {db}.dead_letters")
		return got >= 3 || dead > 0, fmt.Sprint(got, " write failures, ", dead, " dead letters")
	})
	if got := p.count("SELECT count() FROM {db}.dead_letters"); got != 0 {
		t.Fatalf("dead letters while the store was full: %d, want 0", got)
	}
	if got := p.count("SELECT count() FROM {db}.status_events"); got != 0 {
		t.Errorf("statuses stored while EVENTS could not take their events: %d, want 0", got)
	}
	limit(-1)
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Errorf("statuses stored once there was room: %d, want %d", got, n)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters"); got != 0 {
		t.Errorf("dead letters: %d, want 0", got)
	}
}

// TestStage1StopWhileReopening: stage 1 stopped while it tries again to
// open its consumer (here: the RAW stream deleted under it) returns, where
// it panicked on the iterator it did not have.
func TestStage1StopWhileReopening(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.before", 1781514312))
	p.drained(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.js.DeleteStream(ctx, schema.StreamRaw); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "stage 1 to try to open its consumer again", func() (bool, string) {
		n := p.warnings.FilterMessageSnippet("consumer on raw stream, retrying").Len()
		return n > 0, fmt.Sprintf("%d warnings", n)
	})
	p.stop()
}

// TestReplayOutageDoesNotCountTowardMaxDeliver: in a replay, a body being
// written on its own finds the store away for more tries than
// --max-deliver, and is then refused once: it is stored, and no dead
// letter is made. An outage delays a replay, it never drops a body.
func TestReplayOutageDoesNotCountTowardMaxDeliver(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2
	const n = 10
	for i := 0; i < n; i++ {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
	}
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.flaky", 1781514300))
	w := &outageThenRefuse{Writer: p.writer, flaky: "wamid.flaky", outages: 5, alone: 1, whenAlone: true}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := processor.Replay(ctx, p.cfg, p.js, w, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("replay: %v (%+v)", err, res)
	}
	if res.Bodies != n+1 || res.DeadLetters != 0 || res.Rows != n+1 {
		t.Errorf("replay: %+v, want %d bodies and rows, no dead letter", res, n+1)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n+1 {
		t.Errorf("statuses stored: %d, want %d", got, n+1)
	}
	if got := p.count("SELECT count() FROM {db}.dead_letters FINAL"); got != 0 {
		t.Errorf("dead letters: %d, want 0", got)
	}
	if w.outages != 0 || w.alone != 0 {
		t.Errorf("the writer's faults did not all happen: %d outages, %d refusals alone left", w.outages, w.alone)
	}
}

// outageOnWrite is a writer that stops the NATS server at its nth write
// and says so on down.
type outageOnWrite struct {
	processor.Writer
	nats   *schematest.JetStream
	nth    int
	writes int
	down   chan struct{}
}

func (w *outageOnWrite) Write(ctx context.Context, rows *schema.Rows) error {
	w.writes++
	if w.writes == w.nth {
		w.nats.Shutdown()
		close(w.down)
	}
	return w.Writer.Write(ctx, rows)
}

// TestReplayThroughNATSRestart: NATS stops in the middle of a replay, with
// more bodies to read than the replay's reader holds, and comes back 12 s
// later. The replay waits for it and replays every body. Without EVENTS to
// publish to (whose retries waited for NATS), it gave up after 10 s without
// a body ("replay stalled at sequence 2000 of 2500"). The replay asks
// after 2 s without a body here, so that it finds NATS away.
func TestReplayThroughNATSRestart(t *testing.T) {
	processor.SetReplayWait(t, 2*time.Second)
	for _, tc := range []struct {
		events bool
		down   time.Duration
	}{{false, 12 * time.Second}, {true, 12 * time.Second}} {
		t.Run(fmt.Sprintf("events=%v", tc.events), func(t *testing.T) {
			p := newPipeline(t, schematest.ClickHouse(t))
			const n = 2500 // the reader pulls 2,000 at most
			for i := 0; i < n; i++ {
				p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
			}
			cfg := p.cfg
			cfg.BatchRows = 500
			cfg.PublishEvents = tc.events
			w := &outageOnWrite{Writer: p.writer, nats: p.nats, nth: 1, down: make(chan struct{})}
			core, logs := observer.New(zap.WarnLevel)
			logger := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			type result struct {
				res processor.ReplayResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := processor.Replay(ctx, cfg, p.js, w, p.norm, p.numbers, time.Now().Add(-time.Hour), logger)
				done <- result{res, err}
			}()
			select {
			case <-w.down:
			case r := <-done:
				t.Fatalf("replay ended before its first write: %+v, %v", r.res, r.err)
			}
			time.Sleep(tc.down)
			p.nats.Start()
			r := <-done
			if r.err != nil {
				t.Fatalf("replay: %v (%+v)", r.err, r.res)
			}
			if r.res.Bodies != n || r.res.LastSeq != n {
				t.Errorf("replay: %+v, want %d bodies up to sequence %d", r.res, n, n)
			}
			if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
				t.Errorf("statuses stored: %d, want %d", got, n)
			}
			if !tc.events && logs.FilterMessageSnippet("replay waiting for NATS").Len() == 0 {
				t.Errorf("the replay never found NATS away: the test does not test the wait")
			}
			noReplayConsumers(t, p.js)
		})
	}
}

// deleteOnWrite is a writer that, at its first write, deletes the RAW
// messages of sequences from to to.
type deleteOnWrite struct {
	processor.Writer
	js       jetstream.JetStream
	from, to uint64
	once     sync.Once
	err      error
}

func (w *deleteOnWrite) Write(ctx context.Context, rows *schema.Rows) error {
	w.once.Do(func() {
		st, err := w.js.Stream(ctx, schema.StreamRaw)
		for seq := w.from; err == nil && seq <= w.to; seq++ {
			err = st.DeleteMsg(ctx, seq)
		}
		w.err = err
	})
	return w.Writer.Write(ctx, rows)
}

// TestReplayDeletedTail: the last bodies a replay was to read are deleted
// while it runs, and nothing is published after them. The replay ends when
// it has read every body left, instead of waiting for those that are gone.
func TestReplayDeletedTail(t *testing.T) {
	processor.SetReplayWait(t, 2*time.Second)
	p := newPipeline(t, schematest.ClickHouse(t))
	const n, kept = 2500, 2100 // the reader pulls 2,000 at most
	for i := 0; i < n; i++ {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.good-%d", i), 1781514312+i))
	}
	cfg := p.cfg
	cfg.BatchRows = 500
	cfg.PublishEvents = false
	w := &deleteOnWrite{Writer: p.writer, js: p.js, from: kept + 1, to: n}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := processor.Replay(ctx, cfg, p.js, w, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if w.err != nil {
		t.Fatalf("deleting the tail: %v", w.err)
	}
	if err != nil {
		t.Fatalf("replay: %v (%+v)", err, res)
	}
	if res.Bodies != kept || res.LastSeq != kept {
		t.Errorf("replay: %+v, want %d bodies up to sequence %d", res, kept, kept)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != kept {
		t.Errorf("statuses stored: %d, want %d", got, kept)
	}
	// Its first reader and the one it opened again are both deleted.
	noReplayConsumers(t, p.js)
}

// noReplayConsumers fails t if RAW has a consumer: a replay deletes its
// own when it ends (the pipelines of these tests run no stage 1).
func noReplayConsumers(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, schema.StreamRaw)
	if err != nil {
		t.Fatalf("stream %s: %v", schema.StreamRaw, err)
	}
	var names []string
	for name := range st.ConsumerNames(ctx).Name() {
		names = append(names, name)
	}
	if len(names) > 0 {
		t.Errorf("consumers of %s after the replay: %v, want none", schema.StreamRaw, names)
	}
}

// failAtStop is a writer whose writes wait for stopping, then fail as an
// outage does.
type failAtStop struct {
	processor.Writer
	writing  chan struct{}
	once     sync.Once
	stopping chan struct{}
}

func (w *failAtStop) Write(ctx context.Context, rows *schema.Rows) error {
	w.once.Do(func() { close(w.writing) })
	<-w.stopping
	return fmt.Errorf("clickhouse away: %w", nats.ErrConnectionClosed)
}

// TestStopWithLastBatchNotStored: stage 1 stopped while its last batch
// cannot be stored says so in its error (the process exits 1, naming the
// step); it returned nil, and the stop was logged as "last batch written".
// The bodies are nak'ed, back at the next start.
func TestStopWithLastBatchNotStored(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	w := &failAtStop{writing: make(chan struct{}), stopping: make(chan struct{})}
	p.faults = func(inner processor.Writer) processor.Writer { w.Writer = inner; return w }
	p.start()
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.last", 1781514312))
	select {
	case <-w.writing:
	case <-time.After(20 * time.Second):
		t.Fatal("no write of the batch")
	}
	p.cancel()
	close(w.stopping)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stage 1 did not return")
	}
	p.running, p.cancel = 0, nil
	if err == nil || !strings.Contains(err.Error(), "last batch not stored") || !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("stage 1 stopped with its last batch refused: %v", err)
	}
}

// cancelAfterWrites is a writer that cancels the replay's context once its
// first n writes are stored.
type cancelAfterWrites struct {
	processor.Writer
	n      int
	cancel context.CancelFunc
}

func (w *cancelAfterWrites) Write(ctx context.Context, rows *schema.Rows) error {
	if err := w.Writer.Write(ctx, rows); err != nil {
		return err
	}
	if w.n--; w.n == 0 {
		w.cancel()
	}
	return nil
}

// TestReplayStopsWhereWritten: a replay that stops half way says up to
// which body it stored, and when that body came: run again from there, it
// goes on (the command said only why it stopped, so a long replay was run
// again from its first --since).
func TestReplayStopsWhereWritten(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	const n, batch = 1000, 100
	start := time.Now()
	for i := 0; i < n; i++ {
		// Received by an ingest whose clock runs 10 minutes ahead of the
		// NATS server's: --since is matched against the server's.
		body := statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.where-%d", i), 1781514312+i)
		msg := &nats.Msg{Subject: schema.RawSubject("default"), Data: body, Header: nats.Header{
			schema.HeaderMsgID:      []string{schema.RawMsgID(body)},
			schema.HeaderReceivedAt: []string{schema.FormatReceivedAt(time.Now().Add(10 * time.Minute))},
			schema.HeaderApp:        []string{"default"},
		}}
		if _, err := p.js.PublishMsg(context.Background(), msg); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	cfg := p.cfg
	cfg.BatchRows = batch
	cfg.PublishEvents = false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopCtx, stop := context.WithCancel(ctx)
	w := &cancelAfterWrites{Writer: p.writer, n: 3, cancel: stop}
	res, err := processor.Replay(stopCtx, cfg, p.js, w, p.norm, p.numbers, time.Now().Add(-time.Hour), zaptest.NewLogger(t))
	if !errors.Is(err, context.Canceled) || ctx.Err() != nil {
		t.Fatalf("replay stopped after 3 batches: %v (%+v), want context.Canceled", err, res)
	}
	if res.WrittenSeq != 3*batch || res.WrittenAt.Before(start.Add(-time.Second)) || res.WrittenAt.After(time.Now()) {
		t.Fatalf("replay stopped after 3 batches of %d: %+v, want written up to sequence %d, stored since the test began", batch, res, 3*batch)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got < 3*batch {
		t.Errorf("statuses stored: %d, want at least the %d written", got, 3*batch)
	}
	// Run again from the time it gave, it stores every body.
	res, err = processor.Replay(ctx, cfg, p.js, p.writer, p.norm, p.numbers, res.WrittenAt.Truncate(time.Second), zaptest.NewLogger(t))
	if err != nil || res.FirstSeq > 3*batch || res.LastSeq != n {
		t.Fatalf("replay from where it stopped: %v, %+v; want sequences from %d or before, to %d", err, res, 3*batch, n)
	}
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Errorf("statuses stored: %d, want %d", got, n)
	}
}

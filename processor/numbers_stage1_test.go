package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// The number of the fixtures: status_sent_pmp_marketing.json pairs the
// display number of quality_throughput_upgrade.json with its id.
const (
	upgradeDisplay = "15557810001"
	upgradeNumber  = "107655290331184"
)

// heldKeys counts the events held in the pending bucket.
func (p *pipeline) heldKeys() int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, schema.BucketNumbersPending)
	if err != nil {
		p.t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && err != jetstream.ErrNoKeysFound {
		p.t.Fatal(err)
	}
	return len(keys)
}

// upgradeRows counts the stored copies of the upgrade, with and without
// its phone number id.
func (p *pipeline) upgradeRows(id string) (withID, without uint64) {
	p.t.Helper()
	return p.count("SELECT count() FROM {db}.management_events WHERE event_id = ? AND phone_number_id = ?", id, upgradeNumber),
		p.count("SELECT count() FROM {db}.management_events WHERE event_id = ? AND phone_number_id = ''", id)
}

// numberEvent returns the last event on the number's EVENTS subject of
// kind number, and its Nats-Msg-Id.
func (p *pipeline) numberEvent(number string) (processor.Event, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		return processor.Event{}, "", err
	}
	m, err := s.GetLastMsgForSubject(ctx, schema.EventsSubject(number, schema.KindNumber))
	if err != nil {
		return processor.Event{}, "", err
	}
	var row schema.ManagementRow
	ev := processor.Event{Row: &row}
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return processor.Event{}, "", err
	}
	return ev, m.Header.Get(schema.HeaderMsgID), nil
}

// TestStage1NumberLearnedLate: a THROUGHPUT_UPGRADE for a display number no
// message webhook has shown yet is stored without its id and held; the
// first message webhook of the number applies it: ClickHouse keeps the
// copy with the id (also after merges), the number's EVENTS subject gets
// it (under a message id of its own, within the duplicate window of the
// first), and nothing stays held.
func TestStage1NumberLearnedLate(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	p.publish("default", readFixture(t, "quality_throughput_upgrade.json"))
	p.drained(30 * time.Second)

	var id string
	if err := p.db.Conn.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT event_id FROM %s.management_events WHERE event = 'THROUGHPUT_UPGRADE'", p.db.Database)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if with, without := p.upgradeRows(id); with != 0 || without != 1 {
		t.Fatalf("before the number is known: %d rows with its id, %d without; want 0 and 1", with, without)
	}
	if n := p.heldKeys(); n != 1 {
		t.Fatalf("held events: %d, want 1", n)
	}
	if n := p.metric(0, "wahook_processor_number_events_held_total"); n != 1 {
		t.Errorf("held metric: %v", n)
	}
	if _, _, err := p.numberEvent(upgradeNumber); err == nil {
		t.Fatal("the number's EVENTS subject has a number event before the number is known")
	}

	p.publish("default", readFixture(t, "status_sent_pmp_marketing.json"))
	p.drained(30 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the upgrade stored with its number and released", func() (bool, string) {
		with, _ := p.upgradeRows(id)
		held := p.heldKeys()
		return with == 1 && held == 0, fmt.Sprintf("%d rows with its number, %d held", with, held)
	})
	ev, msgID, err := p.numberEvent(upgradeNumber)
	if err != nil {
		t.Fatalf("no number event on the number's subject: %v", err)
	}
	row := ev.Row.(*schema.ManagementRow)
	if row.EventID != id || row.PhoneNumberID != upgradeNumber || row.Event != "THROUGHPUT_UPGRADE" || msgID != id+"."+upgradeNumber {
		t.Errorf("event %+v with Nats-Msg-Id %q", row, msgID)
	}
	if n := p.metric(0, "wahook_processor_number_events_applied_total"); n != 1 {
		t.Errorf("applied metric: %v", n)
	}

	// After merges, the copy with the id is the one kept.
	if err := p.db.Conn.Exec(context.Background(), fmt.Sprintf("OPTIMIZE TABLE %s.management_events FINAL", p.db.Database)); err != nil {
		t.Fatal(err)
	}
	if with, without := p.upgradeRows(id); with != 1 || without != 0 {
		t.Errorf("after merges: %d rows with its id, %d without; want 1 and 0", with, without)
	}
}

// TestStage1HeldAppliedBesideBadBody: the body that teaches a number
// shares its batch with a body the store refuses. The held event it
// applied was dropped with the failed batch: its body, written again in
// halves, did not learn the number again, so the event waited for the
// sweep (30 s), and was counted applied twice. Now the failed batch gives
// it to the next one: it is stored with its id and released at once, and
// counted once.
func TestStage1HeldAppliedBesideBadBody(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 3
	p.cfg.FlushInterval = time.Second // the two bodies in one batch
	p.faults = func(inner processor.Writer) processor.Writer {
		return &refuse{Writer: inner, bad: "wamid.poison"}
	}
	p.start()
	p.publish("default", readFixture(t, "quality_throughput_upgrade.json"))
	p.drained(30 * time.Second)
	if n := p.heldKeys(); n != 1 {
		t.Fatalf("held events: %d, want 1", n)
	}
	var id string
	if err := p.db.Conn.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT event_id FROM %s.management_events WHERE event = 'THROUGHPUT_UPGRADE'", p.db.Database)).Scan(&id); err != nil {
		t.Fatal(err)
	}

	p.publish("default", readFixture(t, "status_sent_pmp_marketing.json"))
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.poison", 1781514300))
	testutil.Eventually(t, 10*time.Second, "the upgrade stored with its number and released, well before the sweep", func() (bool, string) {
		with, _ := p.upgradeRows(id)
		held := p.heldKeys()
		return with == 1 && held == 0, fmt.Sprintf("%d rows with its number, %d held", with, held)
	})
	p.drained(30 * time.Second)
	if n := p.count("SELECT count() FROM {db}.dead_letters FINAL"); n != 1 {
		t.Errorf("dead letters: %d, want the refused body's", n)
	}
	if n := p.metric(0, "wahook_processor_number_events_applied_total"); n != 1 {
		t.Errorf("applied metric: %v, want 1", n)
	}
}

// TestStage1LearnedInAFailedBatch: a THROUGHPUT_UPGRADE for a display
// number not known yet, the message webhook that teaches it, and a body
// the store refuses, in one batch. The upgrade went to EVENTS without its
// number (on the subject of no number) under its event id; the batch was
// written again in halves, the upgrade's number now known, and it went to
// its number's subject under the same id, which EVENTS took for a
// duplicate: ClickHouse had it with its number, stage 2 never did. An
// event whose number comes from its display number now goes under an id
// of its own (the event id and the number), as one applied late does.
func TestStage1LearnedInAFailedBatch(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 3
	p.cfg.FlushInterval = time.Second // the three bodies in one batch
	p.faults = func(inner processor.Writer) processor.Writer {
		return &refuse{Writer: inner, bad: "wamid.poison"}
	}
	p.start()
	p.publish("default", readFixture(t, "quality_throughput_upgrade.json"))
	p.publish("default", readFixture(t, "status_sent_pmp_marketing.json"))
	p.publish("default", statusBody("107655290331184", "15557810001", "wamid.poison", 1781514300))
	p.drained(30 * time.Second)
	var id string
	if err := p.db.Conn.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT event_id FROM %s.management_events FINAL WHERE event = 'THROUGHPUT_UPGRADE' AND phone_number_id = '%s'", p.db.Database, upgradeNumber)).Scan(&id); err != nil {
		t.Fatalf("the upgrade stored with its number: %v", err)
	}
	ev, msgID, err := p.numberEvent(upgradeNumber)
	if err != nil {
		t.Fatalf("the upgrade is in ClickHouse with its number but not on the number's EVENTS subject: %v", err)
	}
	if row := ev.Row.(*schema.ManagementRow); row.EventID != id || msgID != id+"."+upgradeNumber {
		t.Errorf("event %s with Nats-Msg-Id %q, want %s and %s.%s", row.EventID, msgID, id, id, upgradeNumber)
	}
	if n := p.heldKeys(); n != 0 {
		t.Errorf("held events: %d, want none", n)
	}
}

// TestStage1SweepsHeldEvents: an event held for a number that another
// instance learned, and that crashed before applying it, is applied by the
// sweep of the next stage 1 to start. The display number is written with
// '+' and spaces, as Meta sometimes does.
func TestStage1SweepsHeldEvents(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781515900,"changes":[` +
		`{"field":"phone_number_quality_update","value":{"display_phone_number":"+1 555 000 1234","event":"FLAGGED","current_limit":"TIER_1K"}}]}]}`)
	p.publish("default", body)
	p.drained(30 * time.Second)
	if n := p.heldKeys(); n != 1 {
		t.Fatalf("held events: %d, want 1", n)
	}
	p.stop()

	ctx := context.Background()
	kv, err := p.js.KeyValue(ctx, schema.BucketNumbers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "15550001234", "555000123400"); err != nil {
		t.Fatal(err)
	}
	p.start()
	testutil.Eventually(t, 30*time.Second, "the flagged event stored with its number and released", func() (bool, string) {
		n := p.count("SELECT count() FROM {db}.management_events WHERE event = 'FLAGGED' AND phone_number_id = '555000123400'")
		held := p.heldKeys()
		return n == 1 && held == 0, fmt.Sprintf("%d rows with its number, %d held", n, held)
	})
	if _, _, err := p.numberEvent("555000123400"); err != nil {
		t.Errorf("no number event on the number's subject: %v", err)
	}
}

// TestStage1NumbersOutage: while the numbers bucket cannot answer, a
// number-level event is neither stored without its number nor made a dead
// letter: its body comes back until the bucket answers, and is then stored
// with the id.
func TestStage1NumbersOutage(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxDeliver = 2 // a poison body would be a dead letter at once
	ctx := context.Background()
	if err := p.js.DeleteKeyValue(ctx, schema.BucketNumbers); err != nil {
		t.Fatal(err)
	}
	p.start()
	p.publish("default", readFixture(t, "quality_throughput_upgrade.json"))
	testutil.Eventually(t, 30*time.Second, "stage 1 failing to look the number up three times", func() (bool, string) {
		n := p.lookups(processor.LookupError)
		return n >= 3, fmt.Sprintf("%v failed look-ups", n)
	})
	if n := p.count("SELECT count() FROM {db}.management_events"); n != 0 {
		t.Errorf("%d management rows stored while the numbers bucket was down", n)
	}
	if n := p.count("SELECT count() FROM {db}.dead_letters"); n != 0 {
		t.Errorf("%d dead letters for an outage of the numbers bucket", n)
	}

	kv, err := p.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketNumbers, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, upgradeDisplay, upgradeNumber); err != nil {
		t.Fatal(err)
	}
	p.drained(30 * time.Second)
	if n := p.count("SELECT count() FROM {db}.management_events WHERE phone_number_id = ?", upgradeNumber); n != 1 {
		t.Errorf("after the outage: %d rows with the number, want 1", n)
	}
	if n := p.count("SELECT count() FROM {db}.management_events WHERE phone_number_id = ''"); n != 0 {
		t.Errorf("after the outage: %d rows without the number", n)
	}
}

// lookups is the number lookups of instance 0 that ended with result.
func (p *pipeline) lookups(result string) float64 {
	p.t.Helper()
	mfs, err := p.regs[0].Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wahook_processor_number_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestStage1HeldEventTooLarge: a quality update for a number not learned
// yet whose value escapes in JSON to more than max_payload (300,000 '<'
// become 1.8 MB of \u003c) could not be held in the pending bucket: its
// batch, and the good bodies in it, were stored and nak'ed again for ever.
// It is held without its raw value; the bodies beside it are acked, and
// once the number is learned the event is applied with its id.
func TestStage1HeldEventTooLarge(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.FlushInterval = 300 * time.Millisecond // batches of several bodies
	p.start()
	huge := strings.Repeat("<", 300_000)
	p.publish("default", statusBody("107655290331999", "15557819999", "wamid.before", 1781514311))
	p.publish("default", []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781514311,"changes":[{"field":"phone_number_quality_update","value":{"display_phone_number":"`+upgradeDisplay+`","event":"FLAGGED","current_limit":"TIER_1K","note":"`+huge+`"}}]}]}`))
	p.publish("default", statusBody("107655290331999", "15557819999", "wamid.after", 1781514313))
	p.drained(30 * time.Second)
	if n := p.count("SELECT uniqExact(event_id) FROM {db}.status_events WHERE message_id IN ('wamid.before', 'wamid.after')"); n != 2 {
		t.Errorf("bodies beside the oversized event: %d statuses, want 2", n)
	}
	if n := p.count("SELECT count() FROM {db}.management_events WHERE event = 'FLAGGED' AND phone_number_id = '' AND length(raw) > 300000"); n != 1 {
		t.Errorf("the event stored whole without its number: %d rows, want 1", n)
	}
	if n := p.heldKeys(); n != 1 {
		t.Fatalf("held events: %d, want 1", n)
	}

	p.publish("default", readFixture(t, "status_sent_pmp_marketing.json"))
	p.drained(30 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the event applied with its number and released", func() (bool, string) {
		with := p.count("SELECT count() FROM {db}.management_events WHERE event = 'FLAGGED' AND phone_number_id = ? AND new_value = 'TIER_1K'", upgradeNumber)
		held := p.heldKeys()
		return with == 1 && held == 0, fmt.Sprintf("%d rows with its number, %d held", with, held)
	})
	if n := p.count("SELECT count() FROM {db}.dead_letters"); n != 0 {
		t.Errorf("dead letters: %d, want none", n)
	}
}

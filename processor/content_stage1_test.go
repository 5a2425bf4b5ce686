package processor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// contentTexts are what the users of the test bodies (and of
// contentBody) wrote or chose: the text of their inbound messages.
var contentTexts = []string{
	"Yes please, book me for 3pm on Thursday.", // text
	"Can we move the meetup to 7?",             // text in a group
	"Is the store open on Sunday?",             // text in a mixed batch
	"Oi, vi o anúncio do frete grátis",         // text after an ad
	"Crack on the left hinge",                  // image caption
	"How it rattles",                           // video caption
	"Reschedule",                               // button reply title
	"Thu 18 Jun, 15:00",                        // list reply title
	"British Museum",                           // location name
	"Great Russell St, London WC1B 3DG",        // location address
	"Please deliver after 6pm",                 // order text
	"👍",                                        // reaction
	"Parar promoções",                          // template button text
	"Tom & Jerry <3 \u2028 \"quoted\"",         // contentBody: escaped in JSON
}

// contentBody is an inbound text whose JSON needs escapes.
var contentBody = []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"messages":[{"from":"4915155500999","id":"wamid.CONTENT1","timestamp":"1781514312","type":"text","text":{"body":"Tom & Jerry <3 \u2028 \"quoted\""}}]}}]}]}`)

// TestStage1Content runs every test body through stage 1 twice, with
// content storage off and on, on real NATS and ClickHouse. Off: no text
// is found in any String column of any table, nor in any message on
// WAHOOK_EVENTS. On: each text is in inbound_messages.content and in its
// event's row. Both ways, the same event ids.
func TestStage1Content(t *testing.T) {
	e := loadExpected(t)
	// Both runs received at one time: a value-level error's id holds the
	// minute of receipt, and two runs a few seconds apart across a minute
	// gave it two ids.
	received := time.Now()
	run := func(on bool) *pipeline {
		p := newPipeline(t, schematest.ClickHouse(t))
		if on {
			p.norm = processor.NewNormalizer(schema.NewHasher([]byte("test-key")), processor.WithContent(true))
		}
		p.start()
		for _, name := range e.files {
			p.publishAt("default", readFixture(t, name), received)
		}
		p.publishAt("default", contentBody, received)
		p.drained(30 * time.Second)
		p.stop()
		return p
	}
	off, on := run(false), run(true)

	// Off: nowhere in ClickHouse, nowhere on EVENTS.
	for _, col := range off.stringColumns() {
		for _, text := range contentTexts {
			if n := off.count("SELECT count() FROM {db}.`"+col.table+"` WHERE position("+col.expr+", ?) > 0", text); n != 0 {
				t.Errorf("content off: %q found in %s.%s (%d rows)", text, col.table, col.name, n)
			}
		}
	}
	offEvents := off.events()
	for id, ev := range offEvents {
		for _, text := range contentTexts {
			esc, _ := json.Marshal(text)
			if strings.Contains(ev.raw, text) || strings.Contains(ev.raw, string(esc[1:len(esc)-1])) || slices.ContainsFunc(ev.values, func(v string) bool { return strings.Contains(v, text) }) {
				t.Errorf("content off: %q found in event %s: %s", text, id, ev.raw)
			}
		}
		if strings.Contains(ev.raw, `"content"`) {
			t.Errorf("content off: event %s has a content key: %s", id, ev.raw)
		}
	}

	// On: in inbound_messages.content and in the inbound events.
	onEvents := on.events()
	var eventContents []string
	for _, ev := range onEvents {
		if ev.kind == string(schema.KindInbound) && ev.content != "" {
			eventContents = append(eventContents, ev.content)
		}
	}
	for _, text := range contentTexts {
		if n := on.count("SELECT count() FROM {db}.inbound_messages WHERE position(content, ?) > 0", text); n == 0 {
			t.Errorf("content on: %q not in inbound_messages.content", text)
		}
		if !slices.ContainsFunc(eventContents, func(c string) bool { return strings.Contains(c, text) }) {
			t.Errorf("content on: %q in no inbound event", text)
		}
	}
	if n := on.count("SELECT count() FROM {db}.inbound_messages WHERE content = ?", contentTexts[len(contentTexts)-1]); n != 1 {
		t.Errorf("content on: the escaped text came back %d times, want once, unchanged", n)
	}

	// The same ids both ways: in ClickHouse and as Nats-Msg-Id on EVENTS.
	for _, table := range []string{"status_events", "inbound_messages", "management_events", "errors"} {
		q := "SELECT DISTINCT event_id FROM {db}." + table + " ORDER BY event_id"
		if a, b := off.queryStrings(q), on.queryStrings(q); !slices.Equal(a, b) || len(a) == 0 {
			t.Errorf("%s: event ids differ with the switch (or none): %d off, %d on", table, len(a), len(b))
		}
	}
	if len(offEvents) == 0 || len(offEvents) != len(onEvents) {
		t.Errorf("EVENTS: %d events off, %d on", len(offEvents), len(onEvents))
	}
	for id := range offEvents {
		if _, ok := onEvents[id]; !ok {
			t.Errorf("EVENTS: event %s published with content off only", id)
		}
	}
}

// stringColumn is a column that can hold text, and how to read it as a
// String.
type stringColumn struct{ table, name, expr string }

// stringColumns returns every column of every table of the test database
// whose values are or hold strings.
func (p *pipeline) stringColumns() []stringColumn {
	p.t.Helper()
	rows, err := p.db.Conn.Query(context.Background(),
		"SELECT table, name, type FROM system.columns WHERE database = ? ORDER BY table, name", p.db.Database)
	if err != nil {
		p.t.Fatal(err)
	}
	defer rows.Close()
	var cols []stringColumn
	tables := map[string]bool{}
	for rows.Next() {
		var table, name, typ string
		if err := rows.Scan(&table, &name, &typ); err != nil {
			p.t.Fatal(err)
		}
		tables[table] = true
		expr := "`" + name + "`"
		switch {
		case typ == "String" || typ == "LowCardinality(String)" || typ == "Nullable(String)" || strings.HasPrefix(typ, "FixedString("):
		case typ == "Array(String)" || typ == "Array(LowCardinality(String))":
			expr = "arrayStringConcat(" + expr + ", '\\n')"
		case strings.HasPrefix(typ, "AggregateFunction(uniq"):
			continue // hashes of the values, not the values
		case strings.HasPrefix(typ, "AggregateFunction(") && strings.HasSuffix(typ, ", String)"):
			expr = "finalizeAggregation(" + expr + ")" // max, min, any of a String
		case strings.Contains(typ, "String"):
			p.t.Fatalf("%s.%s: type %s is not scanned", table, name, typ)
		default:
			continue
		}
		cols = append(cols, stringColumn{table, name, expr})
	}
	for _, want := range []string{"inbound_messages", "status_events", "errors", "management_events", "dead_letters", "message_lifecycle"} {
		if !tables[want] {
			p.t.Fatalf("table %s not among the scanned: %v", want, tables)
		}
	}
	return cols
}

func (p *pipeline) queryStrings(query string) []string {
	p.t.Helper()
	rows, err := p.db.Conn.Query(context.Background(), strings.ReplaceAll(query, "{db}", p.db.Database))
	if err != nil {
		p.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			p.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// storedEvent is a message on WAHOOK_EVENTS.
type storedEvent struct {
	raw, kind, content string
	values             []string // every string in its JSON, keys too
}

// events returns every message on WAHOOK_EVENTS by Nats-Msg-Id, checking
// that the id is the row's event id.
func (p *pipeline) events() map[string]storedEvent {
	p.t.Helper()
	ctx := context.Background()
	s, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		p.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]storedEvent{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			p.t.Fatalf("event %d: %v", seq, err)
		}
		var doc struct {
			Kind string `json:"kind"`
			Row  struct {
				EventID       string `json:"event_id"`
				Index         uint16 `json:"index"`
				Content       string `json:"content"`
				PhoneNumberID string `json:"phone_number_id"`
			} `json:"row"`
		}
		if err := json.Unmarshal(m.Data, &doc); err != nil {
			p.t.Fatalf("event %d: %v", seq, err)
		}
		id := m.Header.Get(schema.HeaderMsgID)
		want := doc.Row.EventID
		if doc.Kind == string(schema.KindError) { // one event per error of its owner
			want = schema.ErrorEventID(&schema.ErrorRow{EventID: doc.Row.EventID, Index: doc.Row.Index})
		}
		// A number-level event applied once its number was learned, after
		// it went out without it (schema.ManagementMsgID).
		late := doc.Row.EventID + "." + doc.Row.PhoneNumberID
		if id != want && id != late {
			p.t.Errorf("event %d: Nats-Msg-Id %q, event id %q", seq, id, doc.Row.EventID)
		}
		var all any
		_ = json.Unmarshal(m.Data, &all)
		ev := storedEvent{raw: string(m.Data), kind: doc.Kind, content: doc.Row.Content}
		walkJSONStrings(all, func(s string) { ev.values = append(ev.values, s) })
		out[id] = ev
	}
	if uint64(len(out)) != info.State.Msgs {
		p.t.Errorf("%d distinct ids among %d events", len(out), info.State.Msgs)
	}
	return out
}

func walkJSONStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case map[string]any:
		for k, c := range x {
			f(k)
			walkJSONStrings(c, f)
		}
	case []any:
		for _, c := range x {
			walkJSONStrings(c, f)
		}
	}
}

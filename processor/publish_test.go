package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// publishEnv is an embedded JetStream with the EVENTS stream.
func publishEnv(t *testing.T, withStream bool) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if withStream {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := EnsureEventsStream(ctx, js, DefaultEventsConfig(), false); err != nil {
			t.Fatal(err)
		}
	}
	return nc, js
}

// fixtureRows normalizes every fixture and test body, content storage on.
func fixtureRows(t *testing.T) *schema.Rows {
	t.Helper()
	var all schema.Rows
	n := NewNormalizer(schema.NewHasher(normKey), WithContent(true))
	for _, body := range eventJSONBodies(t) {
		rows := normalizeBody(n, body, normSource(5))
		all.Append(&rows)
	}
	return &all
}

// storedEvents reads every message of EVENTS.
func storedEvents(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// TestPublishEvents: every event of every fixture lands on EVENTS once, on
// its per-number subject, with Nats-Msg-Id = its event id as its only
// header, and as the bytes encoding/json makes of it; with a window much
// smaller than the batch, so that slots are reused; and a second publish
// of the same rows is acknowledged (as duplicates) and stores nothing.
func TestPublishEvents(t *testing.T) {
	nc, js := publishEnv(t, true)
	rows := fixtureRows(t)
	// Many more events than slots: the same fixtures under other numbers.
	for i := 0; i < 20; i++ {
		for j := range rows.Statuses[:min(50, len(rows.Statuses))] {
			r := rows.Statuses[j]
			r.EventID, r.PhoneNumberID = fmt.Sprintf("%s-%d", r.EventID, i), fmt.Sprintf("9%03d", i)
			rows.Statuses = append(rows.Statuses, r)
		}
	}
	want := map[string][]byte{}
	subjects := map[string]string{}
	add := func(number string, k schema.Kind, id string, row any) {
		b, err := marshalEventStd(k, row)
		if err != nil {
			t.Fatal(err)
		}
		want[id], subjects[id] = b, schema.EventsSubject(number, k)
	}
	for i := range rows.Statuses {
		add(rows.Statuses[i].PhoneNumberID, schema.KindStatus, rows.Statuses[i].EventID, &rows.Statuses[i])
	}
	for i := range rows.Inbound {
		add(rows.Inbound[i].PhoneNumberID, schema.KindInbound, rows.Inbound[i].EventID, &rows.Inbound[i])
	}
	for i := range rows.Management {
		add(rows.Management[i].PhoneNumberID, rows.Management[i].Kind, rows.Management[i].EventID, &rows.Management[i])
	}
	for i := range rows.Errors {
		if r := &rows.Errors[i]; publishedError(r) {
			add(r.PhoneNumberID, schema.KindError, schema.ErrorEventID(r), r)
		}
	}
	if len(want) < 1000 {
		t.Fatalf("only %d events", len(want))
	}

	p := newEventPublisher(nc, 16)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := 0; round < 2; round++ {
		if err := p.publish(ctx, rows); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		got := storedEvents(t, js)
		if len(got) != len(want) {
			t.Fatalf("round %d: EVENTS holds %d messages, want %d", round, len(got), len(want))
		}
		for _, m := range got {
			id := m.Header.Get(schema.HeaderMsgID)
			if !bytes.Equal(m.Data, want[id]) {
				t.Fatalf("event %s: stored\n%s\nwant\n%s", id, m.Data, want[id])
			}
			if m.Subject != subjects[id] {
				t.Errorf("event %s on %s, want %s", id, m.Subject, subjects[id])
			}
			if len(m.Header) != 1 {
				t.Errorf("event %s has headers %v, want Nats-Msg-Id alone", id, m.Header)
			}
		}
	}
	if p.w == nil || p.w.inflight != 0 {
		t.Errorf("window after success: %+v, want kept and empty", p.w)
	}
}

// TestPublishEventsFailures: a publish fails, and the next one works, when
// no stream takes the subjects, when the stream refuses a message, when no
// ack comes, and when ctx ends.
func TestPublishEventsFailures(t *testing.T) {
	rows := func(n int) *schema.Rows {
		var r schema.Rows
		for i := 0; i < n; i++ {
			r.Statuses = append(r.Statuses, schema.StatusRow{EventID: fmt.Sprintf("e%d-%d", n, i), PhoneNumberID: "107655290331184", Status: "sent"})
		}
		return &r
	}
	ctx := context.Background()

	t.Run("no stream", func(t *testing.T) {
		nc, js := publishEnv(t, false)
		p := newEventPublisher(nc, 8)
		defer p.close()
		err := p.publish(ctx, rows(20))
		if err == nil || !strings.Contains(err.Error(), "503") {
			t.Fatalf("publish without a stream: %v, want no responders", err)
		}
		if p.w != nil {
			t.Error("window kept after a failure")
		}
		if err := EnsureEventsStream(ctx, js, DefaultEventsConfig(), false); err != nil {
			t.Fatal(err)
		}
		if err := p.publish(ctx, rows(20)); err != nil {
			t.Fatalf("publish once the stream exists: %v", err)
		}
	})

	t.Run("stream refuses", func(t *testing.T) {
		nc, js := publishEnv(t, false)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: schema.StreamEvents, Subjects: []string{schema.SubjectEventsAll}, MaxMsgs: 5, Discard: jetstream.DiscardNew,
		}); err != nil {
			t.Fatal(err)
		}
		p := newEventPublisher(nc, 4)
		defer p.close()
		err := p.publish(ctx, rows(30))
		if err == nil || !strings.Contains(err.Error(), "maximum messages") {
			t.Fatalf("publish past the stream's limit: %v, want its error", err)
		}
	})

	t.Run("no ack", func(t *testing.T) {
		nc, _ := publishEnv(t, false)
		// A plain subscriber takes the messages and answers nothing, as
		// acks lost with a connection would.
		sink, err := nc.Subscribe(schema.SubjectEventsAll, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Unsubscribe() //nolint:errcheck // test cleanup
		p := newEventPublisher(nc, 8)
		p.ackTimeout = 300 * time.Millisecond
		defer p.close()
		start := time.Now()
		err = p.publish(ctx, rows(3))
		if err == nil || !strings.Contains(err.Error(), "no ack within") {
			t.Fatalf("publish with no acks: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("gave up after %v", d)
		}
	})

	t.Run("ctx", func(t *testing.T) {
		nc, _ := publishEnv(t, false)
		sink, err := nc.Subscribe(schema.SubjectEventsAll, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Unsubscribe() //nolint:errcheck // test cleanup
		p := newEventPublisher(nc, 8)
		defer p.close()
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := p.publish(cctx, rows(20)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish past ctx: %v", err)
		}
	})
}

// TestPublishOversizedEvent: an event whose raw JSON is larger than the
// server's max_payload goes out without it, instead of failing its batch
// for ever; the others are unchanged.
func TestPublishOversizedEvent(t *testing.T) {
	nc, js := publishEnv(t, true)
	big := strings.Repeat(`{"k":"<&>"}`, int(nc.MaxPayload())/11+1)
	rows := &schema.Rows{
		Management: []schema.ManagementRow{
			{EventID: "big", Kind: schema.KindOther, Field: "new_field", PhoneNumberID: "1001", Raw: big},
			{EventID: "small", Kind: schema.KindOther, Field: "new_field", PhoneNumberID: "1001", Raw: `{"k":1}`},
		},
		Statuses: []schema.StatusRow{{EventID: "status", PhoneNumberID: "1001", Status: "sent", Extra: big}},
	}
	p := newEventPublisher(nc, 16)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.publish(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range storedEvents(t, js) {
		got[m.Header.Get(schema.HeaderMsgID)] = string(m.Data)
	}
	if len(got) != 3 || strings.Contains(got["big"], `"raw"`) || !strings.Contains(got["small"], `"raw":"{\"k\":1}"`) ||
		strings.Contains(got["status"], `"extra"`) || !strings.Contains(got["status"], `"status":"sent"`) {
		t.Fatalf("stored %d events: big %.200s small %s status %.200s", len(got), got["big"], got["small"], got["status"])
	}
}

// TestReplyError: what each reply of EVENTS other than a PubAck means to
// stage 1: the stream not answering, no room to store the event, or storing the same event from an
// earlier try, is an outage (the bodies wait, never dead letters); a
// refusal of the message itself is not.
func TestReplyError(t *testing.T) {
	for _, c := range []struct {
		name   string
		m      *nats.Msg
		outage bool
	}{
		{"no responders", &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}, true},
		{"no quorum", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`)}, true},
		{"the same event being stored", &nats.Msg{Data: []byte(`{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}`)}, true},
		{"the account's limits", &nats.Msg{Data: []byte(`{"error":{"code":400,"err_code":10002,"description":"resource limits exceeded for account"}}`)}, true},
		{"the server's storage", &nats.Msg{Data: []byte(`{"error":{"code":500,"err_code":10047,"description":"insufficient storage resources available"}}`)}, true},
		{"a message too large", &nats.Msg{Data: []byte(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`)}, false},
		{"no PubAck", &nats.Msg{Data: []byte(`hello`)}, false},
	} {
		err := replyError(c.m)
		if err == nil || isOutage(err) != c.outage {
			t.Errorf("%s: %v, outage %v; want outage %v", c.name, err, isOutage(err), c.outage)
		}
	}
}

// TestHistoryMessageErrorsStayOffEvents: the errors of messages a history
// sync carries (past messages, some of months ago) are not published for
// stage 2, which applied a 131048 of one like a failed status of now and
// stopped the number; the chunk's own error still is.
func TestHistoryMessageErrorsStayOffEvents(t *testing.T) {
	nc, js := publishEnv(t, true)
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[` +
		`{"field":"history","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"messages":[{"from":"447700900456","id":"wamid.H1","timestamp":"1781515001","type":"image","errors":[{"code":131048,"title":"Spam rate limit hit"}]}],` +
		`"history":[{"metadata":{"phase":0,"chunk_order":1,"progress":10},"errors":[{"code":2593109,"title":"History sync error"}],"threads":[{"id":"447700900456","messages":[` +
		`{"from":"447700900456","id":"wamid.T2","timestamp":"1781515003","type":"image","errors":[{"code":131048,"title":"Spam rate limit hit"}]}]}]}]}}]}]}`)
	rows := normalizeBody(NewNormalizer(schema.NewHasher(normKey)), body, normSource(1))
	if len(rows.Errors) != 3 {
		t.Fatalf("%d error rows, want 3 (the chunk's, two messages')", len(rows.Errors))
	}
	p := newEventPublisher(nc, 16)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.publish(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, m := range storedEvents(t, js) {
		if strings.HasSuffix(m.Subject, "."+string(schema.KindError)) {
			var e struct {
				Row schema.ErrorRow `json:"row"`
			}
			if err := json.Unmarshal(m.Data, &e); err != nil {
				t.Fatal(err)
			}
			codes = append(codes, fmt.Sprintf("%d %q", e.Row.Code, e.Row.MessageID))
		}
	}
	if want := []string{`2593109 ""`}; !reflect.DeepEqual(codes, want) {
		t.Errorf("error events %v, want only the chunk's %v", codes, want)
	}
}

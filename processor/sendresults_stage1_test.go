package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// Send results published straight to their RAW subject (as a sending
// service does, without ingest's headers) reach ClickHouse as errors of
// origin send_result and EVENTS as send_result events.
func TestStage1SendResults(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: schema.SubjectSendResults, Data: []byte(sendResultsDocument)}); err != nil {
		t.Fatal(err)
	}
	p.publish(schema.SendResultsApp, []byte(sendResultsDocument)) // the same again, as the API publishes it
	p.drained(30 * time.Second)
	equalCounts(t, "send-result errors", p.codeCounts("SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin = 'send_result' GROUP BY code"),
		map[string]uint64{"130429": 1, "131056": 1})
	equalCounts(t, "failures_by_minute", p.codeCounts("SELECT toString(code), toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute WHERE origin = 'send_result' GROUP BY code"),
		map[string]uint64{"130429": 1, "131056": 1})
	// One dead letter per document and item: its two copies (one published
	// without Wahook-Received-At, stamped by the stream) can fall into two
	// seconds of received_at, so count the identities, not the rows.
	if got := p.count("SELECT uniqExact(raw_msg_id, item) FROM {db}.dead_letters FINAL WHERE reason = 'bad_send_result' AND item = 'results[2].error_code'"); got != 1 {
		t.Errorf("dead letters of the bad result: %d", got)
	}
	s, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("wahook.events.106540352242922.send_result"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["wahook.events.106540352242922.send_result"]; n != 3 {
		t.Errorf("EVENTS holds %d send_result events, want 3: %v", n, info.State.Subjects)
	}
}

// sendResultsDocument is sendResultsDoc of the package's own tests.
const sendResultsDocument = `{"results": [
 {"phone_number_id": "106540352242922", "waba_id": "w1", "status": "accepted", "message_id": "wamid.S1", "recipient": "15551230001", "timestamp": 1773500000, "campaign": "spring"},
 {"phone_number_id": "106540352242922", "waba_id": "w1", "status": "failed", "error_code": 130429, "error_title": "Rate limit hit", "recipient": "15551230002", "timestamp": "2026-03-14T15:00:01Z", "request_id": "r-2", "campaign": "spring", "template": "promo"},
 {"phone_number_id": "106540352242922", "status": "failed", "recipient": "15551230003", "timestamp": 1773500002},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 131056, "recipient": "15551230004", "timestamp": 1773500003}
]}`

package processor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

const sendResultsDoc = `{"results": [
 {"phone_number_id": "106540352242922", "waba_id": "w1", "status": "accepted", "message_id": "wamid.S1", "recipient": "15551230001", "timestamp": 1773500000, "campaign": "spring"},
 {"phone_number_id": "106540352242922", "waba_id": "w1", "status": "failed", "error_code": 130429, "error_title": "Rate limit hit", "recipient": "15551230002", "timestamp": "2026-03-14T15:00:01Z", "request_id": "r-2", "campaign": "spring", "template": "promo"},
 {"phone_number_id": "106540352242922", "status": "failed", "recipient": "15551230003", "timestamp": 1773500002},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 131056, "recipient": "15551230004", "timestamp": 1773500003},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 131056, "recipient": "15551230004", "timestamp": 1773500003}
]}`

func TestNormalizeSendResults(t *testing.T) {
	n := NewNormalizer(schema.NewHasher(normKey))
	src := schema.Source{App: schema.SendResultsApp, ReceivedAt: time.Unix(1773500100, 0), RawSeq: 7}
	var rows schema.Rows
	n.Normalize([]byte(sendResultsDoc), src, "", &rows)
	if len(rows.SendResults) != 3 || len(rows.Errors) != 2 || len(rows.DeadLetters) != 1 || len(rows.Statuses) != 0 {
		t.Fatalf("%d results, %d errors, %d dead letters: %+v", len(rows.SendResults), len(rows.Errors), len(rows.DeadLetters), rows)
	}
	if d := rows.DeadLetters[0]; d.Reason != ReasonBadSendResult || d.Item != "results[2].error_code" {
		t.Errorf("dead letter %+v", d)
	}
	e := rows.Errors[0]
	if e.Origin != "send_result" || e.Code != 130429 || e.Template != "promo" || e.Campaign != "spring" || e.EventID != rows.SendResults[1].EventID ||
		!e.EventTime.Equal(time.Date(2026, 3, 14, 15, 0, 1, 0, time.UTC)) || e.RecipientHash == "" {
		t.Errorf("error row %+v", e)
	}
	b, _ := json.Marshal(rows)
	if strings.Contains(string(b), "1555123000") {
		t.Errorf("a recipient's number is kept: %s", b)
	}
	// Ids do not depend on when or how the document came.
	var again schema.Rows
	n.Normalize([]byte(sendResultsDoc), schema.Source{App: schema.SendResultsApp, ReceivedAt: time.Now(), RawSeq: 99}, "x", &again)
	for i := range rows.SendResults {
		if rows.SendResults[i].EventID != again.SendResults[i].EventID {
			t.Errorf("result %d: id changed", i)
		}
	}
	var bad schema.Rows
	n.Normalize([]byte(`not json`), src, "", &bad)
	if len(bad.DeadLetters) != 1 || bad.DeadLetters[0].Reason != ReasonBadSendResults || len(bad.SendResults) != 0 {
		t.Errorf("not json: %+v", bad)
	}
	// A Meta webhook under another app is not taken for send results.
	var meta schema.Rows
	n.Normalize([]byte(sendResultsDoc), schema.Source{App: "default"}, "", &meta)
	if len(meta.SendResults) != 0 || len(meta.DeadLetters) != 1 {
		t.Errorf("send results under a Meta app: %+v", meta)
	}
}

// TestSendResultRecipientAsWebhooks: a sender writes the recipient as it
// wrote its send request ("+1 (555) 123-0009"); Meta's webhooks carry the
// digits. The report's recipient hash was of the string as written, so it
// never met the webhooks' (the funnel's joins, stage 2's cool-downs); it is
// the hash of the digits now, and a BSUID's is of the BSUID.
func TestSendResultRecipientAsWebhooks(t *testing.T) {
	h := schema.NewHasher(normKey)
	n := NewNormalizer(h)
	doc := `{"results": [
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 131056, "recipient": "+1 (555) 123-0009", "timestamp": 1773500003},
 {"phone_number_id": "106540352242922", "status": "accepted", "message_id": "wamid.B1", "recipient": "US.20571938846102937745", "timestamp": 1773500004}
]}`
	var rows schema.Rows
	n.Normalize([]byte(doc), schema.Source{App: schema.SendResultsApp, ReceivedAt: time.Unix(1773500100, 0), RawSeq: 8}, "", &rows)
	if len(rows.SendResults) != 2 || len(rows.Errors) != 1 {
		t.Fatalf("%d results, %d errors: %+v", len(rows.SendResults), len(rows.Errors), rows)
	}
	if got, want := rows.SendResults[0].RecipientHash, h.Hash("15551230009"); got != want || rows.Errors[0].RecipientHash != want {
		t.Errorf("recipient hash %s (error row %s), want %s: the hash of the digits, as a webhook's recipient_id", got, rows.Errors[0].RecipientHash, want)
	}
	if got, want := rows.SendResults[1].RecipientHash, h.Hash("US.20571938846102937745"); got != want {
		t.Errorf("BSUID recipient hash %s, want %s", got, want)
	}
}

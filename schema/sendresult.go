package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/wahook/wahook/schema/meta"
)

// SendResultsApp is the RAW app of send results: sending services report
// each send's outcome (POST /api/v1/send-results, or a JetStream publish of
// the same JSON to SubjectSendResults), and stage 1 turns it into events
// like a webhook. App names starting with "_" are reserved, so no Meta app
// can be configured under it.
const SendResultsApp = "_send_results"

// SubjectSendResults is the RAW subject of send results.
const SubjectSendResults = SubjectRawPrefix + SendResultsApp

// Send-result statuses.
const (
	SendAccepted = "accepted" // the send API took the message (message_id set)
	SendFailed   = "failed"   // the send API refused it (error_code set)
)

// MaxSendResults is the most results in one document.
const MaxSendResults = 1000

// SendResults is the document sending services report:
//
//	{"results": [{"phone_number_id": "106540352242922", "status": "failed",
//	  "error_code": 130429, "recipient": "15551234567", "timestamp": 1773500000}]}
type SendResults struct {
	Results []SendResult `json:"results"`
}

// SendResult is one send's outcome, as the sending service saw the
// synchronous answer of Meta's send API.
type SendResult struct {
	PhoneNumberID string    `json:"phone_number_id"`       // required: the number that sent
	WabaID        string    `json:"waba_id,omitempty"`     //
	Status        string    `json:"status"`                // required: accepted or failed
	MessageID     string    `json:"message_id,omitempty"`  // required when accepted: the wamid
	ErrorCode     int32     `json:"error_code,omitempty"`  // required when failed
	ErrorTitle    string    `json:"error_title,omitempty"` //
	Recipient     string    `json:"recipient,omitempty"`   // the number or BSUID sent to; stored only as a keyed hash
	Timestamp     Timestamp `json:"timestamp"`             // required: when the send API answered
	RequestID     string    `json:"request_id,omitempty"`  // the service's own id of the send; tells apart two identical failures
	Campaign      string    `json:"campaign,omitempty"`    // the biz_opaque_callback_data sent with it
	Template      string    `json:"template,omitempty"`    // the template name, if one was sent
}

// Timestamp is a time given as Unix seconds (a number or a string of
// digits) or as RFC 3339.
type Timestamp struct{ time.Time }

// UnmarshalJSON reads Unix seconds or RFC 3339.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		t.Time = time.Unix(n, 0).UTC()
		return nil
	}
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("%q is neither Unix seconds nor RFC 3339", s)
	}
	t.Time = v.UTC()
	return nil
}

// MarshalJSON writes Unix seconds.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, t.Unix(), 10), nil
}

// SendResultError is a problem of one field of a send-results document.
type SendResultError struct {
	Path    string // e.g. results[3].error_code
	Message string
}

func (e *SendResultError) Error() string { return e.Path + ": " + e.Message }

// ParseSendResults decodes and checks a document. It returns the results
// and, for each result that is wrong, a SendResultError; a document that is
// not one at all is an error with an empty index list.
func ParseSendResults(body []byte) (*SendResults, []*SendResultError, error) {
	var doc SendResults
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, &SendResultError{Path: "body", Message: err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, &SendResultError{Path: "body", Message: "more after the document: one JSON object per request"}
	}
	if len(doc.Results) == 0 {
		return nil, nil, &SendResultError{Path: "results", Message: "no results"}
	}
	if len(doc.Results) > MaxSendResults {
		return nil, nil, &SendResultError{Path: "results", Message: fmt.Sprintf("%d results; at most %d per document", len(doc.Results), MaxSendResults)}
	}
	var bad []*SendResultError
	for i := range doc.Results {
		if err := doc.Results[i].check(); err != nil {
			if err.Path == "" {
				err.Path = fmt.Sprintf("results[%d]", i)
			} else {
				err.Path = fmt.Sprintf("results[%d].%s", i, err.Path)
			}
			bad = append(bad, err)
		}
	}
	return &doc, bad, nil
}

// Check reports the first wrong field of r as a *SendResultError, as
// ParseSendResults would (its Path without the result's index), or nil:
// what a sending service checks before it reports r.
func (r *SendResult) Check() error {
	if err := r.check(); err != nil {
		return err
	}
	return nil
}

// check reports the first wrong field of r.
func (r *SendResult) check() *SendResultError {
	switch {
	case !meta.ValidNumberID(r.PhoneNumberID):
		return &SendResultError{"phone_number_id", "required: a phone number id, 1 to 32 digits"}
	case r.Status != SendAccepted && r.Status != SendFailed:
		return &SendResultError{"status", `must be "accepted" or "failed"`}
	case r.Status == SendAccepted && r.MessageID == "":
		return &SendResultError{"message_id", "required when accepted"}
	case r.Status == SendFailed && r.ErrorCode == 0:
		return &SendResultError{"error_code", "required when failed"}
	case r.ErrorCode < 0:
		return &SendResultError{"error_code", "must be Meta's error code, a positive integer"}
	case r.Status == SendAccepted && r.ErrorCode != 0:
		return &SendResultError{"error_code", "only with failed"}
	case r.Timestamp.IsZero() || r.Timestamp.Unix() <= 0 || r.Timestamp.Unix() > 1<<32-1:
		return &SendResultError{"timestamp", "required: Unix seconds or RFC 3339"}
	case len(r.MessageID) > 256 || len(r.Recipient) > 256 || len(r.RequestID) > 256 || len(r.Campaign) > 4*512 || utf8.RuneCountInString(r.Campaign) > 512 ||
		len(r.Template) > 512 || len(r.ErrorTitle) > 512 || len(r.WabaID) > 64:
		return &SendResultError{"", "a field is too long"}
	}
	return nil
}

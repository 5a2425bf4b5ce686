package processor

import (
	"strconv"

	"github.com/wahook/wahook/schema"
)

// ReasonBadSendResults is the reason of a send-results document that is
// not one (not JSON, no results); ReasonBadSendResult of one wrong result
// in it, the others kept.
const (
	ReasonBadSendResults = "bad_send_results"
	ReasonBadSendResult  = "bad_send_result"
)

// sendResults turns a send-results document (schema.SendResults) into a
// send_result event per result and, for a failed one, an error row of
// origin send_result. The recipient is kept only as a keyed hash. A wrong
// result is a dead letter; the others of the document are kept.
func (n *Normalizer) sendResults(body []byte, src schema.Source, rawMsgID string, rows *schema.Rows) {
	if rawMsgID == "" {
		rawMsgID = schema.RawMsgID(body)
	}
	doc, bad, err := schema.ParseSendResults(body)
	if err != nil {
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: rawMsgID, Reason: ReasonBadSendResults, Error: err.Error(), Body: string(body),
		})
		return
	}
	skip := map[int]bool{}
	for _, e := range bad {
		var i int
		if _, err := fmtSscanIndex(e.Path, &i); err == nil {
			skip[i] = true
		}
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: rawMsgID, Item: e.Path, Reason: ReasonBadSendResult, Error: e.Message,
		})
	}
	seen := map[string]bool{}
	for i := range doc.Results {
		if skip[i] {
			continue
		}
		r := &doc.Results[i]
		var recipient string
		if r.Recipient != "" {
			// "+1 555-123-4567" as the webhooks' 15551234567.
			recipient = n.hash.Hash(schema.Recipient(r.Recipient))
		}
		var codes []int32
		if r.Status == schema.SendFailed {
			codes = []int32{r.ErrorCode}
		}
		at := r.Timestamp.UTC()
		id := schema.EventID(schema.KindSendResult, r.PhoneNumberID, r.MessageID, r.RequestID, recipient, r.Status,
			strconv.FormatInt(at.Unix(), 10), schema.CodesPart(codes))
		if seen[id] {
			continue
		}
		seen[id] = true
		rows.SendResults = append(rows.SendResults, schema.SendResultRow{
			Source: src, EventID: id, EventTime: at, WabaID: r.WabaID, PhoneNumberID: r.PhoneNumberID,
			MessageID: r.MessageID, RequestID: r.RequestID, RecipientHash: recipient, Status: r.Status,
			ErrorCodes: codes, Campaign: r.Campaign, Template: r.Template,
		})
		if r.Status == schema.SendFailed {
			rows.Errors = append(rows.Errors, schema.ErrorRow{
				Source: src, EventID: id, Origin: originSendResult, EventTime: at, WabaID: r.WabaID,
				PhoneNumberID: r.PhoneNumberID, MessageID: r.MessageID, RecipientHash: recipient,
				Code: r.ErrorCode, Title: r.ErrorTitle, Campaign: r.Campaign, Template: r.Template,
			})
		}
	}
}

// fmtSscanIndex reads the index of a "results[N]..." path.
func fmtSscanIndex(path string, i *int) (int, error) {
	const prefix = "results["
	if len(path) <= len(prefix) || path[:len(prefix)] != prefix {
		return 0, strconv.ErrSyntax
	}
	end := len(prefix)
	for end < len(path) && path[end] >= '0' && path[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(path[len(prefix):end])
	*i = n
	return n, err
}

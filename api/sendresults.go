package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/wahook/wahook/internal/httpbody"
	"github.com/wahook/wahook/schema"
)

// SendResultsAnswer is the answer to a stored send-results document.
type SendResultsAnswer struct {
	Accepted int    `json:"accepted"` // results stored
	ID       string `json:"id"`       // the document's id in RAW (its Nats-Msg-Id): a retry of the same bytes is stored once
}

// intakeTimeout bounds the wait for JetStream's ack of a document.
const intakeTimeout = 5 * time.Second

// sendResults takes a send-results document (schema.SendResults): checked
// whole, so that a wrong result refuses the request and nothing of it is
// stored; then stored in RAW and answered 202 once JetStream holds it.
// Stage 1 turns it into events and error rows like a webhook.
func (s *Server) sendResults(c *fiber.Ctx) error {
	if s.cfg.Intake == nil {
		return s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "send-result intake is off: this API runs without NATS, or with --send-results=false"})
	}
	body, err := httpbody.Read(c.Request(), bodyLimit) // in memory of its own: Fiber reuses its buffer
	switch {
	case errors.Is(err, httpbody.ErrTooLarge):
		return s.writeError(c, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBadParameter,
			Message: fmt.Sprintf("body over the limit of %d bytes", bodyLimit)})
	case errors.Is(err, httpbody.ErrMalformed):
		c.Set(fiber.HeaderConnection, "close") // the rest of the stream cannot be framed
		return s.writeError(c, &Error{Status: http.StatusBadRequest, Code: CodeBadParameter,
			Message: "malformed chunked body: a chunk size that is not hex, or a chunk not ended by CRLF"})
	case err != nil:
		return s.writeError(c, &Error{Status: http.StatusRequestTimeout, Code: CodeBadParameter,
			Message: "body cut short or not received in time"})
	}
	doc, bad, err := schema.ParseSendResults(body)
	if err != nil {
		e := err.(*schema.SendResultError)
		return s.writeError(c, BadParameter(e.Path, "%s", e.Message))
	}
	if len(bad) > 0 {
		return s.writeError(c, BadParameter(bad[0].Path, "%s (%d wrong results in all; nothing was stored)", bad[0].Message, len(bad)))
	}
	ids := make([]string, len(doc.Results))
	for i := range doc.Results {
		ids[i] = doc.Results[i].PhoneNumberID
	}
	if t := tenantOf(c); t != nil {
		// A tenant reports for its own numbers only, and names none but
		// its WABAs: a result's waba_id is stored as it is, and a foreign
		// one would put the tenant's failures (and its number) in another
		// tenant's reports.
		for i := range doc.Results {
			if w := doc.Results[i].WabaID; w != "" && !t.ownsWaba(w) {
				return s.writeError(c, notFound(fmt.Sprintf("results[%d].waba_id", i)))
			}
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.QueryTimeout)
		defer cancel()
		for i, id := range ids {
			nums, err := s.numbersOf(ctx, t, id)
			if err != nil {
				return s.writeError(c, err)
			}
			if !nums[id] {
				return s.writeError(c, notFound(fmt.Sprintf("results[%d].phone_number_id", i)))
			}
		}
	}
	tok, _ := c.Locals(localToken).(string)
	fresh, e := s.numbers.admit(tok, ids)
	if e != nil {
		s.metrics.numbersRefused.Inc()
		return s.writeError(c, e)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), intakeTimeout)
	defer cancel()
	if err := s.cfg.Intake.PublishRaw(ctx, schema.SendResultsApp, body); err != nil {
		s.numbers.forget(tok, fresh) // not stored: its new numbers are not the token's yet
		s.log.Warn("send results not stored", errField(err))
		return s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "JetStream did not take the document in time; retry"})
	}
	s.metrics.sendResults.Add(float64(len(doc.Results)))
	b, err := Encode(SendResultsAnswer{Accepted: len(doc.Results), ID: schema.RawMsgID(body)})
	if err != nil {
		return s.writeError(c, err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	s.metrics.requests.WithLabelValues("send-results", "202").Inc()
	return c.Status(http.StatusAccepted).Send(b)
}

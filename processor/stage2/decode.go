package stage2

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// The fields of management rows whose events come from the Business app:
// a number that has them is a coexistence number (docs/meta-webhooks.md 9.13-9.15).
const (
	fieldEchoes    = "smb_message_echoes"
	fieldHistory   = "history"
	fieldStateSync = "smb_app_state_sync"
)

// wireEvent is what stage 2 reads of an EVENTS message (schema/README.md,
// "Messages on WAHOOK_EVENTS"); the rest of the row is skipped.
type wireEvent struct {
	Kind schema.Kind `json:"kind"`
	V    int         `json:"v"`
	Row  struct {
		EventID       string    `json:"event_id"`
		EventTime     time.Time `json:"event_time"`
		PhoneNumberID string    `json:"phone_number_id"`
		WabaID        string    `json:"waba_id"`
		MessageID     string    `json:"message_id"`
		Status        string    `json:"status"`
		ErrorCodes    []int32   `json:"error_codes"`
		RecipientHash string    `json:"recipient_hash"`
		Field         string    `json:"field"`
		Event         string    `json:"event"`
		NewValue      string    `json:"new_value"`
		Code          int32     `json:"code"`  // an error event's
		Index         uint16    `json:"index"` // an error event's, within its owner
	} `json:"row"`
}

// event is one decoded EVENTS message.
type event struct {
	// id is the event id: the event counts once (its errors, an inbound
	// message, an echo).
	id string
	// msg is the message id of an event that is evidence of an outbound
	// message (a send result accepted, any status): the message counts
	// once in the traffic, at the first of its evidence stage 2 sees.
	msg    string
	number string // phone number id
	e      pacing.Event
	// moveFrom is the second its message counted at until this event,
	// earlier evidence of it, came (seen); 0 if none.
	moveFrom int64
	// ahead is the event's own second when it was stamped ahead of the
	// clock and counts at the clock's instead (apply); 0 otherwise.
	ahead int64
}

// countable reports whether the event adds to counts (traffic, errors), so
// that it must count once however often it is delivered.
func (ev *event) countable() bool { return ev.e.Inbound || ev.e.Outbound || len(ev.e.Codes) > 0 }

var errNoNumber = errors.New("no phone number id")

// decodeEvent maps an EVENTS message to what pacing needs:
//
//   - outbound: the earliest evidence of a message: a send result
//     "accepted" or any status of it (sent, delivered, read, played,
//     failed; Meta can skip "sent"), once per message id (see
//     Config.MessageMemory; earlier evidence that comes later moves it); or an echo of a message sent from the Business
//     app (field smb_message_echoes), which also marks coexistence;
//   - inbound: an event of kind inbound;
//   - codes: the error codes of a failed status or a failed send result
//     (130429, 131056 and 131057 mostly come that way), with the recipient
//     for pair-rate cool-downs;
//   - management: field, event and new value (quality updates); history
//     and app state syncs mark coexistence.
//
// It reports errNoNumber for an event without a number (templates,
// accounts), which stage 2 has nothing to do with.
func decodeEvent(data []byte, ev *event) error {
	var w wireEvent
	if err := unmarshalWire(data, &w); err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	if w.V != 1 {
		return fmt.Errorf("decode event: version %d", w.V)
	}
	r := &w.Row
	if r.PhoneNumberID == "" || r.PhoneNumberID == schema.NoNumber {
		return errNoNumber
	}
	if len(r.PhoneNumberID) > schema.MaxSubjectToken {
		// No key or subject can carry it (stage 1 refuses such ids; this is
		// an event from elsewhere): a bad event, acked, never a state whose
		// writes fail for ever.
		return fmt.Errorf("decode event %s: a phone number id of %d bytes", r.EventID, len(r.PhoneNumberID))
	}
	*ev = event{id: r.EventID, number: r.PhoneNumberID}
	e := &ev.e
	e.Kind, e.At, e.Status = w.Kind, r.EventTime.Unix(), r.Status
	if w.Kind != schema.KindSendResult {
		// Meta's webhooks name the number's WABA (entry.id); a send result
		// names what its sender says, which is not taken for it.
		e.Waba = r.WabaID
	}
	switch w.Kind {
	case schema.KindStatus:
		if schema.OutboundEvidence(r.Status) && r.MessageID != "" {
			e.Outbound, ev.msg = true, r.MessageID
		}
		if r.Status == "failed" {
			e.Codes = r.ErrorCodes
			e.Recipient = r.RecipientHash
		}
	case schema.KindSendResult:
		switch r.Status {
		case schema.SendAccepted:
			e.Outbound = true
			ev.msg = r.MessageID
		case schema.SendFailed:
			e.Codes = r.ErrorCodes
			e.Recipient = r.RecipientHash
		}
	case schema.KindInbound:
		e.Inbound = true
	case schema.KindError:
		// One event per error of its owner: keyed like its row.
		ev.id = r.EventID + "-" + strconv.Itoa(int(r.Index))
		if r.Code != 0 {
			e.Codes = []int32{r.Code}
		}
	default:
		e.Field, e.Name, e.NewValue = r.Field, r.Event, r.NewValue
		switch r.Field {
		case fieldEchoes:
			e.Outbound, e.Coexistence = true, true
		case fieldHistory, fieldStateSync:
			e.Coexistence = true
		}
	}
	if r.EventTime.IsZero() {
		return fmt.Errorf("decode event %s: no event_time", r.EventID)
	}
	return nil
}

// seen reports whether the event counted before, and remembers it. An
// event that is only evidence of a message (no errors) is that message:
// it counted before if any evidence of the message did. Another is itself
// (its errors count once); its evidence of a message then counts in the
// traffic only if none came before.
//
// Evidence earlier than what its message counted at so far sets moveFrom:
// the message then counts at this event's second instead.
func (ev *event) seen(d *pacing.Deduper) bool {
	ev.moveFrom = 0
	if ev.msg != "" && len(ev.e.Codes) == 0 {
		seen, was := d.FirstEvidence(ev.msg, ev.e.At)
		if seen && ev.e.At < was {
			ev.moveFrom = was
		}
		return seen
	}
	if ev.ahead != 0 {
		if d.SeenAhead(ev.id, ev.ahead) {
			return true
		}
	} else if d.Seen(ev.id, ev.e.At) {
		return true
	}
	if ev.msg != "" {
		if seen, was := d.FirstEvidence(ev.msg, ev.e.At); seen {
			ev.e.Outbound = false
			if ev.e.At < was {
				ev.moveFrom = was
			}
		}
	}
	return false
}

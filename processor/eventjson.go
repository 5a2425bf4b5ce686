package processor

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/jsonscan"
)

// The JSON of an event (Event{Kind, V: 1, Row}) is appended by hand: it is
// stage 1's busiest encoding, one per event, and encoding/json walks each
// row by reflection and allocates its result. The bytes are exactly those
// of json.Marshal(Event{...}): the fields in the order and with the names
// of the rows' tags, Source's first, "omitempty" as encoding/json reads it
// (empty strings, zero numbers, false and empty slices left out, times
// always written), strings escaped as it escapes them (HTML characters,
// invalid UTF-8, U+2028 and U+2029 included). TestEventJSONMatchesEncodingJSON
// holds them to that, for every fixture, for rows with every field set, and
// under fuzzing; a field added to a row fails it until it is added here.

// appendStatusEvent appends the event JSON of r.
func appendStatusEvent(b []byte, r *schema.StatusRow) ([]byte, error) {
	w := jsonObject{b: appendEventHead(b, schema.KindStatus)}
	w.source(&r.Source)
	w.str("event_id", r.EventID)
	w.time("event_time", r.EventTime)
	w.str("waba_id", r.WabaID)
	w.str("phone_number_id", r.PhoneNumberID)
	w.str("display_phone_number", r.DisplayPhoneNumber)
	w.str("message_id", r.MessageID)
	w.str("status", r.Status)
	w.str("recipient_hash", r.RecipientHash)
	w.str("recipient_user_hash", r.RecipientUserHash)
	w.str("recipient_type", r.RecipientType)
	w.str("group_id", r.GroupID)
	w.str("participant_hash", r.ParticipantHash)
	w.int32s("error_codes", r.ErrorCodes)
	w.int("pricing_billable", int64(r.PricingBillable))
	w.str("pricing_model", r.PricingModel)
	w.str("pricing_type", r.PricingType)
	w.str("pricing_category", r.PricingCategory)
	w.str("conversation_id", r.ConversationID)
	w.str("conversation_origin", r.ConversationOrigin)
	w.time("conversation_expiry", r.ConversationExpiry)
	w.str("campaign", r.Campaign)
	w.str("template", r.Template)
	w.str("extra", r.Extra)
	return w.end()
}

// appendInboundEvent appends the event JSON of r.
func appendInboundEvent(b []byte, r *schema.InboundRow) ([]byte, error) {
	w := jsonObject{b: appendEventHead(b, schema.KindInbound)}
	w.source(&r.Source)
	w.str("event_id", r.EventID)
	w.time("event_time", r.EventTime)
	w.str("waba_id", r.WabaID)
	w.str("phone_number_id", r.PhoneNumberID)
	w.str("display_phone_number", r.DisplayPhoneNumber)
	w.str("message_id", r.MessageID)
	w.str("type", r.Type)
	w.str("from_hash", r.FromHash)
	w.str("from_user_hash", r.FromUserHash)
	w.str("group_id", r.GroupID)
	w.str("context_message_id", r.ContextMessageID)
	w.bool("context_forwarded", r.ContextForwarded)
	w.str("interactive_type", r.InteractiveType)
	w.str("referral_source_type", r.ReferralSourceType)
	w.str("referral_source_id", r.ReferralSourceID)
	w.str("referral_ctwa_clid", r.ReferralCtwaClid)
	w.int32s("error_codes", r.ErrorCodes)
	w.str("extra", r.Extra)
	w.str("content", r.Content)
	return w.end()
}

// appendManagementEvent appends the event JSON of r.
func appendManagementEvent(b []byte, r *schema.ManagementRow) ([]byte, error) {
	w := jsonObject{b: appendEventHead(b, r.Kind)}
	w.source(&r.Source)
	w.str("event_id", r.EventID)
	w.str("kind", string(r.Kind))
	w.str("field", r.Field)
	w.time("event_time", r.EventTime)
	w.str("waba_id", r.WabaID)
	w.str("phone_number_id", r.PhoneNumberID)
	w.str("display_phone_number", r.DisplayPhoneNumber)
	w.str("event", r.Event)
	w.str("subject_id", r.SubjectID)
	w.str("subject_name", r.SubjectName)
	w.str("old_value", r.OldValue)
	w.str("new_value", r.NewValue)
	w.str("reason", r.Reason)
	w.str("raw", r.Raw)
	return w.end()
}

// appendEventHead appends the envelope up to the row's opening brace.
func appendEventHead(b []byte, k schema.Kind) []byte {
	b = append(b, `{"kind":`...)
	b = appendJSONString(b, string(k))
	return append(b, `,"v":1,"row":{`...)
}

// jsonObject appends the members of one object, with encoding/json's
// omitempty, and remembers the first error (a time it cannot encode).
type jsonObject struct {
	b    []byte
	more bool // a member was written: the next needs a comma
	err  error
}

func (w *jsonObject) key(k string) {
	if w.more {
		w.b = append(w.b, ',')
	}
	w.more = true
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonObject) source(s *schema.Source) {
	w.str("app", s.App)
	w.time("received_at", s.ReceivedAt)
	w.uint("raw_seq", s.RawSeq)
}

func (w *jsonObject) str(k, v string) {
	if v != "" {
		w.key(k)
		w.b = appendJSONString(w.b, v)
	}
}

func (w *jsonObject) int(k string, v int64) {
	if v != 0 {
		w.key(k)
		w.b = strconv.AppendInt(w.b, v, 10)
	}
}

func (w *jsonObject) uint(k string, v uint64) {
	if v != 0 {
		w.key(k)
		w.b = strconv.AppendUint(w.b, v, 10)
	}
}

func (w *jsonObject) bool(k string, v bool) {
	if v {
		w.key(k)
		w.b = append(w.b, "true"...)
	}
}

func (w *jsonObject) int32s(k string, v []int32) {
	if len(v) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '[')
	for i, c := range v {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = strconv.AppendInt(w.b, int64(c), 10)
	}
	w.b = append(w.b, ']')
}

// time writes t as Time.MarshalJSON does (RFC 3339 with nanoseconds as
// needed), failing where it fails (a year outside 0-9999). encoding/json's
// omitempty never leaves out a struct, so the zero time is written too.
func (w *jsonObject) time(k string, t time.Time) {
	w.key(k)
	w.b = append(w.b, '"')
	if b, err := t.AppendText(w.b); err == nil {
		w.b = b
	} else if w.err == nil {
		w.err = err
	}
	w.b = append(w.b, '"')
}

// end closes the row and the envelope.
func (w *jsonObject) end() ([]byte, error) {
	return append(w.b, '}', '}'), w.err
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it (with its default HTML escaping).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Past the bytes written as they are: 0x20-0x7F except '"', '\\',
		// '<', '>' and '&'. (Not at a byte outside ASCII: in text that is
		// mostly outside it, a scan per character would find nothing.)
		if s[i] < utf8.RuneSelf {
			if i += jsonscan.PlainHTML(s[i:]); i == len(s) {
				break
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package schema

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is the kind of a normalized event: the last token of its EVENTS
// subject (docs/architecture.md, "Names").
type Kind string

// Kinds of events.
const (
	KindStatus     Kind = "status"      // a message status (sent, delivered, read, played, failed, ...)
	KindInbound    Kind = "inbound"     // an inbound message
	KindCall       Kind = "call"        // a call status or call event (field calls)
	KindNumber     Kind = "number"      // phone_number_quality_update, phone_number_name_update, ...
	KindAccount    Kind = "account"     // account_update, business_capability_update, account_alerts, ...
	KindTemplate   Kind = "template"    // message_template_*, template_category_update
	KindPreference Kind = "preference"  // user_preferences
	KindSendResult Kind = "send_result" // a send result reported by a sending service
	// KindError is an error of a number that belongs to no status, message
	// or send result: value.errors[] and history[].errors[] (origin value,
	// history). The others travel with their own event.
	KindError Kind = "error"
	KindOther Kind = "other" // any other field, kept raw
)

// EventsSubject returns the EVENTS subject of an event:
// wahook.events.<phone_number_id>.<kind>, with NoNumber where there is none.
func EventsSubject(phoneNumberID string, k Kind) string {
	return SubjectEventsPrefix + SubjectToken(phoneNumberID) + "." + string(k)
}

// MaxSubjectToken is the longest value SubjectToken passes through as it is.
const MaxSubjectToken = 64

// SubjectToken makes a value from a body safe as one subject token: ids are
// digits, but a body may carry anything, and a '.', a space or a wildcard
// would break the per-number subjects or make the publish fail. Anything
// but ASCII letters, digits, '-' and '_' becomes '_'; "" becomes NoNumber.
// A value longer than MaxSubjectToken becomes "h" and the hex of the first
// 16 bytes of its SHA-256, so that no value can make a subject longer than
// the server takes (the decoder refuses such ids; this bounds whatever
// else reaches a subject).
func SubjectToken(s string) string {
	if s == "" {
		return NoNumber
	}
	if len(s) > MaxSubjectToken {
		sum := sha256.Sum256([]byte(s))
		return "h" + hex.EncodeToString(sum[:16])
	}
	ok := true
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !tokenByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func tokenByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_'
}

// EventID returns the deterministic id of an event: the first 16 bytes of
// SHA-256 over its kind and the parts that make it what it is, in hex. The
// same event decoded again (a replay, a redelivery, a Meta retry in another
// POST) gets the same id, so it never counts twice (docs/architecture.md, "Identity").
//
// The parts of each kind are fixed in schema/README.md; changing them
// changes every id, so they are versioned by the "v1" below.
//
// The kind and the parts are joined with the byte 0x1f. A part can hold that
// byte itself (a body can spell it \u001f), and then two different lists of
// parts would join to the same bytes: ("a\x1f", "b") and ("a", "\x1fb").
// So when the kind or any part holds 0x1f, the id is computed over another
// prefix, "v1e", with 0x1e written as 0x1e 0x02 and 0x1f as 0x1e 0x01 in the
// kind and every part, which then hold no separator. Ids are stored: a kind
// and parts without 0x1f keep the id they always had.
func EventID(k Kind, parts ...string) string {
	h := sha256.New()
	if !hasUnitSep(k, parts) {
		h.Write([]byte("v1\x1f"))
		h.Write([]byte(k))
		for _, p := range parts {
			h.Write([]byte{0x1f})
			h.Write([]byte(p))
		}
	} else {
		h.Write([]byte("v1e\x1f"))
		writeEscaped(h, string(k))
		for _, p := range parts {
			h.Write([]byte{0x1f})
			writeEscaped(h, p)
		}
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// hasUnitSep reports whether the kind or a part holds the separator 0x1f.
func hasUnitSep(k Kind, parts []string) bool {
	if strings.IndexByte(string(k), 0x1f) >= 0 {
		return true
	}
	for _, p := range parts {
		if strings.IndexByte(p, 0x1f) >= 0 {
			return true
		}
	}
	return false
}

// writeEscaped writes s with 0x1e as 0x1e 0x02 and 0x1f as 0x1e 0x01, so
// that the written bytes hold no separator and can be split back.
func writeEscaped(h hash.Hash, s string) {
	for {
		i := strings.IndexAny(s, "\x1e\x1f")
		if i < 0 {
			h.Write([]byte(s))
			return
		}
		esc := byte(0x02)
		if s[i] == 0x1f {
			esc = 0x01
		}
		h.Write([]byte(s[:i]))
		h.Write([]byte{0x1e, esc})
		s = s[i+1:]
	}
}

// CodesPart joins error codes for EventID.
func CodesPart(codes []int32) string {
	b := make([]byte, 0, 8*len(codes))
	for i, c := range codes {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(c), 10)
	}
	return string(b)
}

// Hasher turns end users' phone numbers and BSUIDs into keyed hashes
// (HMAC-SHA256 under the operator's key, first 16 bytes, hex), so that the
// same user can be counted and joined without the number being stored
// (docs/architecture.md, "ClickHouse"). An empty input hashes to "". It is safe for
// concurrent use.
type Hasher struct {
	key []byte
	// macs holds *hasherState: HMAC states that keep the key's padded
	// blocks already absorbed (hmac's Reset restores them without hashing
	// them again), so a hash costs two SHA-256 blocks instead of four and
	// no allocation but its result.
	macs sync.Pool
}

// hasherState is one pooled HMAC with the buffers it writes through, so
// that neither the input nor the sum escapes per call.
type hasherState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// Recipient is an end user's address in the form that is hashed: a phone
// number as the digits Meta's webhooks carry (recipient_id, wa_id: no "+",
// no spaces, dashes, brackets or dots), however a sending service wrote it
// in its send request ("+1 (555) 123-4567"); anything else (a BSUID) as it
// is. A sender's report and Meta's webhook about one recipient then hash
// the same, and a cool-down written for one finds the other.
func Recipient(s string) string {
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '+' && i == 0, c == ' ', c == '-', c == '(', c == ')', c == '.':
		default:
			return s
		}
	}
	if digits == len(s) || digits == 0 {
		return s
	}
	b := make([]byte, 0, digits)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= '0' && c <= '9' {
			b = append(b, c)
		}
	}
	return string(b)
}

// NewHasher returns a Hasher with key; the key must stay the same for hashes
// to stay comparable.
func NewHasher(key []byte) *Hasher {
	h := &Hasher{key: append([]byte(nil), key...)}
	h.macs.New = func() any {
		m := hmac.New(sha256.New, h.key)
		m.Reset() // keeps the padded key's state for the next Resets
		return &hasherState{mac: m}
	}
	return h
}

// Hash returns the keyed hash of s.
func (h *Hasher) Hash(s string) string {
	if s == "" {
		return ""
	}
	st := h.macs.Get().(*hasherState)
	st.mac.Reset()
	st.in = append(st.in[:0], s...)
	st.mac.Write(st.in)
	sum := st.mac.Sum(st.sum[:0])
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	if cap(st.in) > 1<<10 {
		st.in = nil // do not keep a large input's buffer
	}
	h.macs.Put(st)
	return string(out[:])
}

// Source tells where a row came from, for replay and audit.
type Source struct {
	App        string    `json:"app,omitempty"`         // the app the body came in for
	ReceivedAt time.Time `json:"received_at,omitempty"` // when ingest received the body
	RawSeq     uint64    `json:"raw_seq,omitempty"`     // the body's sequence in WAHOOK_RAW (0 for send results)
}

// StatusRow is one message status (docs/meta-webhooks.md 5). Id parts: phone number
// id, message id, recipient hash, group id, participant hash, status,
// Meta's timestamp as sent, codes (schema/README.md).
type StatusRow struct {
	Source
	EventID            string    `json:"event_id,omitempty"`
	EventTime          time.Time `json:"event_time,omitempty"` // Meta's timestamp
	WabaID             string    `json:"waba_id,omitempty"`
	PhoneNumberID      string    `json:"phone_number_id,omitempty"`
	DisplayPhoneNumber string    `json:"display_phone_number,omitempty"`
	MessageID          string    `json:"message_id,omitempty"`
	Status             string    `json:"status,omitempty"`              // lower case; unknown values kept
	RecipientHash      string    `json:"recipient_hash,omitempty"`      // keyed hash of recipient_id (a group id is kept as is in GroupID)
	RecipientUserHash  string    `json:"recipient_user_hash,omitempty"` // keyed hash of recipient_user_id (BSUID); the participant's in a group
	RecipientType      string    `json:"recipient_type,omitempty"`      // "group" for group sends, else ""
	GroupID            string    `json:"group_id,omitempty"`
	ParticipantHash    string    `json:"participant_hash,omitempty"` // keyed hash of recipient_participant_id
	ErrorCodes         []int32   `json:"error_codes,omitempty"`
	PricingBillable    int8      `json:"pricing_billable,omitempty"` // 1 true, 0 false, -1 absent
	PricingModel       string    `json:"pricing_model,omitempty"`
	PricingType        string    `json:"pricing_type,omitempty"`
	PricingCategory    string    `json:"pricing_category,omitempty"`
	ConversationID     string    `json:"conversation_id,omitempty"`
	ConversationOrigin string    `json:"conversation_origin,omitempty"`
	ConversationExpiry time.Time `json:"conversation_expiry,omitempty"` // zero when absent
	Campaign           string    `json:"campaign,omitempty"`            // biz_opaque_callback_data
	Template           string    `json:"template,omitempty"`            // template name where known (send results)
	Extra              string    `json:"extra,omitempty"`               // unknown keys as a JSON object, "" when none
}

// ErrorRow is one error occurrence: of a status, of a value, of an inbound
// message, or of a send result (docs/meta-webhooks.md 6.2). Its id is the owner's
// EventID and the error's index within it.
type ErrorRow struct {
	Source
	EventID       string    `json:"event_id,omitempty"` // the owning event's id
	Index         uint16    `json:"index,omitempty"`
	Origin        string    `json:"origin,omitempty"` // status, value, inbound, history, call, send_result
	EventTime     time.Time `json:"event_time,omitempty"`
	WabaID        string    `json:"waba_id,omitempty"`
	PhoneNumberID string    `json:"phone_number_id,omitempty"`
	MessageID     string    `json:"message_id,omitempty"`
	RecipientHash string    `json:"recipient_hash,omitempty"`
	Code          int32     `json:"code,omitempty"`
	Title         string    `json:"title,omitempty"`
	Message       string    `json:"message,omitempty"`
	Details       string    `json:"details,omitempty"`
	Href          string    `json:"href,omitempty"`
	Campaign      string    `json:"campaign,omitempty"`
	Template      string    `json:"template,omitempty"`
}

// InboundRow is one inbound message (docs/meta-webhooks.md 7). Id parts: phone number
// id, message id. Message text is stored only in Content, and only when an
// operator switches content storage on (wahook --store-content); otherwise
// Content is empty and the text is kept nowhere. Content is never part of
// the id.
type InboundRow struct {
	Source
	EventID            string    `json:"event_id,omitempty"`
	EventTime          time.Time `json:"event_time,omitempty"`
	WabaID             string    `json:"waba_id,omitempty"`
	PhoneNumberID      string    `json:"phone_number_id,omitempty"`
	DisplayPhoneNumber string    `json:"display_phone_number,omitempty"`
	MessageID          string    `json:"message_id,omitempty"`
	Type               string    `json:"type,omitempty"`
	FromHash           string    `json:"from_hash,omitempty"`      // keyed hash of from
	FromUserHash       string    `json:"from_user_hash,omitempty"` // keyed hash of from_user_id (BSUID)
	GroupID            string    `json:"group_id,omitempty"`
	ContextMessageID   string    `json:"context_message_id,omitempty"`
	ContextForwarded   bool      `json:"context_forwarded,omitempty"`
	InteractiveType    string    `json:"interactive_type,omitempty"`
	ReferralSourceType string    `json:"referral_source_type,omitempty"`
	ReferralSourceID   string    `json:"referral_source_id,omitempty"`
	ReferralCtwaClid   string    `json:"referral_ctwa_clid,omitempty"`
	ErrorCodes         []int32   `json:"error_codes,omitempty"`
	Extra              string    `json:"extra,omitempty"`
	// Content is what the user wrote or chose: the text, a media caption,
	// the title of the reply button or list row, a template button's text,
	// a reaction's emoji, a location's name and address, an order's text
	// (processor's content has the list). "" unless content storage is on.
	Content string `json:"content,omitempty"`
}

// ManagementRow is one event of any field other than message statuses and
// inbound messages: quality and limits, names, account, templates, user
// preferences, calls, and fields not known yet (kept raw). Id parts: kind,
// field, WABA id, number, subject, event, event time, and the raw value's
// hash where nothing else tells two events apart.
type ManagementRow struct {
	Source
	EventID            string    `json:"event_id,omitempty"`
	Kind               Kind      `json:"kind,omitempty"`
	Field              string    `json:"field,omitempty"`
	EventTime          time.Time `json:"event_time,omitempty"` // entry.time or the item's timestamp
	WabaID             string    `json:"waba_id,omitempty"`
	PhoneNumberID      string    `json:"phone_number_id,omitempty"` // resolved from the display number where needed
	DisplayPhoneNumber string    `json:"display_phone_number,omitempty"`
	Event              string    `json:"event,omitempty"`        // e.g. THROUGHPUT_UPGRADE, REJECTED, stop, RINGING
	SubjectID          string    `json:"subject_id,omitempty"`   // template id, call id, user hash, ...
	SubjectName        string    `json:"subject_name,omitempty"` // template name, ...
	OldValue           string    `json:"old_value,omitempty"`    // old limit, previous quality or category, ...
	NewValue           string    `json:"new_value,omitempty"`    // current limit, new quality or category, ...
	Reason             string    `json:"reason,omitempty"`
	Raw                string    `json:"raw,omitempty"` // the change's value as received (JSON)
	// Late marks an event whose phone number id comes from its display
	// number, learned from message webhooks: it may have gone to EVENTS
	// before without it (a display number no message webhook had shown
	// yet, applied once one did; or a batch that failed before the number
	// was learned). Not stored; see ManagementMsgID.
	Late bool `json:"-"`
}

// SendResultRow is one send result a sending service reported
// (SendResult). Id parts: phone number id, message id, request id,
// recipient hash, status, timestamp (Unix seconds), error code. It goes to
// EVENTS (kind send_result); a failed one also gives an ErrorRow of origin
// send_result, so it counts in the failure distribution.
type SendResultRow struct {
	Source
	EventID       string    `json:"event_id,omitempty"`
	EventTime     time.Time `json:"event_time,omitempty"`
	WabaID        string    `json:"waba_id,omitempty"`
	PhoneNumberID string    `json:"phone_number_id,omitempty"`
	MessageID     string    `json:"message_id,omitempty"`
	RequestID     string    `json:"request_id,omitempty"`
	RecipientHash string    `json:"recipient_hash,omitempty"`
	Status        string    `json:"status,omitempty"` // accepted or failed
	ErrorCodes    []int32   `json:"error_codes,omitempty"`
	Campaign      string    `json:"campaign,omitempty"`
	Template      string    `json:"template,omitempty"`
}

// DeadLetter is a body, or one item of it, that could not be decoded.
type DeadLetter struct {
	Source
	RawMsgID string `json:"raw_msg_id,omitempty"` // Nats-Msg-Id of the body
	Item     string `json:"item,omitempty"`       // path of the bad item, e.g. entry[0].changes[1].value.statuses[2]; "" for the whole body
	Reason   string `json:"reason,omitempty"`     // a stable, short reason code, e.g. "not_json"
	Error    string `json:"error,omitempty"`      // the decoder's message
	Body     string `json:"body,omitempty"`       // the body as received
}

// Rows are the rows of one or more bodies, by table.
type Rows struct {
	Statuses    []StatusRow
	Errors      []ErrorRow
	Inbound     []InboundRow
	Management  []ManagementRow
	DeadLetters []DeadLetter
	SendResults []SendResultRow // table send_results; their failures are also in Errors
	// Numbers are the display numbers the bodies' metadata paired with a
	// phone number id, once per body, for stage 1 to learn (NumberMap). They
	// are not rows: nothing stores them as they are, and Len leaves them out.
	Numbers []NumberPair
}

// NumberPair is a display phone number and the phone number id a message
// webhook's metadata gave with it.
type NumberPair struct {
	Display       string
	PhoneNumberID string
}

// Len is the number of rows.
func (r *Rows) Len() int {
	return len(r.Statuses) + len(r.Errors) + len(r.Inbound) + len(r.Management) + len(r.DeadLetters) + len(r.SendResults)
}

// Append adds o's rows to r.
func (r *Rows) Append(o *Rows) {
	r.Statuses = append(r.Statuses, o.Statuses...)
	r.Errors = append(r.Errors, o.Errors...)
	r.Inbound = append(r.Inbound, o.Inbound...)
	r.Management = append(r.Management, o.Management...)
	r.DeadLetters = append(r.DeadLetters, o.DeadLetters...)
	r.SendResults = append(r.SendResults, o.SendResults...)
	r.Numbers = append(r.Numbers, o.Numbers...)
}

// Reset empties r, keeping its memory for reuse.
func (r *Rows) Reset() {
	r.Statuses, r.Errors, r.Inbound = r.Statuses[:0], r.Errors[:0], r.Inbound[:0]
	r.Management, r.DeadLetters, r.SendResults = r.Management[:0], r.DeadLetters[:0], r.SendResults[:0]
	r.Numbers = r.Numbers[:0]
}

// ManagementMsgID is the Nats-Msg-Id of a management event: its event id,
// followed by "." and its phone number id when it is Late. An event
// published first without its number (a display number not learned yet)
// and later with it thus reaches EVENTS both times, on the two subjects,
// even within the stream's duplicate window.
func ManagementMsgID(r *ManagementRow) string {
	if !r.Late {
		return r.EventID
	}
	return r.EventID + "." + r.PhoneNumberID
}

// ErrorEventID is the Nats-Msg-Id of an error event (KindError): the owning
// event's id and the error's index, as the error's row is keyed.
func ErrorEventID(r *ErrorRow) string { return r.EventID + "-" + strconv.Itoa(int(r.Index)) }

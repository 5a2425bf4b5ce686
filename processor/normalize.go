package processor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// Normalizer turns decoded webhooks into rows: every status, inbound
// message, error and management event of a body, each with its
// deterministic id. It holds no state and does no I/O, and is safe for
// concurrent use.
//
// What is kept of end users (docs/architecture.md, "ClickHouse"): their phone numbers
// and BSUIDs become keyed hashes; message text is copied into a row only
// when an operator switches content storage on (WithContent), and then
// only into InboundRow.Content.
// Raw values are kept only for management fields that carry no end-user
// content, and for fields and keys not known yet, which are kept verbatim
// (docs/meta-webhooks.md 11.2 rule 1): a change of an unknown field (and of the
// fields kept raw by design, such as the group fields) in its row's Raw,
// the unknown keys of a status or inbound message in its row's Extra, and
// those of the envelope (root, entry, change, value) and of value-level
// errors, calls, preferences and automatic events in one row per body
// (field FieldUnknownKeys). Unknown keys inside an inbound message's content (its
// text, media, ..., or the payload of a type not known yet) keep their path
// with a null value; unknown keys inside contacts, echoes, history and app
// state sync are not kept, because those carry end users' names, numbers
// and messages. A dead letter keeps its body as received, since that is
// what a fixed decoder replays.
//
// Ids (docs/architecture.md, "Identity") are made from what an event is, never from
// the POST it came in or from state: the same status inside another POST,
// a redelivery and a replay all give the same id (only the unknown-keys row,
// which is about the POST, has the body's id). A management event's id
// uses the number as the event carries it (metadata phone number id, else
// display number), not the id resolved later, which may be learned only
// later. Two copies of one event inside one body are kept once.
//
// Number-level webhooks (quality, limits, throughput upgrades, names) name
// their number by display number only. The normalizer fills in the id when
// the same body pairs that display number with an id in a message
// webhook's metadata; every such pair is in rows.Numbers, and stage 1
// resolves the rest against what it has learned (NumberMap).
type Normalizer struct {
	hash    *schema.Hasher
	content bool // WithContent
}

// NewNormalizer returns a Normalizer.
func NewNormalizer(h *schema.Hasher, opts ...NormalizerOption) *Normalizer {
	n := &Normalizer{hash: h}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Dead-letter reasons set here. A whole body that cannot be decoded has the
// decoder's reason (meta.Reason: not_json, not_object, no_entry, ...).
const (
	// ReasonBadItem is the reason of one item that had a key of the wrong
	// type or lacked one it needs; the other items of its body were kept.
	ReasonBadItem = "bad_item"
	// ReasonNoEvents is the reason of a body that decoded but held no event
	// at all, such as an empty entry list: it is kept to be looked at.
	ReasonNoEvents = "no_events"
	// ReasonRetriesExhausted is the reason of a body that could not be
	// stored on its own in Config.MaxDeliver tries while ClickHouse and
	// NATS answered (stage 1's poison isolation): its error says why.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonTooManyBadItems is the reason of the one row that stands for
	// the bad items of a body past the first meta.MaxProblems; it keeps
	// the whole body, and its error the count.
	ReasonTooManyBadItems = "too_many_bad_items"
)

// FieldUnknownKeys is the Field of the management row (kind other) that
// holds the unknown keys of a body's envelope as a JSON object {path: value}.
const FieldUnknownKeys = "_unknown_keys"

// FieldUnexpectedLists is the Field of the management rows (kind other,
// event UNEXPECTED_LISTS) that name the lists a change's field does not
// read; the change's field is their subject name.
const FieldUnexpectedLists = "_unexpected_lists"

// Origins of error rows.
const (
	originStatus     = schema.OriginStatus
	originValue      = schema.OriginValue
	originInbound    = schema.OriginInbound
	originHistory    = schema.OriginHistory
	originCall       = schema.OriginCall
	originEcho       = schema.OriginEcho
	originSendResult = schema.OriginSendResult
)

// maxDateTime is the last second a ClickHouse DateTime holds; a timestamp
// outside (0, maxDateTime] is not a time and the receive time stands in.
const maxDateTime = math.MaxUint32

// Normalize implements BodyNormalizer.
func (n *Normalizer) Normalize(body []byte, src schema.Source, rawMsgID string, rows *schema.Rows) {
	if src.App == schema.SendResultsApp {
		n.sendResults(body, src, rawMsgID, rows)
		return
	}
	before := rows.Len()
	p, err := meta.Decode(body)
	if err != nil {
		if rawMsgID == "" {
			rawMsgID = schema.RawMsgID(body)
		}
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: rawMsgID, Reason: meta.Reason(err), Error: err.Error(), Body: string(body),
		})
		return
	}
	b := run{n: n, p: p, src: src, body: body, rawMsgID: rawMsgID, rows: rows}
	b.fallback = src.ReceivedAt.UTC().Truncate(time.Second)
	for _, pr := range p.Problems {
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: b.bodyID(), Item: pr.Path, Reason: ReasonBadItem, Error: pr.Error(), Body: string(pr.Raw),
		})
	}
	if p.ProblemsDropped > 0 {
		// One row for the rest, with the body once, however many there
		// are: a body of a million bad items makes 101 rows, not a million.
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: b.bodyID(), Reason: ReasonTooManyBadItems, Body: string(body),
			Error: fmt.Sprintf("%d more bad items after the first %d, which have rows of their own", p.ProblemsDropped, meta.MaxProblems),
		})
	}
	b.numbers = len(rows.Numbers)
	for env := range p.Changes() {
		if md := env.Change.Metadata; md != nil && md.DisplayPhoneNumber != "" && md.PhoneNumberID != "" {
			b.learn(md.DisplayPhoneNumber, md.PhoneNumberID)
		}
	}
	b.statuses()
	b.inbound()
	for env := range p.Changes() {
		b.change(env)
	}
	b.unknownKeys()
	if rows.Len() == before {
		rows.DeadLetters = append(rows.DeadLetters, schema.DeadLetter{
			Source: src, RawMsgID: b.bodyID(), Reason: ReasonNoEvents,
			Error: "the body decoded but holds no status, message, error or other event", Body: string(body),
		})
	}
}

// run is the normalization of one body.
type run struct {
	n        *Normalizer
	p        *meta.Payload
	src      schema.Source
	body     []byte
	rawMsgID string
	rows     *schema.Rows
	fallback time.Time // the receive time, for events without a time of their own
	numbers  int       // this body's pairs are rows.Numbers[numbers:]

	// The ids of the events added so far, to keep a repeated one once: in
	// few (no allocation) while there are few, then in seen.
	few  [16]string
	nFew int
	seen map[string]struct{}
}

// fresh reports whether id is new in this body, and records it. A body that
// repeats an item (docs/meta-webhooks.md 11.2 rule 6) yields it once, with its errors
// once.
func (b *run) fresh(id string) bool {
	if b.seen == nil {
		for _, x := range b.few[:b.nFew] {
			if x == id {
				return false
			}
		}
		if b.nFew < len(b.few) {
			b.few[b.nFew] = id
			b.nFew++
			return true
		}
		b.seen = make(map[string]struct{}, 4*len(b.few))
		for _, x := range b.few {
			b.seen[x] = struct{}{}
		}
	}
	if _, ok := b.seen[id]; ok {
		return false
	}
	b.seen[id] = struct{}{}
	return true
}

// learn records that the body pairs display with phone number id id, once.
func (b *run) learn(display, id string) {
	for _, p := range b.rows.Numbers[b.numbers:] {
		if p.Display == display && p.PhoneNumberID == id {
			return
		}
	}
	b.rows.Numbers = append(b.rows.Numbers, schema.NumberPair{Display: display, PhoneNumberID: id})
}

// ownNumber is the phone number id that this body's metadata pairs with
// display, or "".
func (b *run) ownNumber(display string) string {
	k := NumberKey(display)
	if k == "" {
		return ""
	}
	for _, p := range b.rows.Numbers[b.numbers:] {
		if NumberKey(p.Display) == k {
			return p.PhoneNumberID
		}
	}
	return ""
}

// bodyID is the body's RAW id: the Nats-Msg-Id it came with, or the same
// hash computed here.
func (b *run) bodyID() string {
	if b.rawMsgID == "" {
		b.rawMsgID = schema.RawMsgID(b.body)
	}
	return b.rawMsgID
}

// at returns the event time of unix seconds sec, or the receive time when
// sec is not a time.
func (b *run) at(sec int64) time.Time {
	if sec > 0 && sec <= maxDateTime {
		return time.Unix(sec, 0).UTC()
	}
	return b.fallback
}

func (b *run) hash(s string) string { return b.n.hash.Hash(s) }

// contentKeys are the keys of an inbound message that hold what the user
// wrote or sent (docs/meta-webhooks.md 7.2).
var contentKeys = map[string]struct{}{
	"text": {}, "image": {}, "video": {}, "audio": {}, "document": {}, "sticker": {}, "location": {},
	"contacts": {}, "interactive": {}, "button": {}, "reaction": {}, "order": {}, "system": {},
	"unsupported": {}, "edit": {}, "revoke": {},
}

var jsonNull = json.RawMessage("null")

// change adds the rows of one change other than its statuses and inbound
// messages: value-level errors, and the events of every other field.
func (b *run) change(env meta.Envelope) {
	c := env.Change
	if v := c.Messaging; v != nil {
		b.valueErrors(env, v)
		switch c.Field {
		case meta.FieldMessages:
			// Statuses and inbound messages have rows of their own.
		case meta.FieldCalls:
			b.calls(env, v)
		case meta.FieldUserPreferences:
			b.preferences(env, v)
		case meta.FieldSMBMessageEchoes:
			b.echoes(env, v)
		case meta.FieldHistory:
			b.history(env, v)
		case meta.FieldSMBAppStateSync:
			b.stateSync(env, v)
		case meta.FieldAutomaticEvents:
			b.automaticEvents(env, v)
		case meta.FieldAccountSettingsUpdate:
			r := schema.ManagementRow{Event: "SETTINGS_UPDATE", Raw: string(c.Value)}
			if s := v.PhoneNumberSettings; s != nil && env.PhoneNumberID() == "" {
				r.PhoneNumberID = s.PhoneNumberID
			}
			b.mgmt(env, schema.KindNumber, env.EntryTime(), "", r)
		}
		b.strayLists(env, v)
		return
	}
	b.management(env)
}

// strayLists adds a row (event UNEXPECTED_LISTS) for the lists of a
// messaging value that its field does not read: statuses under
// smb_message_echoes, calls under messages. Known to the decoder, they
// were neither rows nor unknown keys, and went nowhere. The row names each
// list with its length (reason, as "statuses:1,calls:2"); what they hold
// is not stored (they may carry users' text and numbers): RAW keeps the
// body, for a replay once a version reads them. Contacts (profile names)
// are never kept, under any field.
func (b *run) strayLists(env meta.Envelope, v *meta.MessagingValue) {
	f := env.Field()
	var buf []byte
	add := func(name string, n int, reads ...string) {
		if n == 0 || slices.Contains(reads, f) {
			return
		}
		if len(buf) > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, name...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(n), 10)
	}
	add("statuses", len(v.Statuses)+len(v.CallStatuses), meta.FieldMessages, meta.FieldCalls)
	add("messages", len(v.Messages), meta.FieldMessages, meta.FieldHistory)
	add("calls", len(v.Calls), meta.FieldCalls)
	add("user_preferences", len(v.UserPreferences), meta.FieldUserPreferences)
	add("message_echoes", len(v.MessageEchoes), meta.FieldSMBMessageEchoes)
	add("history", len(v.History), meta.FieldHistory)
	add("state_sync", len(v.StateSync), meta.FieldSMBAppStateSync)
	add("automatic_events", len(v.AutomaticEvents), meta.FieldAutomaticEvents)
	if v.PhoneNumberSettings != nil {
		add("phone_number_settings", 1, meta.FieldAccountSettingsUpdate)
	}
	if len(buf) == 0 {
		return
	}
	// The id is what the value is: its digest tells two such values apart.
	// The row has a field of its own (the change's is its subject name):
	// under the change's, an echo's field would count it as an outbound
	// message, in stage 2 and in /api/v1/throughput.
	if _, ok := b.mgmt(env, schema.KindOther, env.EntryTime(), "stray_lists "+rawSum(env.Change.Value), schema.ManagementRow{
		Event: "UNEXPECTED_LISTS", SubjectName: f, Reason: string(buf),
	}); ok {
		b.rows.Management[len(b.rows.Management)-1].Field = FieldUnexpectedLists
	}
}

func extra(x meta.Extras) string {
	if len(x) == 0 {
		return ""
	}
	b, err := x.MarshalJSON()
	if err != nil {
		return ""
	}
	return string(b)
}

// errCode returns e's code as the int32 of the row: -1 when e has none
// (no code, null or ""), rather than 0, Meta's code for an auth error, which
// would stop the number (class auth, verdict stop) for a malformed error.
func errCode(e *meta.Error) int32 {
	if e.NoCode {
		return -1
	}
	return code(e.Code)
}

// code returns an error code as the int32 of the row; one out of range is
// -1 rather than a wrapped value that could pass for a real code.
func code(c meta.FlexInt64) int32 {
	if c < math.MinInt32 || c > math.MaxInt32 {
		return -1
	}
	return int32(c)
}

func codes(errs []meta.Error) []int32 {
	if len(errs) == 0 {
		return nil
	}
	c := make([]int32, len(errs))
	for i := range errs {
		c[i] = errCode(&errs[i])
	}
	return c
}

// rawSum is a short digest of a JSON value with insignificant whitespace
// removed, for ids of events that only their value tells apart. It is not
// stored, only hashed again into the id.
func rawSum(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	src := raw
	if json.Compact(&buf, raw) == nil {
		src = buf.Bytes()
	}
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:8])
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

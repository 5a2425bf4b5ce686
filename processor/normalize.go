package processor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// NumberResolver learns and resolves display phone number -> phone number
// id; NumberMap is the shared implementation.
type NumberResolver interface {
	Learn(display, phoneNumberID string)
	Resolve(display string) string
}

// Normalizer turns decoded webhooks into rows: every status, inbound
// message, error and management event of a body, each with its
// deterministic id. It holds no state of its own (the NumberResolver does)
// and is safe for concurrent use if its NumberResolver is.
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
// display number), not the id resolved through the NumberResolver, which
// may be learned only later. Two copies of one event inside one body are
// kept once.
type Normalizer struct {
	hash    *schema.Hasher
	numbers NumberResolver
	content bool // WithContent
}

// NewNormalizer returns a Normalizer; numbers may be nil (no mapping).
func NewNormalizer(h *schema.Hasher, numbers NumberResolver, opts ...NormalizerOption) *Normalizer {
	n := &Normalizer{hash: h, numbers: numbers}
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
	// stored on its own in Config.MaxDeliver deliveries while ClickHouse
	// and NATS answered (stage 1's poison isolation): its error says why.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonTooManyBadItems is the reason of the one row that stands for
	// the bad items of a body past the first meta.MaxProblems; it keeps
	// the whole body, and its error the count.
	ReasonTooManyBadItems = "too_many_bad_items"
)

// FieldUnknownKeys is the Field of the management row (kind other) that
// holds the unknown keys of a body's envelope as a JSON object {path: value}.
const FieldUnknownKeys = "_unknown_keys"

// Origins of error rows.
const (
	originStatus     = schema.OriginStatus
	originValue      = schema.OriginValue
	originInbound    = schema.OriginInbound
	originHistory    = schema.OriginHistory
	originCall       = schema.OriginCall
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
	if n.numbers != nil {
		for env := range p.Changes() {
			if md := env.Change.Metadata; md != nil && md.DisplayPhoneNumber != "" && md.PhoneNumberID != "" {
				n.numbers.Learn(md.DisplayPhoneNumber, md.PhoneNumberID)
			}
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

// statuses adds a row per message status: statuses[] of field messages
// only, never call statuses (docs/meta-webhooks.md 9.16).
func (b *run) statuses() {
	for ref := range b.p.Statuses() {
		s := ref.Item
		ts := int64(s.Timestamp)
		r := schema.StatusRow{
			Source:             b.src,
			EventTime:          b.at(ts),
			WabaID:             ref.WABAID(),
			PhoneNumberID:      ref.PhoneNumberID(),
			DisplayPhoneNumber: ref.DisplayPhoneNumber(),
			MessageID:          s.ID,
			Status:             strings.ToLower(s.Status),
			ErrorCodes:         codes(s.Errors),
			PricingBillable:    -1,
			Campaign:           s.BizOpaqueCallbackData,
			Extra:              extra(s.Unknown),
		}
		recipient, group, participant, user := statusParties(s)
		r.RecipientHash, r.ParticipantHash, r.RecipientUserHash = b.hash(recipient), b.hash(participant), b.hash(user)
		if group {
			r.RecipientType, r.GroupID = meta.RecipientTypeGroup, s.RecipientID
		}
		if pr := s.Pricing; pr != nil {
			if pr.Billable != nil {
				r.PricingBillable = 0
				if *pr.Billable {
					r.PricingBillable = 1
				}
			}
			r.PricingModel, r.PricingType, r.PricingCategory = pr.PricingModel, pr.Type, pr.Category
		}
		if c := s.Conversation; c != nil {
			r.ConversationID, r.ConversationOrigin = c.ID, c.Origin.Type
			if exp := int64(c.ExpirationTimestamp); exp > 0 && exp <= maxDateTime {
				r.ConversationExpiry = time.Unix(exp, 0).UTC()
			}
		}
		// docs/meta-webhooks.md 11.2 rule 6, with the participant of a group send
		// (8.1: one wamid has a delivered status per member) and the Meta
		// timestamp as sent (not the receive time that stands in for a
		// missing one).
		r.EventID = schema.EventID(schema.KindStatus, r.PhoneNumberID, r.MessageID, r.RecipientHash, r.GroupID,
			r.ParticipantHash, r.Status, strconv.FormatInt(ts, 10), schema.CodesPart(r.ErrorCodes))
		if !b.fresh(r.EventID) {
			continue
		}
		b.rows.Statuses = append(b.rows.Statuses, r)
		who := r.RecipientHash
		if group {
			who = r.ParticipantHash
		}
		b.addErrors(r.EventID, originStatus, r.EventTime, r.WabaID, r.PhoneNumberID, r.MessageID, who, r.Campaign, s.Errors)
	}
}

// statusParties returns who a status is about: the recipient key (phone
// number, else BSUID, else parent BSUID: docs/meta-webhooks.md 8.3), or for a group
// send the participant's key instead, and the BSUID for recipient_user_hash.
// recipient_type is compared without case (docs/meta-webhooks.md 5.2 asks for that of
// status values; a "Group" must not fold every member into one recipient).
func statusParties(s *meta.Status) (recipient string, group bool, participant, user string) {
	switch {
	case s.IsGroup():
		return "", true, s.Recipient(), s.RecipientParticipantUserID
	case strings.EqualFold(s.RecipientType, meta.RecipientTypeGroup):
		return "", true, firstNonEmpty(s.RecipientParticipantID, s.RecipientParticipantUserID, s.RecipientParticipantParentUserID),
			s.RecipientParticipantUserID
	}
	return s.Recipient(), false, "", s.RecipientUserID
}

// addErrors adds the error rows of one owner event: its id, one row per
// error with the error's index (a uint16: errors past 65,535 are left out).
func (b *run) addErrors(owner, origin string, at time.Time, waba, number, msgID, recipient, campaign string, errs []meta.Error) {
	for i := range errs {
		if i > math.MaxUint16 {
			return
		}
		e := &errs[i]
		b.rows.Errors = append(b.rows.Errors, schema.ErrorRow{
			Source: b.src, EventID: owner, Index: uint16(i), Origin: origin, EventTime: at,
			WabaID: waba, PhoneNumberID: number, MessageID: msgID, RecipientHash: recipient,
			Code: code(e.Code), Title: e.Title, Message: e.Message, Details: e.ErrorData.Details, Href: e.Href,
			Campaign: campaign,
		})
	}
}

// inbound adds a row per inbound message: messages[] of field messages only
// (history and echoes are not inbound traffic: docs/meta-webhooks.md 11.2 rule 7).
func (b *run) inbound() {
	for ref := range b.p.InboundMessages() {
		m := ref.Item
		ts := int64(m.Timestamp)
		r := schema.InboundRow{
			Source:             b.src,
			EventTime:          b.at(ts),
			WabaID:             ref.WABAID(),
			PhoneNumberID:      ref.PhoneNumberID(),
			DisplayPhoneNumber: ref.DisplayPhoneNumber(),
			MessageID:          m.ID,
			Type:               m.Type,
			FromHash:           b.hash(m.Sender()), // phone, else BSUID (docs/meta-webhooks.md 8.3)
			FromUserHash:       b.hash(m.FromUserID),
			GroupID:            m.GroupID,
			ErrorCodes:         codes(m.Errors),
			Extra:              inboundExtra(m),
		}
		if c := m.Context; c != nil {
			r.ContextMessageID = c.ID
			r.ContextForwarded = c.Forwarded || c.FrequentlyForwarded
		}
		if m.Interactive != nil {
			r.InteractiveType = m.Interactive.Type
		}
		if rf := m.Referral; rf != nil {
			r.ReferralSourceType, r.ReferralSourceID, r.ReferralCtwaClid = rf.SourceType, rf.SourceID, rf.CtwaClid
		}
		if b.n.content {
			r.Content = content(m) // never part of the id
		}
		if m.ID != "" {
			r.EventID = schema.EventID(schema.KindInbound, r.PhoneNumberID, r.MessageID)
		} else {
			// Meta always sends an id; without one, what the message is
			// has to tell it apart.
			r.EventID = schema.EventID(schema.KindInbound, r.PhoneNumberID, "", r.FromHash,
				strconv.FormatInt(ts, 10), r.Type, rawSum(m.Raw))
		}
		if !b.fresh(r.EventID) {
			continue
		}
		b.rows.Inbound = append(b.rows.Inbound, r)
		b.addErrors(r.EventID, originInbound, r.EventTime, r.WabaID, r.PhoneNumberID, r.MessageID, r.FromHash, "", m.Errors)
	}
}

// contentKeys are the keys of an inbound message that hold what the user
// wrote or sent (docs/meta-webhooks.md 7.2).
var contentKeys = map[string]struct{}{
	"text": {}, "image": {}, "video": {}, "audio": {}, "document": {}, "sticker": {}, "location": {},
	"contacts": {}, "interactive": {}, "button": {}, "reaction": {}, "order": {}, "system": {},
	"unsupported": {}, "edit": {}, "revoke": {},
}

var jsonNull = json.RawMessage("null")

// inboundExtra renders a message's unknown keys, with the value of those
// inside its content (a known payload, or the payload named by a type not
// known yet) replaced by null: the key is recorded, the text is not.
func inboundExtra(m *meta.Message) string {
	x := m.Unknown
	var withheld meta.Extras
	for i, f := range x {
		seg := f.Key
		if j := strings.IndexAny(seg, ".["); j >= 0 {
			seg = seg[:j]
		}
		if _, ok := contentKeys[seg]; !ok && seg != m.Type {
			continue
		}
		if withheld == nil {
			withheld = append(meta.Extras(nil), x...)
		}
		withheld[i].Value = jsonNull
	}
	if withheld != nil {
		x = withheld
	}
	return extra(x)
}

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
		return
	}
	b.management(env)
}

// valueErrors adds the value-level errors of a change (docs/meta-webhooks.md 6.2).
// They belong to no message and carry no time, so their owner id is what
// the change is (rule 6 for management events): field, WABA, number,
// entry.time and the value itself. The same value inside another POST has
// the same id; two identical values cannot be told apart.
func (b *run) valueErrors(env meta.Envelope, v *meta.MessagingValue) {
	if len(v.Errors) == 0 {
		return
	}
	t := env.EntryTime()
	owner := schema.EventID(schema.KindOther, "value_errors", env.Field(), env.WABAID(), env.PhoneNumberID(),
		strconv.FormatInt(t, 10), rawSum(env.Change.Value))
	if !b.fresh(owner) {
		return
	}
	at := b.at(t)
	b.addErrors(owner, originValue, at, env.WABAID(), env.PhoneNumberID(), "", "", "", v.Errors)
}

// mgmt completes a management row (envelope columns, time, phone number id
// resolved from the display number where the value has none, id) and adds
// it, unless the body had it already; it returns the id and whether the row
// was added. at is the event's own time as sent (entry.time or the
// item's timestamp, 0 if none); tag tells items of one change apart where
// the row's columns may not.
func (b *run) mgmt(env meta.Envelope, k schema.Kind, at int64, tag string, r schema.ManagementRow) (string, bool) {
	r.Source, r.Kind, r.Field, r.WabaID = b.src, k, env.Field(), env.WABAID()
	r.EventTime = b.at(at)
	if r.DisplayPhoneNumber == "" {
		r.DisplayPhoneNumber = env.DisplayPhoneNumber()
	}
	if r.PhoneNumberID == "" {
		r.PhoneNumberID = env.PhoneNumberID()
	}
	// The id takes the number as the event carries it: the id resolved below
	// depends on what the map has learned by now, and a replay must not.
	number := r.PhoneNumberID
	if number == "" {
		number = r.DisplayPhoneNumber
	}
	if r.PhoneNumberID == "" && r.DisplayPhoneNumber != "" && b.n.numbers != nil {
		r.PhoneNumberID = b.n.numbers.Resolve(r.DisplayPhoneNumber)
	}
	var sum string
	if r.Raw != "" {
		sum = rawSum([]byte(r.Raw))
	}
	r.EventID = schema.EventID(k, r.Field, r.WabaID, number, r.SubjectID, r.Event,
		strconv.FormatInt(at, 10), r.OldValue, r.NewValue, sum, tag)
	if !b.fresh(r.EventID) {
		return r.EventID, false
	}
	b.rows.Management = append(b.rows.Management, r)
	return r.EventID, true
}

// management adds the row of a change of a management field, or of a field
// kept raw.
func (b *run) management(env meta.Envelope) {
	c := env.Change
	raw := string(c.Value)
	t := env.EntryTime()
	add := func(k schema.Kind, r schema.ManagementRow) { b.mgmt(env, k, t, "", r) }
	switch {
	case c.QualityUpdate != nil:
		// current_limit is deprecated in favour of
		// max_daily_conversations_per_business (docs/meta-webhooks.md 9.1).
		q := c.QualityUpdate
		mdc := string(q.MaxDailyConversationsPerBusiness)
		add(schema.KindNumber, schema.ManagementRow{
			DisplayPhoneNumber: q.DisplayPhoneNumber, Event: q.Event, OldValue: q.OldLimit,
			NewValue: firstNonEmpty(q.CurrentLimit, mdc), SubjectName: mdc, Raw: raw,
		})
	case c.NameUpdate != nil:
		u := c.NameUpdate
		add(schema.KindNumber, schema.ManagementRow{
			DisplayPhoneNumber: u.DisplayPhoneNumber, Event: u.Decision, NewValue: u.RequestedVerifiedName, Reason: u.RejectionReason, Raw: raw,
		})
	case c.Security != nil:
		add(schema.KindNumber, schema.ManagementRow{DisplayPhoneNumber: c.Security.DisplayPhoneNumber, Event: c.Security.Event, Raw: raw})
	case c.AccountUpdate != nil:
		a := c.AccountUpdate
		add(schema.KindAccount, schema.ManagementRow{Event: a.Event, SubjectID: a.PhoneNumber, Raw: raw})
	case c.CapabilityUpdate != nil:
		u := c.CapabilityUpdate
		add(schema.KindAccount, schema.ManagementRow{
			Event: "CAPABILITY_UPDATE", NewValue: string(u.MaxDailyConversationsPerBusiness), Raw: raw,
		})
	case c.AccountAlert != nil:
		a := c.AccountAlert
		add(schema.KindAccount, schema.ManagementRow{
			Event: a.AlertInfo.AlertType, SubjectID: a.EntityID, NewValue: a.AlertInfo.AlertSeverity, Reason: a.AlertInfo.AlertStatus, Raw: raw,
		})
	case c.AccountReview != nil:
		add(schema.KindAccount, schema.ManagementRow{Event: c.AccountReview.Decision, Raw: raw})
	case c.TemplateStatus != nil:
		u := c.TemplateStatus
		add(schema.KindTemplate, schema.ManagementRow{
			Event: u.Event, SubjectID: string(u.TemplateID), SubjectName: u.Name, NewValue: u.Category, Reason: u.Reason, Raw: raw,
		})
	case c.TemplateQuality != nil:
		u := c.TemplateQuality
		add(schema.KindTemplate, schema.ManagementRow{
			Event: "QUALITY_UPDATE", SubjectID: string(u.TemplateID), SubjectName: u.Name,
			OldValue: u.PreviousQualityScore, NewValue: u.NewQualityScore, Raw: raw,
		})
	case c.TemplateCategory != nil:
		// An impending change names the current category new_category and
		// the coming one correct_category (docs/meta-webhooks.md 9.8): old and new
		// are put the right way round here.
		u := c.TemplateCategory
		r := schema.ManagementRow{Event: "CATEGORY_UPDATE", SubjectID: string(u.TemplateID), SubjectName: u.Name,
			OldValue: u.PreviousCategory, NewValue: u.NewCategory, Raw: raw}
		if u.Impending() {
			r.Event, r.OldValue, r.NewValue = "CATEGORY_UPDATE_IMPENDING", u.NewCategory, u.CorrectCategory
		}
		add(schema.KindTemplate, r)
	case c.TemplateComponents != nil:
		u := c.TemplateComponents
		add(schema.KindTemplate, schema.ManagementRow{Event: "COMPONENTS_UPDATE", SubjectID: string(u.TemplateID), SubjectName: u.Name, Raw: raw})
	case c.PartnerSolution != nil:
		u := c.PartnerSolution
		add(schema.KindAccount, schema.ManagementRow{Event: u.Event, SubjectID: u.SolutionID, NewValue: u.SolutionStatus, Raw: raw})
	case c.PaymentConfiguration != nil:
		u := c.PaymentConfiguration
		add(schema.KindAccount, schema.ManagementRow{
			Event: "PAYMENT_CONFIGURATION_UPDATE", SubjectName: u.ConfigurationName, NewValue: u.Status, Raw: raw,
		})
	default:
		// A field not known yet, or kept raw by design (group_*, flows):
		// stored verbatim (docs/meta-webhooks.md 11.2 rule 1). A display number at its
		// top level, as on the other number fields, still names the number.
		r := schema.ManagementRow{Event: "RAW", Raw: raw}
		if c.Metadata == nil {
			r.DisplayPhoneNumber = sniffDisplayNumber(c.Value)
		}
		add(schema.KindOther, r)
	}
}

// sniffDisplayNumber returns the top-level display_phone_number of a value
// kept raw, or "".
func sniffDisplayNumber(raw []byte) string {
	if !bytes.Contains(raw, []byte(`"display_phone_number"`)) {
		return ""
	}
	var v struct {
		DisplayPhoneNumber json.RawMessage `json:"display_phone_number"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(v.DisplayPhoneNumber, &s) != nil || !meta.ValidDisplayNumber(s) {
		// Not a number: the row keeps no number (its raw value has it).
		return ""
	}
	return s
}

// calls adds a call row per call status and call event (field calls, kind
// call); they are never message statuses (docs/meta-webhooks.md 9.16). Their errors
// are error rows of origin call.
func (b *run) calls(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.CallStatuses {
		s := &v.CallStatuses[i]
		ts := int64(s.Timestamp)
		owner, ok := b.mgmt(env, schema.KindCall, ts, "call_status", schema.ManagementRow{
			Event: s.Status, SubjectID: s.ID, NewValue: s.Type, Reason: schema.CodesPart(codes(s.Errors)),
		})
		if !ok {
			continue
		}
		who := b.hash(firstNonEmpty(s.RecipientID, s.RecipientUserID))
		b.addErrors(owner, originCall, b.at(ts), env.WABAID(), env.PhoneNumberID(), s.ID, who, s.BizOpaqueCallbackData, s.Errors)
	}
	for i := range v.Calls {
		call := &v.Calls[i]
		ts := int64(call.Timestamp)
		owner, ok := b.mgmt(env, schema.KindCall, ts, "call", schema.ManagementRow{
			Event: call.Event, SubjectID: call.ID, NewValue: call.Status, OldValue: call.Direction,
			SubjectName: strconv.FormatInt(int64(call.Duration), 10), Reason: schema.CodesPart(codes(call.Errors)),
		})
		if !ok {
			continue
		}
		b.addErrors(owner, originCall, b.at(ts), env.WABAID(), env.PhoneNumberID(), call.ID, "", call.BizOpaqueCallbackData, call.Errors)
	}
}

// preferences adds a row per user preference (stop, resume), the user as a
// keyed hash.
func (b *run) preferences(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.UserPreferences {
		u := &v.UserPreferences[i]
		b.mgmt(env, schema.KindPreference, int64(u.Timestamp), "", schema.ManagementRow{
			Event: u.Value, SubjectID: b.hash(firstNonEmpty(u.WaID, u.UserID, u.ParentUserID)), NewValue: u.Category, Reason: u.Detail,
		})
	}
}

// echoes adds a row per message the business sent from the Business app
// (coexistence): outbound traffic of the number, not inbound (docs/meta-webhooks.md
// 9.13, 11.2 rule 7). Only what it is, never its content or recipient.
func (b *run) echoes(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.MessageEchoes {
		m := &v.MessageEchoes[i]
		b.mgmt(env, schema.KindOther, int64(m.Timestamp), "echo", schema.ManagementRow{
			Event: m.Type, SubjectID: m.ID, Reason: schema.CodesPart(codes(m.Errors)),
		})
	}
}

// history adds a row per history chunk (past messages, never traffic:
// docs/meta-webhooks.md 9.14) with its place in the sync and its message count, its
// errors as error rows of origin history, and a row per media follow-up.
func (b *run) history(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.History {
		h := &v.History[i]
		var msgs int
		var last int64
		for j := range h.Threads {
			for k := range h.Threads[j].Messages {
				msgs++
				last = max(last, int64(h.Threads[j].Messages[k].Timestamp))
			}
		}
		if last == 0 {
			last = env.EntryTime()
		}
		owner, ok := b.mgmt(env, schema.KindOther, last, rawSum(h.Raw), schema.ManagementRow{
			Event:       "HISTORY_CHUNK",
			SubjectID:   strconv.FormatInt(int64(h.Metadata.ChunkOrder), 10),
			SubjectName: strconv.Itoa(msgs) + " messages",
			OldValue:    strconv.FormatInt(int64(h.Metadata.Phase), 10),
			NewValue:    strconv.FormatInt(int64(h.Metadata.Progress), 10),
			Reason:      schema.CodesPart(codes(h.Errors)),
		})
		if !ok {
			continue
		}
		b.addErrors(owner, originHistory, b.at(last), env.WABAID(), env.PhoneNumberID(), "", "", "", h.Errors)
	}
	for i := range v.Messages {
		m := &v.Messages[i]
		b.mgmt(env, schema.KindOther, int64(m.Timestamp), "history_message", schema.ManagementRow{
			Event: m.Type, SubjectID: m.ID, Reason: schema.CodesPart(codes(m.Errors)),
		})
	}
}

// stateSync adds a row per change to the Business app's contact book, the
// contact as a keyed hash of their number; names are not kept.
func (b *run) stateSync(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.StateSync {
		s := &v.StateSync[i]
		var who string
		if s.Contact != nil {
			who = b.hash(s.Contact.PhoneNumber)
		}
		b.mgmt(env, schema.KindOther, int64(s.Metadata.Timestamp), "state_sync", schema.ManagementRow{
			Event: s.Action, SubjectID: who, NewValue: s.Type,
		})
	}
}

// automaticEvents adds a row per purchase or lead detected in a
// click-to-WhatsApp chat (docs/meta-webhooks.md 9.17).
func (b *run) automaticEvents(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.AutomaticEvents {
		a := &v.AutomaticEvents[i]
		r := schema.ManagementRow{Event: a.EventName, SubjectID: a.ID, SubjectName: a.CtwaClid}
		if d := a.CustomData; d != nil {
			r.NewValue, r.Reason = string(d.Value), d.Currency
		}
		b.mgmt(env, schema.KindOther, int64(a.Timestamp), "automatic_event", r)
	}
}

// unknownKeys adds one row holding the unknown keys of the body that no
// other row keeps: those of the envelope (root, entry, change, value,
// metadata) and of the items without an Extra column (value-level errors,
// calls, call statuses, user preferences, automatic events, settings), as
// {path: value} in body order. Its id is the body's: it says what this POST
// carried.
func (b *run) unknownKeys() {
	p := b.p
	if len(p.Unknown) == 0 {
		return
	}
	keep := map[*byte]struct{}{}
	add := func(x meta.Extras) {
		for i := range x {
			if len(x[i].Value) > 0 {
				keep[&x[i].Value[0]] = struct{}{}
			}
		}
	}
	add(p.Extra)
	for i := range p.Entries {
		e := &p.Entries[i]
		add(e.Extra)
		for j := range e.Changes {
			c := &e.Changes[j]
			add(c.Extra)
			v := c.Messaging
			if v == nil {
				continue
			}
			add(v.Extra)
			if v.Metadata != nil {
				add(v.Metadata.Extra)
			}
			if v.PhoneNumberSettings != nil {
				add(v.PhoneNumberSettings.Extra)
			}
			for k := range v.Errors {
				add(v.Errors[k].Unknown)
			}
			for k := range v.CallStatuses {
				add(v.CallStatuses[k].Unknown)
			}
			for k := range v.Calls {
				add(v.Calls[k].Unknown)
			}
			for k := range v.UserPreferences {
				add(v.UserPreferences[k].Unknown)
			}
			for k := range v.AutomaticEvents {
				add(v.AutomaticEvents[k].Unknown)
			}
		}
	}
	if len(keep) == 0 {
		return
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for _, u := range p.Unknown {
		if len(u.Value) == 0 {
			continue
		}
		if _, ok := keep[&u.Value[0]]; !ok {
			continue
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(u.Path)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(u.Value)
	}
	buf.WriteByte('}')
	r := schema.ManagementRow{
		Source: b.src, EventID: schema.EventID(schema.KindOther, FieldUnknownKeys, b.bodyID()), Kind: schema.KindOther,
		Field: FieldUnknownKeys, EventTime: b.fallback, Raw: buf.String(),
	}
	if len(p.Entries) == 1 {
		r.WabaID = p.Entries[0].ID
	}
	if ids := p.PhoneNumberIDs(); len(ids) == 1 {
		r.PhoneNumberID = ids[0]
	}
	b.rows.Management = append(b.rows.Management, r)
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
		c[i] = code(errs[i].Code)
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

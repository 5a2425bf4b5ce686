package processor

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// This file turns the messages field's statuses, inbound messages and
// value-level errors into rows.

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
			Extra:              b.private(extra(s.Unknown)),
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
	b.addErrorsFrom(0, owner, origin, at, waba, number, msgID, recipient, campaign, errs)
}

// addErrorsFrom is addErrors for an owner whose errors come from several
// lists: the first of errs gets index first.
func (b *run) addErrorsFrom(first int, owner, origin string, at time.Time, waba, number, msgID, recipient, campaign string, errs []meta.Error) {
	for i := range errs {
		if first+i > math.MaxUint16 {
			return
		}
		e := &errs[i]
		b.rows.Errors = append(b.rows.Errors, schema.ErrorRow{
			Source: b.src, EventID: owner, Index: uint16(first + i), Origin: origin, EventTime: at,
			WabaID: waba, PhoneNumberID: number, MessageID: msgID, RecipientHash: recipient,
			Code: errCode(e), Title: e.Title, Message: e.Message, Details: e.ErrorData.Details, Href: e.Href,
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
			Extra:              b.private(inboundExtra(m)),
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

// valueErrors adds the value-level errors of a change (docs/meta-webhooks.md 6.2).
// They belong to no message and carry no time of their own, so their owner
// id is what the change is (rule 6 for management events): field, WABA,
// number, entry.time and the value itself. A messages webhook has no
// entry.time, and the same error (a number's 130429, again and again)
// comes as the same value: there the minute the body was received stands
// in for the time. Each minute a number hits it counts, as its event_time
// says; a copy of the body received again within the minute (a retry that
// got past the endpoint's duplicate index) counts once.
func (b *run) valueErrors(env meta.Envelope, v *meta.MessagingValue) {
	if len(v.Errors) == 0 {
		return
	}
	t := env.EntryTime()
	when := strconv.FormatInt(t, 10)
	if t <= 0 {
		when = "received " + strconv.FormatInt(b.fallback.Unix()/60*60, 10)
	}
	owner := schema.EventID(schema.KindOther, "value_errors", env.Field(), env.WABAID(), env.PhoneNumberID(),
		when, rawSum(env.Change.Value))
	if !b.fresh(owner) {
		return
	}
	at := b.at(t)
	b.addErrors(owner, originValue, at, env.WABAID(), env.PhoneNumberID(), "", "", "", v.Errors)
}

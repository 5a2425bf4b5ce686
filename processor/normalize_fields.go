package processor

import (
	"strconv"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// This file turns the other fields of a messaging value into rows: calls,
// user preferences, and the coexistence fields (echoes, history, state
// sync, automatic events).

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
// 9.13, 11.2 rule 7). Only what it is, never its content or recipient. Its
// errors are error rows of origin echo (they were only codes in the row's
// reason, missing from the failure analytics).
func (b *run) echoes(env meta.Envelope, v *meta.MessagingValue) {
	for i := range v.MessageEchoes {
		m := &v.MessageEchoes[i]
		owner, ok := b.mgmt(env, schema.KindOther, int64(m.Timestamp), "echo", schema.ManagementRow{
			Event: m.Type, SubjectID: m.ID, Reason: schema.CodesPart(codes(m.Errors)),
		})
		if ok {
			b.addErrors(owner, originEcho, b.at(int64(m.Timestamp)), env.WABAID(), env.PhoneNumberID(), m.ID, "", "", m.Errors)
		}
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
		// The errors of the chunk's messages (a media download that
		// failed) are the chunk's too, after its own, each with its
		// message's id and time.
		next := len(h.Errors)
		for j := range h.Threads {
			for k := range h.Threads[j].Messages {
				m := &h.Threads[j].Messages[k]
				b.addErrorsFrom(next, owner, originHistory, b.at(int64(m.Timestamp)), env.WABAID(), env.PhoneNumberID(), m.ID, "", "", m.Errors)
				next += len(m.Errors)
			}
		}
	}
	for i := range v.Messages {
		m := &v.Messages[i]
		owner, ok := b.mgmt(env, schema.KindOther, int64(m.Timestamp), "history_message", schema.ManagementRow{
			Event: m.Type, SubjectID: m.ID, Reason: schema.CodesPart(codes(m.Errors)),
		})
		if ok {
			b.addErrors(owner, originHistory, b.at(int64(m.Timestamp)), env.WABAID(), env.PhoneNumberID(), m.ID, "", "", m.Errors)
		}
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

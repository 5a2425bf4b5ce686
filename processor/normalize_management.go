package processor

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// This file turns the management fields (quality, limits, account,
// templates, and fields not known yet) into management rows.

// mgmt completes a management row (envelope columns, time, phone number id
// resolved from the display number where the value has none and this body
// pairs that display number with an id, id) and adds
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
	if r.PhoneNumberID == "" && r.DisplayPhoneNumber != "" {
		r.PhoneNumberID = b.ownNumber(r.DisplayPhoneNumber)
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

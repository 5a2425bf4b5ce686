package processor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

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
	// The id is what the value is, as sent; the copy stored (and
	// published) has end users' numbers as keyed hashes: a known field's
	// value can carry keys not known yet.
	raw := r.Raw
	r.Raw = b.private(raw)
	if k == schema.KindAccount && strings.HasPrefix(r.Raw, `{"`+withheldKey+`":`) {
		// Stage 2 reads the ban and the restrictions from the value: a
		// value withheld whole lost them.
		var w map[string]string
		_ = json.Unmarshal([]byte(r.Raw), &w)
		if e := accountEssentials(raw, w[withheldKey]); e != "" {
			r.Raw = e // else the note alone: stage 2 could not read the value either
		}
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

// numberKeys are the keys under which Meta's values name end users by
// phone number or BSUID: a group's participants (wa_id, input), who acted
// (initiated_by), a message's ends (from, to, recipient_id,
// recipient_participant_id), a contact (phone, phone_number), a number
// change (new_wa_id). Keys ending in userIDSuffix, or in it and an s
// (user_id, parent_user_id, from_user_id, previous_user_id, user_ids,
// ...), name users by BSUID.
var numberKeys = map[string]struct{}{
	"wa_id": {}, "wa_ids": {}, "new_wa_id": {}, "input": {}, "initiated_by": {}, "from": {}, "to": {},
	"recipient_id": {}, "recipient_participant_id": {}, "participants": {}, "phone": {}, "phone_number": {},
}

// userIDSuffix ends the keys of Meta's BSUIDs (business-scoped user ids).
const userIDSuffix = "user_id"

// numberKey reports whether k names an end user: one of numberKeys, a key
// ending in userIDSuffix, or a path (an unknown key's,
// "forwarded_to.wa_id", "participants[2]") whose last key is.
func numberKey(k string) bool {
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		k = k[i+1:]
	}
	if i := strings.IndexByte(k, '['); i >= 0 {
		k = k[:i]
	}
	_, ok := numberKeys[k]
	return ok || strings.HasSuffix(strings.TrimSuffix(k, "s"), userIDSuffix)
}

// userKeys are the keys, besides contentKeys, under which Meta's values
// carry what end users wrote or who they are other than by number: a
// contact's profile (name, username), a body, a caption. Keys ending in
// usernameSuffix (username, from_username, ...) too.
var userKeys = map[string]struct{}{"profile": {}, "body": {}, "caption": {}}

// scrubbedKeys are the key sets whose values scrub withholds.
var scrubbedKeys = [...]map[string]struct{}{contentKeys, userKeys}

// usernameSuffix ends the keys of WhatsApp usernames.
const usernameSuffix = "username"

// userContentKey reports whether k carries an end user's content: one of
// contentKeys (an inbound message's text, media, location, shared
// contacts, ...) or userKeys, or a key ending in usernameSuffix.
func userContentKey(k string) bool {
	if _, ok := contentKeys[k]; ok {
		return true
	}
	_, ok := userKeys[k]
	return ok || strings.HasSuffix(k, usernameSuffix)
}

// userContentPath reports whether k, a key or a path of keys
// ("contacts[0].profile.name", an unknown key's), is or lies under a key
// userContentKey takes.
func userContentPath(k string) bool {
	for seg := range strings.SplitSeq(k, ".") {
		if i := strings.IndexByte(seg, '['); i >= 0 {
			seg = seg[:i]
		}
		if userContentKey(seg) {
			return true
		}
	}
	return false
}

// private returns s, JSON kept as received (a management event's raw
// value, unknown keys, a status's or a message's extra), with the end
// users' numbers in it as keyed hashes and their content left out.
func (b *run) private(s string) string {
	if s == "" {
		return s
	}
	if h, changed := b.scrub(s); changed {
		return h
	}
	return s
}

// withheldKey is the key of the one value a kept value withheld for its
// size has (scrub); an account event's keeps its essentials beside it.
const withheldKey = "wahook_withheld"

// withheldNote says why a value of size bytes and about values values was
// withheld.
func withheldNote(size, values int) string {
	return fmt.Sprintf("a value of %d bytes and about %d values, too many to look for end users' numbers in", size, values)
}

// maxScrubValues is the most values (objects, lists and their elements,
// counted by their brackets and commas) of a value scrub reads.
const maxScrubValues = 100_000

// scrub returns raw (a value kept raw: group_* fields, fields not known
// yet, unknown keys) with the end users' phone numbers and BSUIDs under a
// key numberKey takes, or in a list under one, replaced by their keyed
// hashes, and the values under a key userContentKey takes (or a path
// through one) replaced by null, and whether it changed anything.
//
// Only a string that reads as a phone number (phoneDigits) is replaced, by
// the hash of its digits, or one that reads as a BSUID (bsuid), by the
// hash of the BSUID: the same number or BSUID hashes the same wherever it
// is stored, in these values as in the events' hashed fields. Names,
// usernames and text are withheld, not hashed (the key says what was
// there), so that scrubbing a scrubbed value changes nothing; RAW keeps
// the body, for a replay. Content storage does not bring them back: it
// stores the text of the messages the decoder reads. A value that is not
// valid JSON is returned as it is (the decoder stores none such).
func (b *run) scrub(raw string) (string, bool) {
	// A key spelled with escapes ("w\u0061_id") is found by the decode.
	found := strings.Contains(raw, `\u`) || strings.Contains(raw, userIDSuffix) || strings.Contains(raw, usernameSuffix)
	for k := range numberKeys {
		if found {
			break
		}
		found = strings.Contains(raw, k)
	}
	for _, keys := range scrubbedKeys {
		for k := range keys {
			if found {
				break
			}
			found = strings.Contains(raw, k)
		}
	}
	if !found {
		return "", false
	}
	if n := strings.Count(raw, "{") + strings.Count(raw, "[") + strings.Count(raw, ","); n > maxScrubValues {
		// Decoded into a tree, each value takes tens of bytes, a {} a
		// map's hundreds: a 4 MB value of a million empty objects took
		// 200 MB at every delivery, enough to kill a small container
		// again and again. Withheld whole, as it cannot be read for
		// numbers cheaply; RAW keeps the body.
		return `{"` + withheldKey + `":"` + withheldNote(len(raw), n) + `"}`, true
	}
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return "", false
	}
	changed := false
	// hashAll replaces the numbers in e, a value under a number key: a
	// string or a JSON number that reads as one, or those in a list (of
	// lists) of them.
	var hashAll func(e any) any
	hashAll = func(e any) any {
		switch x := e.(type) {
		case string:
			if digits, ok := phoneDigits(x); ok {
				changed = true
				return b.hash(digits)
			}
			if bsuid(x) {
				changed = true
				return b.hash(x)
			}
		case json.Number:
			// Only a whole number: a decimal or an exponent is a quantity.
			if digits, ok := phoneDigits(string(x)); ok && allDigits(string(x)) {
				changed = true
				return b.hash(digits)
			}
		case []any:
			for i := range x {
				x[i] = hashAll(x[i])
			}
		}
		return e
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if userContentPath(k) {
					if e != nil {
						x[k] = nil
						changed = true
					}
					continue
				}
				if numberKey(k) {
					x[k] = hashAll(e)
				}
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	if !changed {
		return "", false
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	if e.Encode(v) != nil {
		return "", false
	}
	return string(bytes.TrimSuffix(out.Bytes(), []byte("\n"))), true
}

// phoneDigits returns the digits of s when s reads as a phone number in
// international form: 7 to 15 digits (E.164) after a dialling prefix (00,
// 011, 0011) if any, with an optional leading "+" and spaces, dashes,
// brackets or dots (two or more) between them. Not taken for one: a date (2026-01-31, 20260131, 31.01.2026,
// 2026.01.31, 31-01-2026) or a Unix time in seconds or milliseconds, which
// Meta's values carry under "from" and "to" too.
func phoneDigits(s string) (string, bool) {
	if isoDate(s) || dottedDate(s) || dashedDate(s) {
		return "", false
	}
	// Dots: a number written so has two or more (+44.7700.900453); one is a
	// decimal, and four groups of up to three digits an IPv4 address.
	if dots := strings.Count(s, "."); dots == 1 || dots == 3 && ipv4(s) {
		return "", false
	}
	var d []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			d = append(d, c)
		case c == '+' && i == 0, c == ' ', c == '-', c == '(', c == ')', c == '.':
		default:
			return "", false
		}
	}
	if len(d) == len(s) && (unixTime(s) || compactDate(s)) {
		return "", false
	}
	n := string(d)
	for _, prefix := range []string{"0011", "011", "00"} {
		if strings.HasPrefix(n, prefix) {
			n = n[len(prefix):]
			break
		}
	}
	if len(n) < 7 || len(n) > 15 {
		return "", false
	}
	return n, true
}

// bsuid reports whether s reads as a business-scoped user id: a country
// code of two capital letters, a dot, then 1 to 128 letters and digits
// (US.20571938846102937745), or a parent BSUID, ENT. and digits after the
// country code (US.ENT.58810293746651029384).
func bsuid(s string) bool {
	if len(s) < 4 || s[2] != '.' || !upper(s[0]) || !upper(s[1]) {
		return false
	}
	rest := s[3:]
	if p, ok := strings.CutPrefix(rest, "ENT."); ok {
		return allDigits(p) && len(p) <= 128
	}
	if len(rest) > 128 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= '0' && c <= '9' || upper(c) || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

func upper(c byte) bool { return c >= 'A' && c <= 'Z' }

// dashedDate reports whether s is a date DD-MM-YYYY or MM-DD-YYYY.
func dashedDate(s string) bool {
	return len(s) == 10 && s[2] == '-' && s[5] == '-' && allDigits(s[:2]) && allDigits(s[3:5]) && allDigits(s[6:])
}

// dottedDate reports whether s is a date written with dots: D.M.YYYY or
// YYYY.M.D, with one or two digits of day and month.
func dottedDate(s string) bool {
	p := strings.Split(s, ".")
	if len(p) != 3 || !allDigits(p[0]) || !allDigits(p[1]) || !allDigits(p[2]) {
		return false
	}
	short := func(x string) bool { return len(x) == 1 || len(x) == 2 }
	return short(p[0]) && short(p[1]) && len(p[2]) == 4 || len(p[0]) == 4 && short(p[1]) && short(p[2])
}

// ipv4 reports whether s is four dot-separated groups of one to three
// digits.
func ipv4(s string) bool {
	p := strings.Split(s, ".")
	if len(p) != 4 {
		return false
	}
	for _, x := range p {
		if len(x) == 0 || len(x) > 3 || !allDigits(x) {
			return false
		}
	}
	return true
}

func allDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// unixTime reports whether s, all digits, reads as a Unix time in seconds
// or milliseconds (2001 to 2033): ten or thirteen digits from 1. No
// international number has that form (a country code 1 takes ten digits
// more).
func unixTime(s string) bool { return (len(s) == 10 || len(s) == 13) && s[0] == '1' }

// compactDate reports whether s, all digits, reads as a date YYYYMMDD of
// 1900 to 2099.
func compactDate(s string) bool {
	if len(s) != 8 || !(s[:2] == "19" || s[:2] == "20") {
		return false
	}
	m, d := (s[4]-'0')*10+s[5]-'0', (s[6]-'0')*10+s[7]-'0'
	return m >= 1 && m <= 12 && d >= 1 && d <= 31
}

// isoDate reports whether s starts as a date, YYYY-MM-DD.
func isoDate(s string) bool {
	return len(s) >= 10 && s[4] == '-' && s[7] == '-' && allDigits(s[:4]) && allDigits(s[5:7]) && allDigits(s[8:10])
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

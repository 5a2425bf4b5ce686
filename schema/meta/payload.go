package meta

import "encoding/json"

// Payload is one decoded webhook body (docs/meta-webhooks.md 2).
type Payload struct {
	// Object is "whatsapp_business_account" for WhatsApp; other values are
	// kept, not rejected.
	Object string `json:"object"`
	// Entries are the entry[] items, one per WABA (or business portfolio for
	// partner_solutions), minus any reported in Problems.
	Entries []Entry `json:"entry"`
	// Extra holds unknown top-level keys.
	Extra Extras `json:"-"`
	// Problems lists the items that were left out of the typed view because
	// a key had the wrong type, each with its path, bytes and reason.
	Problems []ItemError `json:"-"`
	// ProblemsDropped counts the bad items past the first MaxProblems,
	// which Problems does not list.
	ProblemsDropped int `json:"-"`
	// Unknown lists every unknown key of the body with its path, in order,
	// up to MaxUnknown. The same values are on the Extra of the struct they
	// belong to. Keys inside a value that is kept raw as a whole (an unknown
	// field, an Extra value) are not listed separately.
	Unknown []UnknownKey `json:"-"`
	// UnknownDropped counts the unknown keys past the first MaxUnknown,
	// which are kept nowhere but in the bytes of the body (and of their
	// item's Raw): not in Unknown, nor on any Extra or item Unknown.
	UnknownDropped int `json:"-"`
}

// Entry is one entry[] item.
type Entry struct {
	// ID is the WABA id; for partner_solutions the business portfolio id.
	ID string `json:"id"`
	// Time is the unix time at which the webhook was triggered. Meta sends
	// it on management fields only; 0 when absent (docs/meta-webhooks.md 2).
	Time FlexInt64 `json:"time,omitempty"`
	// Changes are the changes[] items, minus any reported in Problems.
	Changes []Change `json:"changes"`
	// Raw is the entry's bytes, verbatim.
	Raw json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
	// pos is the entry's index in the body's entry array, which differs from
	// its index in Payload.Entries after a bad entry.
	pos int
}

// Change is one changes[] item: a field and its value. Value always holds the
// value's bytes verbatim; the typed view that matches Field is set beside it
// (docs/meta-webhooks.md 11.2 rules 1 and 3). For an unknown field only Value (and
// Metadata, if the value carries one) is set.
type Change struct {
	Field string          `json:"field"`
	Value json.RawMessage `json:"value"`
	// Raw is the change's bytes, verbatim.
	Raw json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
	// pos is the change's index in the body's changes array.
	pos int

	// Metadata is the value's metadata (business phone number) for any field
	// whose value has one, including unknown fields; nil otherwise.
	Metadata *Metadata `json:"-"`

	// Messaging is set for the fields whose value is shaped like the
	// messages value: messages, calls, user_preferences, smb_message_echoes,
	// history, smb_app_state_sync, automatic_events, account_settings_update.
	Messaging *MessagingValue `json:"-"`

	QualityUpdate        *PhoneNumberQualityUpdate   `json:"-"`
	CapabilityUpdate     *BusinessCapabilityUpdate   `json:"-"`
	AccountUpdate        *AccountUpdate              `json:"-"`
	AccountAlert         *AccountAlert               `json:"-"`
	AccountReview        *AccountReviewUpdate        `json:"-"`
	TemplateStatus       *TemplateStatusUpdate       `json:"-"`
	TemplateQuality      *TemplateQualityUpdate      `json:"-"`
	TemplateCategory     *TemplateCategoryUpdate     `json:"-"`
	TemplateComponents   *TemplateComponentsUpdate   `json:"-"`
	NameUpdate           *PhoneNumberNameUpdate      `json:"-"`
	Security             *SecurityUpdate             `json:"-"`
	PartnerSolution      *PartnerSolutionsUpdate     `json:"-"`
	PaymentConfiguration *PaymentConfigurationUpdate `json:"-"`
}

// Known reports whether the change's field has a typed view. Unknown fields
// and the fields kept raw by design (group_*, flows) report false.
func (c *Change) Known() bool {
	_, ok := messagingFields[c.Field]
	_, ok2 := managementFields[c.Field]
	return ok || ok2
}

// messagingFields are the fields decoded into a MessagingValue.
var messagingFields = map[string]struct{}{
	FieldMessages: {}, FieldCalls: {}, FieldUserPreferences: {}, FieldSMBMessageEchoes: {},
	FieldHistory: {}, FieldSMBAppStateSync: {}, FieldAutomaticEvents: {}, FieldAccountSettingsUpdate: {},
}

// managementFields are the fields decoded into a struct of their own.
var managementFields = map[string]struct{}{
	FieldPhoneNumberQualityUpdate: {}, FieldBusinessCapabilityUpdate: {}, FieldAccountUpdate: {},
	FieldAccountAlerts: {}, FieldAccountReviewUpdate: {}, FieldMessageTemplateStatusUpdate: {},
	FieldMessageTemplateQualityUpdate: {}, FieldTemplateCategoryUpdate: {},
	FieldMessageTemplateComponentsUpdate: {}, FieldPhoneNumberNameUpdate: {}, FieldSecurity: {},
	FieldPartnerSolutions: {}, FieldPaymentConfigurationUpdate: {},
}

// Decode decodes one webhook body. It returns an error wrapping ErrMalformed
// only when the body is not JSON, its top level is not an object, or its
// "entry" is missing or not an array. Otherwise it returns the payload, with
// any bad items listed in Payload.Problems rather than failing the body.
//
// The payload's json.RawMessage values alias body (see the package doc).
func Decode(body []byte) (*Payload, error) {
	d := decoder{data: body, path: make([]seg, 0, 16)}
	p := new(Payload)
	if err := p.decode(&d); err != nil {
		if _, ok := err.(*SyntaxError); !ok {
			// Every failure of the whole body is ErrMalformed; a TypeError
			// cannot escape the item boundaries, but keep the promise anyway.
			err = &SyntaxError{Reason: ReasonNotJSON, Offset: d.pos, Msg: err.Error()}
		}
		return nil, err
	}
	p.Problems, p.ProblemsDropped, p.Unknown, p.UnknownDropped = d.problems, d.dropped, d.unknown, d.unknownDropped
	return p, nil
}

func (p *Payload) decode(d *decoder) error {
	if c := d.peek(); c != '{' {
		if d.pos >= len(d.data) {
			return d.fail(ReasonEmptyBody, "empty body")
		}
		err := d.wrongType("object")
		if te, ok := err.(*TypeError); ok {
			// Text that starts like a JSON literal ("this is not json" starts
			// like true) is no JSON at all, not JSON of the wrong shape; the
			// check runs only on this error path.
			if !json.Valid(d.data) {
				return d.fail(ReasonNotJSON, "body is not valid JSON (it starts like a "+te.Got+")")
			}
			return d.fail(ReasonNotObject, "top level is "+te.Got+", want object")
		}
		return err
	}
	sawEntry := false
	err := d.object(func(k []byte) error {
		switch string(k) {
		case "object":
			return d.soft(func() error { return d.enum(&p.Object) })
		case "entry":
			sawEntry = true
			if d.peek() != '[' {
				err := d.wrongType("array")
				if te, ok := err.(*TypeError); ok {
					return d.fail(ReasonNoEntry, "entry is "+te.Got+", want array")
				}
				return err
			}
			return decodeItems(d, &p.Entries)
		default:
			return d.extra(&p.Extra, k)
		}
	})
	if err != nil {
		return err
	}
	if d.peek() != 0 || d.pos < len(d.data) {
		return d.unexpected("end of input after top-level object")
	}
	if !sawEntry {
		return d.fail(ReasonNoEntry, "no entry array")
	}
	return nil
}

// soft decodes a top-level value that belongs to no item: a wrong type is
// reported as a problem at the key's path and the value is skipped.
func (d *decoder) soft(read func() error) error {
	start, pathLen := d.wsPos(), len(d.path)
	err := read()
	te, ok := err.(*TypeError)
	if !ok {
		return err
	}
	d.path, d.pos = d.path[:pathLen], start
	if err := d.skipValue(); err != nil {
		return err
	}
	d.problem(ItemError{
		Path: d.pathString(pathLen),
		Raw:  d.data[start:d.pos],
		Err:  &TypeError{Got: te.Got, Want: te.Want},
	})
	return nil
}

func (e *Entry) decode(d *decoder) error {
	probStart := len(d.problems)
	err := d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.wabaID(&e.ID)
		case "time":
			return d.int(&e.Time)
		case "changes":
			return decodeItems(d, &e.Changes)
		default:
			return d.extra(&e.Extra, k)
		}
	})
	if err != nil {
		return err
	}
	for i := probStart; i < len(d.problems); i++ {
		d.problems[i].EntryID = e.ID
	}
	return nil
}

func (e *Entry) setItem(raw json.RawMessage, unknown Extras)  { e.Raw, e.Unknown = raw, unknown }
func (e *Entry) setPos(i int)                                 { e.pos = i }
func (e *Entry) fillProblem(p *ItemError)                     { p.EntryID = e.ID }
func (c *Change) setItem(raw json.RawMessage, unknown Extras) { c.Raw, c.Unknown = raw, unknown }
func (c *Change) setPos(i int)                                { c.pos = i }
func (c *Change) fillProblem(p *ItemError)                    { p.Field = c.Field }

// valueKey is the path segment of a change's value.
var valueKey = []byte("value")

func (c *Change) decode(d *decoder) error {
	probStart := len(d.problems)
	haveField, decoded := false, false
	decodedAs := ""
	valStart, valEnd := -1, -1
	// inPass is what the value decoded in one pass added to the records.
	var inPass span
	err := d.object(func(k []byte) error {
		switch string(k) {
		case "field":
			haveField = true
			return d.enum(&c.Field)
		case "value":
			if valStart >= 0 && !decoded {
				// A repeated value replaces one that was only
				// bracket-matched; validate that one now, or a body
				// that is not JSON would pass.
				if err := d.validateAt(valStart, valEnd); err != nil {
					return err
				}
			}
			valStart = d.wsPos()
			if haveField {
				// The field is known already: decode in one pass.
				decoded, decodedAs = true, c.Field
				inPass = d.mark(k)
				if err := c.decodeValue(d); err != nil {
					return err
				}
				d.since(&inPass)
			} else {
				// Meta sends "value" before "field" (every captured body
				// does), so the value can only be routed once the change is
				// read: find its end now and decode it below.
				decoded = false
				if c := d.peek(); c == '{' || c == '[' {
					d.skipFast()
				} else if err := d.skipValue(); err != nil {
					return err
				}
			}
			valEnd = d.pos
			return nil
		default:
			return d.extra(&c.Extra, k)
		}
	})
	if err != nil {
		return err
	}
	if !haveField {
		return d.missing("field", "string")
	}
	if valStart < 0 {
		return d.missing("value", "object")
	}
	if !decoded || decodedAs != c.Field {
		if decoded {
			// "field" was given again after the value was decoded as the
			// earlier one: the problems and unknown keys of that decode
			// go with it.
			d.cut(inPass)
		}
		if err := c.decodeValueAt(d, valStart, valEnd); err != nil {
			return err
		}
	}
	pnid := ""
	if c.Metadata != nil {
		pnid = c.Metadata.PhoneNumberID
	}
	for i := probStart; i < len(d.problems); i++ {
		d.problems[i].Field, d.problems[i].PhoneNumberID = c.Field, pnid
	}
	return nil
}

// missing returns a TypeError for a key that an item needs but lacks.
func (d *decoder) missing(key, want string) error {
	d.push([]byte(key))
	err := d.typeError("missing", want)
	d.pop()
	return err
}

// validateAt validates the value that spans [start, end) of the body, which
// skipFast passed over, and returns d.pos to where it was.
func (d *decoder) validateAt(start, end int) error {
	resume := d.pos
	d.pos = start
	if err := d.skipValue(); err != nil {
		return err
	}
	if d.pos != end {
		return d.syntax("malformed value")
	}
	d.pos = resume
	return nil
}

// decodeValueAt decodes the value that spans [start, end) of the body after
// the change was read, and returns d.pos to where it was. The typed decode
// validates the bytes that skipFast only matched; if it ends anywhere but
// end, the value was not valid JSON. The change's object has closed by now,
// so its level is counted again here: the nesting limit then falls at the
// same place whether "field" comes before "value" or after it.
func (c *Change) decodeValueAt(d *decoder, start, end int) error {
	resume := d.pos
	d.pos = start
	d.push(valueKey)
	d.depth++
	if err := c.decodeValue(d); err != nil {
		return err
	}
	d.depth--
	d.pop()
	if d.pos != end {
		return d.syntax("malformed value")
	}
	d.pos = resume
	return nil
}

// decodeValue decodes the value at d.pos according to c.Field (docs/meta-webhooks.md
// 11.2 rule 3: route on field first) and sets c.Value to its bytes.
func (c *Change) decodeValue(d *decoder) error {
	c.resetViews()
	start := d.wsPos()
	var err error
	if _, ok := messagingFields[c.Field]; ok {
		if d.peek() != '{' {
			return d.wrongType("object")
		}
		v := new(MessagingValue)
		// statuses[] under calls are call statuses, not message statuses
		// (docs/meta-webhooks.md 9.16).
		if err := v.decode(d, c.Field == FieldCalls); err != nil {
			return err
		}
		c.Messaging, c.Metadata = v, v.Metadata
		c.Value = d.data[start:d.pos]
		return nil
	}
	if _, ok := managementFields[c.Field]; ok && d.peek() != '{' {
		return d.wrongType("object")
	}
	switch c.Field {
	case FieldPhoneNumberQualityUpdate:
		err = decodePtr(d, &c.QualityUpdate)
	case FieldBusinessCapabilityUpdate:
		err = decodePtr(d, &c.CapabilityUpdate)
	case FieldAccountUpdate:
		err = decodePtr(d, &c.AccountUpdate)
	case FieldAccountAlerts:
		err = decodePtr(d, &c.AccountAlert)
	case FieldAccountReviewUpdate:
		err = decodePtr(d, &c.AccountReview)
	case FieldMessageTemplateStatusUpdate:
		err = decodePtr(d, &c.TemplateStatus)
	case FieldMessageTemplateQualityUpdate:
		err = decodePtr(d, &c.TemplateQuality)
	case FieldTemplateCategoryUpdate:
		err = decodePtr(d, &c.TemplateCategory)
	case FieldMessageTemplateComponentsUpdate:
		err = decodePtr(d, &c.TemplateComponents)
	case FieldPhoneNumberNameUpdate:
		err = decodePtr(d, &c.NameUpdate)
	case FieldSecurity:
		err = decodePtr(d, &c.Security)
	case FieldPartnerSolutions:
		err = decodePtr(d, &c.PartnerSolution)
	case FieldPaymentConfigurationUpdate:
		err = decodePtr(d, &c.PaymentConfiguration)
	default:
		// An unknown field (or one kept raw by design) is stored, not
		// dropped and not an error (docs/meta-webhooks.md 11.2 rule 1). Its metadata,
		// if it has one, still tells which number it is about.
		if err := d.skipValue(); err != nil {
			return err
		}
		c.Metadata = sniffMetadata(d.data[start:d.pos])
	}
	if err != nil {
		return err
	}
	c.Value = d.data[start:d.pos]
	return nil
}

// resetViews clears every typed view, for a value decoded twice.
func (c *Change) resetViews() {
	v, raw, extra, field, pos := c.Value, c.Raw, c.Extra, c.Field, c.pos
	*c = Change{Field: field, Value: v, Raw: raw, Extra: extra, pos: pos}
}

// sniffMetadata returns the metadata of a value kept raw, or nil if it has
// none or it is not well formed.
func sniffMetadata(raw []byte) *Metadata {
	d := &decoder{data: raw}
	var md *Metadata
	err := d.object(func(k []byte) error {
		if string(k) == "metadata" && d.peek() == '{' {
			return decodePtr(d, &md)
		}
		return d.skipValue()
	})
	if err != nil {
		return nil
	}
	return md
}

package meta

import "encoding/json"

// This file holds the list items of user_preferences and automatic_events,
// and the value of account_settings_update.

// UserPreference is one user_preferences[] item: a user stopped or resumed
// marketing messages (docs/meta-webhooks.md 9.12).
type UserPreference struct {
	WaID         string `json:"wa_id,omitempty"`
	UserID       string `json:"user_id,omitempty"`
	ParentUserID string `json:"parent_user_id,omitempty"`
	Detail       string `json:"detail,omitempty"`
	// Category is "marketing_messages".
	Category string `json:"category,omitempty"`
	// Value is "stop" or "resume" ("signup" with SignupID, unverified).
	Value    string `json:"value,omitempty"`
	SignupID string `json:"signup_id,omitempty"`
	// Timestamp is an int here, a string in statuses; both are accepted.
	Timestamp FlexInt64       `json:"timestamp"`
	Raw       json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (u *UserPreference) setItem(raw json.RawMessage, unknown Extras) {
	u.Raw, u.Unknown = raw, unknown
}

func (u *UserPreference) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "wa_id":
			return d.str(&u.WaID)
		case "user_id":
			return d.str(&u.UserID)
		case "parent_user_id":
			return d.str(&u.ParentUserID)
		case "detail":
			return d.str(&u.Detail)
		case "category":
			return d.str(&u.Category)
		case "value":
			return d.str(&u.Value)
		case "signup_id":
			return d.str(&u.SignupID)
		case "timestamp":
			return d.int(&u.Timestamp)
		default:
			return d.extra(&u.Extra, k)
		}
	})
}

// AutomaticEvent is one automatic_events[] item: a purchase or lead detected
// in a click-to-WhatsApp chat (docs/meta-webhooks.md 9.17).
type AutomaticEvent struct {
	// ID is the wamid of the message in which the event was detected.
	ID string `json:"id,omitempty"`
	// EventName is LeadSubmitted or Purchase.
	EventName  string          `json:"event_name,omitempty"`
	Timestamp  FlexInt64       `json:"timestamp"`
	CtwaClid   string          `json:"ctwa_clid,omitempty"`
	CustomData *CustomData     `json:"custom_data,omitempty"`
	Raw        json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (a *AutomaticEvent) setItem(raw json.RawMessage, unknown Extras) {
	a.Raw, a.Unknown = raw, unknown
}

func (a *AutomaticEvent) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&a.ID)
		case "event_name":
			return d.str(&a.EventName)
		case "timestamp":
			return d.int(&a.Timestamp)
		case "ctwa_clid":
			return d.str(&a.CtwaClid)
		case "custom_data":
			return decodePtr(d, &a.CustomData)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

// CustomData is the value of a purchase. Value is the amount times 1000; a
// string in Meta's table, a number in its example (docs/meta-webhooks.md 11.1).
type CustomData struct {
	Currency string     `json:"currency,omitempty"`
	Value    FlexString `json:"value,omitempty"`
	Extra    Extras     `json:"-"`
}

func (c *CustomData) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "currency":
			return d.str(&c.Currency)
		case "value":
			return d.flexString(&c.Value)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// PhoneNumberSettings is the value of account_settings_update (unverified,
// docs/meta-webhooks.md 9.16). Calling is kept raw: its shape is known from one source
// only.
type PhoneNumberSettings struct {
	PhoneNumberID string          `json:"phone_number_id,omitempty"`
	Calling       json.RawMessage `json:"calling,omitempty"`
	Extra         Extras          `json:"-"`
}

func (s *PhoneNumberSettings) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "phone_number_id":
			return d.numberID(&s.PhoneNumberID)
		case "calling":
			return d.raw(&s.Calling)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

package meta

import "encoding/json"

// MessagingValue is the value of the messages field (docs/meta-webhooks.md 4) and of
// the other fields shaped like it (calls, user_preferences,
// smb_message_echoes, history, smb_app_state_sync, automatic_events,
// account_settings_update). Every list that is present is decoded, whatever
// the field: a value normally carries messages or statuses, not both, but
// nothing relies on it (docs/meta-webhooks.md 4).
type MessagingValue struct {
	MessagingProduct string    `json:"messaging_product,omitempty"`
	Metadata         *Metadata `json:"metadata,omitempty"`
	// Contacts describe the users of the messages or statuses; absent on
	// system messages and failed statuses (docs/meta-webhooks.md 4.1).
	Contacts []Contact `json:"contacts,omitempty"`
	// Messages are inbound messages under field messages, and media
	// follow-ups of a history sync under field history (docs/meta-webhooks.md 9.14).
	Messages []Message `json:"messages,omitempty"`
	// Statuses are message statuses (docs/meta-webhooks.md 5). Under field calls,
	// statuses[] go to CallStatuses instead.
	Statuses []Status `json:"statuses,omitempty"`
	// CallStatuses are the statuses[] of field calls (docs/meta-webhooks.md 9.16).
	CallStatuses []CallStatus `json:"-"`
	// Errors are value-level errors: system, app or account problems not
	// tied to one message (docs/meta-webhooks.md 6.2).
	Errors          []Error          `json:"errors,omitempty"`
	Calls           []Call           `json:"calls,omitempty"`
	UserPreferences []UserPreference `json:"user_preferences,omitempty"`
	// MessageEchoes are messages the business sent from the WhatsApp
	// Business app (coexistence): outbound, not inbound (docs/meta-webhooks.md 9.13).
	MessageEchoes       []Message            `json:"message_echoes,omitempty"`
	History             []HistoryChunk       `json:"history,omitempty"`
	StateSync           []StateSync          `json:"state_sync,omitempty"`
	AutomaticEvents     []AutomaticEvent     `json:"automatic_events,omitempty"`
	PhoneNumberSettings *PhoneNumberSettings `json:"phone_number_settings,omitempty"`
	Extra               Extras               `json:"-"`
}

func (v *MessagingValue) decode(d *decoder, calls bool) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "messaging_product":
			return d.enum(&v.MessagingProduct)
		case "metadata":
			return decodePtr(d, &v.Metadata)
		case "contacts":
			return decodeItems(d, &v.Contacts)
		case "messages":
			return decodeItems(d, &v.Messages)
		case "statuses":
			if calls {
				return decodeItems(d, &v.CallStatuses)
			}
			return decodeItems(d, &v.Statuses)
		case "errors":
			return decodeItems(d, &v.Errors)
		case "calls":
			return decodeItems(d, &v.Calls)
		case "user_preferences":
			return decodeItems(d, &v.UserPreferences)
		case "message_echoes":
			return decodeItems(d, &v.MessageEchoes)
		case "history":
			return decodeItems(d, &v.History)
		case "state_sync":
			return decodeItems(d, &v.StateSync)
		case "automatic_events":
			return decodeItems(d, &v.AutomaticEvents)
		case "phone_number_settings":
			return decodePtr(d, &v.PhoneNumberSettings)
		default:
			return d.extra(&v.Extra, k)
		}
	})
}

// Metadata identifies the business phone number of a value (docs/meta-webhooks.md 4).
type Metadata struct {
	// DisplayPhoneNumber is the number as displayed, digits without "+".
	DisplayPhoneNumber string `json:"display_phone_number"`
	// PhoneNumberID is the key for per-number analytics.
	PhoneNumberID string `json:"phone_number_id"`
	Extra         Extras `json:"-"`
}

func (m *Metadata) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "display_phone_number":
			return d.displayNumber(&m.DisplayPhoneNumber)
		case "phone_number_id":
			return d.numberID(&m.PhoneNumberID)
		default:
			return d.extra(&m.Extra, k)
		}
	})
}

// Contact is one value.contacts[] item: the user a message came from or a
// status is about (docs/meta-webhooks.md 4.1).
type Contact struct {
	Profile *Profile `json:"profile,omitempty"`
	// WaID is the user's WhatsApp id, usually the phone number; may be
	// missing for username users (BSUID era).
	WaID string `json:"wa_id,omitempty"`
	// UserID is the business-scoped user id (BSUID), e.g.
	// "US.20571938846102937745"; ParentUserID the parent BSUID.
	UserID          string          `json:"user_id,omitempty"`
	ParentUserID    string          `json:"parent_user_id,omitempty"`
	IdentityKeyHash string          `json:"identity_key_hash,omitempty"`
	Raw             json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (c *Contact) setItem(raw json.RawMessage, unknown Extras) { c.Raw, c.Unknown = raw, unknown }

func (c *Contact) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "profile":
			return decodePtr(d, &c.Profile)
		case "wa_id":
			return d.str(&c.WaID)
		case "user_id":
			return d.str(&c.UserID)
		case "parent_user_id":
			return d.str(&c.ParentUserID)
		case "identity_key_hash":
			return d.str(&c.IdentityKeyHash)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// Profile is a contact's WhatsApp profile.
type Profile struct {
	Name     string `json:"name,omitempty"`
	Username string `json:"username,omitempty"`
	Extra    Extras `json:"-"`
}

func (p *Profile) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "name":
			return d.str(&p.Name)
		case "username":
			return d.str(&p.Username)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

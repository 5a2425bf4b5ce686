package meta

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Status is one message status event: a statuses[] item under field
// messages (docs/meta-webhooks.md 5.1).
type Status struct {
	// ID is the wamid of our outbound message.
	ID string `json:"id"`
	// Status is the value as sent ("sent", "delivered", "read", "played",
	// "failed", or anything else, kept verbatim; docs/meta-webhooks.md 5.2).
	Status string `json:"status"`
	// Timestamp is the unix time of the status itself.
	Timestamp FlexInt64 `json:"timestamp"`
	// RecipientID is the user's phone number, or the group id for a group
	// send; omitted when the message was sent to a BSUID.
	RecipientID string `json:"recipient_id,omitempty"`
	// RecipientType is "group" for group sends (docs/meta-webhooks.md 8.1).
	RecipientType string `json:"recipient_type,omitempty"`
	// RecipientParticipantID is the group member's phone number; group
	// statuses arrive per participant.
	RecipientParticipantID           string `json:"recipient_participant_id,omitempty"`
	RecipientParticipantUserID       string `json:"recipient_participant_user_id,omitempty"`
	RecipientParticipantParentUserID string `json:"recipient_participant_parent_user_id,omitempty"`
	RecipientIdentityKeyHash         string `json:"recipient_identity_key_hash,omitempty"`
	BizOpaqueCallbackData            string `json:"biz_opaque_callback_data,omitempty"`
	RecipientUserID                  string `json:"recipient_user_id,omitempty"`
	// RecipientParentUserID is read from recipient_parent_user_id or from
	// its older spelling parent_recipient_user_id (docs/meta-webhooks.md 5.1, disputed).
	RecipientParentUserID string `json:"recipient_parent_user_id,omitempty"`
	// Type is "call" on call statuses and "message" on On-Premises statuses;
	// not documented for Cloud API message statuses.
	Type         string        `json:"type,omitempty"`
	Conversation *Conversation `json:"conversation,omitempty"`
	Pricing      *Pricing      `json:"pricing,omitempty"`
	// Errors are set on failed statuses; usually one, but count every one.
	Errors []Error         `json:"errors,omitempty"`
	Raw    json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (s *Status) setItem(raw json.RawMessage, unknown Extras) { s.Raw, s.Unknown = raw, unknown }

func (s *Status) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&s.ID)
		case "status":
			return d.enum(&s.Status)
		case "timestamp":
			return d.int(&s.Timestamp)
		case "recipient_id":
			return d.str(&s.RecipientID)
		case "recipient_type":
			return d.enum(&s.RecipientType)
		case "recipient_participant_id":
			return d.str(&s.RecipientParticipantID)
		case "recipient_participant_user_id":
			return d.str(&s.RecipientParticipantUserID)
		case "recipient_participant_parent_user_id":
			return d.str(&s.RecipientParticipantParentUserID)
		case "recipient_identity_key_hash":
			return d.str(&s.RecipientIdentityKeyHash)
		case "biz_opaque_callback_data":
			return d.str(&s.BizOpaqueCallbackData)
		case "recipient_user_id":
			return d.str(&s.RecipientUserID)
		case "recipient_parent_user_id", "parent_recipient_user_id":
			return d.str(&s.RecipientParentUserID)
		case "type":
			return d.enum(&s.Type)
		case "conversation":
			return decodePtr(d, &s.Conversation)
		case "pricing":
			return decodePtr(d, &s.Pricing)
		case "errors":
			return decodeArray(d, &s.Errors)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

// Is reports whether the status is value, ignoring case (docs/meta-webhooks.md 5.2:
// compare case-insensitively).
func (s *Status) Is(value string) bool { return strings.EqualFold(s.Status, value) }

// IsGroup reports whether the status is about a message sent to a group.
func (s *Status) IsGroup() bool { return s.RecipientType == RecipientTypeGroup }

// Recipient returns the best key for the user the status is about: the
// phone number, else the BSUID, else the parent BSUID (docs/meta-webhooks.md 8.3). For a
// group status it is the participant; GroupID returns the group.
func (s *Status) Recipient() string {
	if s.IsGroup() {
		return firstNonEmpty(s.RecipientParticipantID, s.RecipientParticipantUserID, s.RecipientParticipantParentUserID)
	}
	return firstNonEmpty(s.RecipientID, s.RecipientUserID, s.RecipientParentUserID)
}

// GroupID returns the group id of a group status, or "".
func (s *Status) GroupID() string {
	if s.IsGroup() {
		return s.RecipientID
	}
	return ""
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// Conversation is the conversation object of conversation-based pricing,
// omitted from v24.0 on except in free-entry-point windows (docs/meta-webhooks.md 5.3).
type Conversation struct {
	ID string `json:"id,omitempty"`
	// ExpirationTimestamp is set on sent statuses only; a string in Meta's
	// examples, a number in one library (accepted both ways).
	ExpirationTimestamp FlexInt64          `json:"expiration_timestamp,omitempty"`
	Origin              ConversationOrigin `json:"origin"`
	Extra               Extras             `json:"-"`
}

// ConversationOrigin says what kind of conversation a message opened.
type ConversationOrigin struct {
	Type  string `json:"type,omitempty"`
	Extra Extras `json:"-"`
}

func (c *Conversation) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&c.ID)
		case "expiration_timestamp":
			return d.int(&c.ExpirationTimestamp)
		case "origin":
			return decodeIn(d, &c.Origin)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

func (o *ConversationOrigin) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "type" {
			return d.enum(&o.Type)
		}
		return d.extra(&o.Extra, k)
	})
}

// Pricing is the pricing object of a status (docs/meta-webhooks.md 5.4). It is present
// on sent and on one of delivered/read, never on failed.
type Pricing struct {
	// Billable is deprecated and may be missing (nil).
	Billable *bool `json:"billable,omitempty"`
	// PricingModel is "PMP" (from 2025-07-01) or "CBP" (before).
	PricingModel string `json:"pricing_model,omitempty"`
	// Type is "regular", "free_customer_service", "free_entry_point", ...;
	// empty when absent (CBP payloads have none).
	Type string `json:"type,omitempty"`
	// Category is "marketing", "utility", "authentication", ... Meta spells
	// one value both authentication_international and
	// authentication-international; both are kept as sent.
	Category string `json:"category,omitempty"`
	Extra    Extras `json:"-"`
}

func (p *Pricing) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "billable":
			return d.optBool(&p.Billable)
		case "pricing_model":
			return d.enum(&p.PricingModel)
		case "type":
			return d.enum(&p.Type)
		case "category":
			return d.enum(&p.Category)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// Error is the error object used in webhooks (docs/meta-webhooks.md 6.1): in failed
// statuses, at value level, in inbound messages and in history chunks.
type Error struct {
	// Code is the error code; a numeric string is accepted too.
	Code FlexInt64 `json:"code"`
	// NoCode is set when the error carries no code (none, null or ""):
	// Code is then 0, which is also Meta's code for an auth error.
	NoCode    bool      `json:"-"`
	Title     string    `json:"title,omitempty"`
	Message   string    `json:"message,omitempty"`
	ErrorData ErrorData `json:"error_data"`
	Href      string    `json:"href,omitempty"`
	// Raw is the error's bytes, verbatim.
	Raw json.RawMessage `json:"-"`
	// Unknown is set for value-level errors, which are items of their own;
	// the unknown keys of an error inside a status or message are in that
	// item's Unknown.
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

// ErrorData holds an error's details, the most useful human text.
type ErrorData struct {
	Details          string `json:"details,omitempty"`
	MessagingProduct string `json:"messaging_product,omitempty"`
	Extra            Extras `json:"-"`
}

func (e *Error) setItem(raw json.RawMessage, unknown Extras) { e.Raw, e.Unknown = raw, unknown }

func (e *Error) decode(d *decoder) error {
	start := d.wsPos()
	e.NoCode = true
	err := d.object(func(k []byte) error {
		switch string(k) {
		case "code":
			at := d.wsPos()
			if err := d.int(&e.Code); err != nil {
				return err
			}
			v := bytes.TrimSpace(d.data[at:d.pos])
			e.NoCode = string(v) == "null" || string(v) == `""`
			return nil
		case "title":
			return d.str(&e.Title)
		case "message":
			return d.str(&e.Message)
		case "error_data":
			return decodeIn(d, &e.ErrorData)
		case "href":
			return d.str(&e.Href)
		default:
			return d.extra(&e.Extra, k)
		}
	})
	e.Raw = d.data[start:d.pos]
	return err
}

func (e *ErrorData) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "details":
			return d.str(&e.Details)
		case "messaging_product":
			return d.enum(&e.MessagingProduct)
		default:
			return d.extra(&e.Extra, k)
		}
	})
}

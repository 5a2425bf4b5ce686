package meta

// This file holds the payloads of inbound replies and of the other
// non-media message types (docs/meta-webhooks.md 7.2).

// Interactive is the payload of an interactive reply; Type says which of the
// replies is set. context.id of the message is the message that carried the
// buttons or list.
type Interactive struct {
	Type                string               `json:"type"`
	ButtonReply         *Reply               `json:"button_reply,omitempty"`
	ListReply           *Reply               `json:"list_reply,omitempty"`
	NFMReply            *NFMReply            `json:"nfm_reply,omitempty"`
	CallPermissionReply *CallPermissionReply `json:"call_permission_reply,omitempty"`
	Extra               Extras               `json:"-"`
}

func (i *Interactive) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "type":
			return d.enum(&i.Type)
		case "button_reply":
			return decodePtr(d, &i.ButtonReply)
		case "list_reply":
			return decodePtr(d, &i.ListReply)
		case "nfm_reply":
			return decodePtr(d, &i.NFMReply)
		case "call_permission_reply":
			return decodePtr(d, &i.CallPermissionReply)
		default:
			return d.extra(&i.Extra, k)
		}
	})
}

// Reply is a button or list reply. Description is set on list replies only.
type Reply struct {
	ID          string `json:"id,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Extra       Extras `json:"-"`
}

func (r *Reply) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&r.ID)
		case "title":
			return d.str(&r.Title)
		case "description":
			return d.str(&r.Description)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// NFMReply is a Flow or address-message response. ResponseJSON is a string
// that holds JSON; it is kept as the string it is.
type NFMReply struct {
	Name         string `json:"name,omitempty"`
	Body         string `json:"body,omitempty"`
	ResponseJSON string `json:"response_json,omitempty"`
	Extra        Extras `json:"-"`
}

func (r *NFMReply) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "name":
			return d.str(&r.Name)
		case "body":
			return d.str(&r.Body)
		case "response_json":
			return d.str(&r.ResponseJSON)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// CallPermissionReply is a user's answer to a call-permission request
// (unverified, docs/meta-webhooks.md 7.2).
type CallPermissionReply struct {
	Response            string    `json:"response,omitempty"`
	IsPermanent         bool      `json:"is_permanent,omitempty"`
	ExpirationTimestamp FlexInt64 `json:"expiration_timestamp,omitempty"`
	ResponseSource      string    `json:"response_source,omitempty"`
	Extra               Extras    `json:"-"`
}

func (r *CallPermissionReply) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "response":
			return d.str(&r.Response)
		case "is_permanent":
			return d.bool(&r.IsPermanent)
		case "expiration_timestamp":
			return d.int(&r.ExpirationTimestamp)
		case "response_source":
			return d.str(&r.ResponseSource)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// Button is the payload of a template quick-reply button press.
type Button struct {
	Payload string `json:"payload,omitempty"`
	Text    string `json:"text,omitempty"`
	Extra   Extras `json:"-"`
}

func (b *Button) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "payload":
			return d.str(&b.Payload)
		case "text":
			return d.str(&b.Text)
		default:
			return d.extra(&b.Extra, k)
		}
	})
}

// Reaction is the payload of a reaction; an empty or missing Emoji removes
// the reaction.
type Reaction struct {
	MessageID string `json:"message_id,omitempty"`
	Emoji     string `json:"emoji,omitempty"`
	Extra     Extras `json:"-"`
}

func (r *Reaction) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "message_id":
			return d.str(&r.MessageID)
		case "emoji":
			return d.str(&r.Emoji)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// Order is the payload of an order message.
type Order struct {
	CatalogID    string        `json:"catalog_id,omitempty"`
	Text         string        `json:"text,omitempty"`
	ProductItems []ProductItem `json:"product_items,omitempty"`
	Extra        Extras        `json:"-"`
}

func (o *Order) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "catalog_id":
			return d.str(&o.CatalogID)
		case "text":
			return d.str(&o.Text)
		case "product_items":
			return decodeArray(d, &o.ProductItems)
		default:
			return d.extra(&o.Extra, k)
		}
	})
}

// ProductItem is one line of an order.
type ProductItem struct {
	ProductRetailerID string      `json:"product_retailer_id,omitempty"`
	Quantity          FlexInt64   `json:"quantity"`
	ItemPrice         FlexFloat64 `json:"item_price"`
	Currency          string      `json:"currency,omitempty"`
	Extra             Extras      `json:"-"`
}

func (p *ProductItem) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "product_retailer_id":
			return d.str(&p.ProductRetailerID)
		case "quantity":
			return d.int(&p.Quantity)
		case "item_price":
			return d.float(&p.ItemPrice)
		case "currency":
			return d.str(&p.Currency)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// System is the payload of a system message, such as user_changed_number
// (docs/meta-webhooks.md 7.2). System messages carry no contacts array.
type System struct {
	Body                 string `json:"body,omitempty"`
	Type                 string `json:"type,omitempty"`
	WaID                 string `json:"wa_id,omitempty"`
	UserID               string `json:"user_id,omitempty"`
	ParentUserID         string `json:"parent_user_id,omitempty"`
	PreviousUserID       string `json:"previous_user_id,omitempty"`
	PreviousParentUserID string `json:"previous_parent_user_id,omitempty"`
	Identity             string `json:"identity,omitempty"`
	Customer             string `json:"customer,omitempty"`
	NewWaID              string `json:"new_wa_id,omitempty"`
	Extra                Extras `json:"-"`
}

func (s *System) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "body":
			return d.str(&s.Body)
		case "type":
			return d.str(&s.Type)
		case "wa_id":
			return d.str(&s.WaID)
		case "user_id":
			return d.str(&s.UserID)
		case "parent_user_id":
			return d.str(&s.ParentUserID)
		case "previous_user_id":
			return d.str(&s.PreviousUserID)
		case "previous_parent_user_id":
			return d.str(&s.PreviousParentUserID)
		case "identity":
			return d.str(&s.Identity)
		case "customer":
			return d.str(&s.Customer)
		case "new_wa_id":
			return d.str(&s.NewWaID)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

// Unsupported is the payload of an unsupported message: the type WhatsApp
// could not pass on (the message also carries error 131051).
type Unsupported struct {
	Type  string `json:"type,omitempty"`
	Extra Extras `json:"-"`
}

func (u *Unsupported) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "type" {
			return d.str(&u.Type)
		}
		return d.extra(&u.Extra, k)
	})
}

// Edit is the payload of an edited message: the original id and the new
// message (unverified, docs/meta-webhooks.md 7.2).
type Edit struct {
	OriginalMessageID string   `json:"original_message_id,omitempty"`
	Message           *Message `json:"message,omitempty"`
	Extra             Extras   `json:"-"`
}

func (e *Edit) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "original_message_id":
			return d.str(&e.OriginalMessageID)
		case "message":
			return decodePtr(d, &e.Message)
		default:
			return d.extra(&e.Extra, k)
		}
	})
}

// Revoke is the payload of a message the user deleted (unverified,
// docs/meta-webhooks.md 7.2).
type Revoke struct {
	OriginalMessageID string `json:"original_message_id,omitempty"`
	Extra             Extras `json:"-"`
}

func (r *Revoke) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "original_message_id" {
			return d.str(&r.OriginalMessageID)
		}
		return d.extra(&r.Extra, k)
	})
}

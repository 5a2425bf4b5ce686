package meta

import "encoding/json"

// Message is one message: an inbound messages[] item (docs/meta-webhooks.md 7), a
// message echo of the Business app (9.13) or a message of a history sync
// (9.14). The payload named after Type is set in the matching field; a type
// the decoder does not know keeps its payload in Extra.
type Message struct {
	// From is the sender's phone number; may be missing for username users.
	From             string `json:"from,omitempty"`
	FromUserID       string `json:"from_user_id,omitempty"`
	FromParentUserID string `json:"from_parent_user_id,omitempty"`
	// To, ToUserID and ToParentUserID are set on echoes and history
	// messages: the user the business wrote to.
	To             string `json:"to,omitempty"`
	ToUserID       string `json:"to_user_id,omitempty"`
	ToParentUserID string `json:"to_parent_user_id,omitempty"`
	ID             string `json:"id"`
	// Timestamp is unix seconds.
	Timestamp FlexInt64 `json:"timestamp"`
	// Type names the payload ("text", "image", ...); unknown types are kept.
	Type string `json:"type"`
	// GroupID is set when the message was written in a group.
	GroupID  string          `json:"group_id,omitempty"`
	Context  *MessageContext `json:"context,omitempty"`
	Referral *Referral       `json:"referral,omitempty"`
	// Errors are set on unsupported messages (code 131051) and media
	// problems (131052): inbound errors, not send failures.
	Errors         []Error         `json:"errors,omitempty"`
	Identity       *Identity       `json:"identity,omitempty"`
	HistoryContext *HistoryContext `json:"history_context,omitempty"`

	Text        *Text           `json:"text,omitempty"`
	Image       *Media          `json:"image,omitempty"`
	Video       *Media          `json:"video,omitempty"`
	Audio       *Media          `json:"audio,omitempty"`
	Document    *Media          `json:"document,omitempty"`
	Sticker     *Media          `json:"sticker,omitempty"`
	Location    *Location       `json:"location,omitempty"`
	Contacts    []SharedContact `json:"contacts,omitempty"`
	Interactive *Interactive    `json:"interactive,omitempty"`
	Button      *Button         `json:"button,omitempty"`
	Reaction    *Reaction       `json:"reaction,omitempty"`
	Order       *Order          `json:"order,omitempty"`
	System      *System         `json:"system,omitempty"`
	Unsupported *Unsupported    `json:"unsupported,omitempty"`
	Edit        *Edit           `json:"edit,omitempty"`
	Revoke      *Revoke         `json:"revoke,omitempty"`

	Raw json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (m *Message) setItem(raw json.RawMessage, unknown Extras) { m.Raw, m.Unknown = raw, unknown }

func (m *Message) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "from":
			return d.str(&m.From)
		case "from_user_id":
			return d.str(&m.FromUserID)
		case "from_parent_user_id":
			return d.str(&m.FromParentUserID)
		case "to":
			return d.str(&m.To)
		case "to_user_id":
			return d.str(&m.ToUserID)
		case "to_parent_user_id":
			return d.str(&m.ToParentUserID)
		case "id":
			return d.str(&m.ID)
		case "timestamp":
			return d.int(&m.Timestamp)
		case "type":
			return d.enum(&m.Type)
		case "group_id":
			return d.str(&m.GroupID)
		case "context":
			return decodePtr(d, &m.Context)
		case "referral":
			return decodePtr(d, &m.Referral)
		case "errors":
			return decodeArray(d, &m.Errors)
		case "identity":
			return decodePtr(d, &m.Identity)
		case "history_context":
			return decodePtr(d, &m.HistoryContext)
		case "text":
			return decodePtr(d, &m.Text)
		case "image":
			return decodePtr(d, &m.Image)
		case "video":
			return decodePtr(d, &m.Video)
		case "audio":
			return decodePtr(d, &m.Audio)
		case "document":
			return decodePtr(d, &m.Document)
		case "sticker":
			return decodePtr(d, &m.Sticker)
		case "location":
			return decodePtr(d, &m.Location)
		case "contacts":
			return decodeArray(d, &m.Contacts)
		case "interactive":
			return decodePtr(d, &m.Interactive)
		case "button":
			return decodePtr(d, &m.Button)
		case "reaction":
			return decodePtr(d, &m.Reaction)
		case "order":
			return decodePtr(d, &m.Order)
		case "system":
			return decodePtr(d, &m.System)
		case "unsupported":
			return decodePtr(d, &m.Unsupported)
		case "edit":
			// An edit is decoded one level deep (docs/meta-webhooks.md 7.2 shows an
			// edit's message as a plain message); an edit inside it is kept
			// raw. This also bounds the typed nesting, so that no body can
			// make paths, and so the cost of each unknown key, grow with it.
			if d.inEdit {
				return d.extra(&m.Extra, k)
			}
			d.inEdit = true
			err := decodePtr(d, &m.Edit)
			d.inEdit = false
			return err
		case "revoke":
			return decodePtr(d, &m.Revoke)
		default:
			return d.extra(&m.Extra, k)
		}
	})
}

// Sender returns the best key for the user who sent the message: the phone
// number, else the BSUID, else the parent BSUID (docs/meta-webhooks.md 8.3).
func (m *Message) Sender() string { return firstNonEmpty(m.From, m.FromUserID, m.FromParentUserID) }

// Media returns the media payload of an image, video, audio, document or
// sticker message, or nil.
func (m *Message) Media() *Media {
	switch {
	case m.Image != nil:
		return m.Image
	case m.Video != nil:
		return m.Video
	case m.Audio != nil:
		return m.Audio
	case m.Document != nil:
		return m.Document
	case m.Sticker != nil:
		return m.Sticker
	}
	return nil
}

// MessageContext is a message's context: the message it replies to, forward
// marks, or the product it asks about (docs/meta-webhooks.md 7.1).
type MessageContext struct {
	From                string           `json:"from,omitempty"`
	ID                  string           `json:"id,omitempty"`
	Forwarded           bool             `json:"forwarded,omitempty"`
	FrequentlyForwarded bool             `json:"frequently_forwarded,omitempty"`
	ReferredProduct     *ReferredProduct `json:"referred_product,omitempty"`
	Extra               Extras           `json:"-"`
}

func (c *MessageContext) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "from":
			return d.str(&c.From)
		case "id":
			return d.str(&c.ID)
		case "forwarded":
			return d.bool(&c.Forwarded)
		case "frequently_forwarded":
			return d.bool(&c.FrequentlyForwarded)
		case "referred_product":
			return decodePtr(d, &c.ReferredProduct)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// ReferredProduct is the product a message asks about.
type ReferredProduct struct {
	CatalogID         string `json:"catalog_id,omitempty"`
	ProductRetailerID string `json:"product_retailer_id,omitempty"`
	Extra             Extras `json:"-"`
}

func (p *ReferredProduct) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "catalog_id":
			return d.str(&p.CatalogID)
		case "product_retailer_id":
			return d.str(&p.ProductRetailerID)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// Referral says that a message came from a click-to-WhatsApp ad or post
// (docs/meta-webhooks.md 7.1).
type Referral struct {
	SourceURL    string `json:"source_url,omitempty"`
	SourceID     string `json:"source_id,omitempty"`
	SourceType   string `json:"source_type,omitempty"`
	Body         string `json:"body,omitempty"`
	Headline     string `json:"headline,omitempty"`
	MediaType    string `json:"media_type,omitempty"`
	ImageURL     string `json:"image_url,omitempty"`
	VideoURL     string `json:"video_url,omitempty"`
	ThumbnailURL string `json:"thumbnail_url,omitempty"`
	// CtwaClid is the click id; omitted for Status-ad placements.
	CtwaClid       string          `json:"ctwa_clid,omitempty"`
	WelcomeMessage *WelcomeMessage `json:"welcome_message,omitempty"`
	Extra          Extras          `json:"-"`
}

func (r *Referral) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "source_url":
			return d.str(&r.SourceURL)
		case "source_id":
			return d.str(&r.SourceID)
		case "source_type":
			return d.str(&r.SourceType)
		case "body":
			return d.str(&r.Body)
		case "headline":
			return d.str(&r.Headline)
		case "media_type":
			return d.str(&r.MediaType)
		case "image_url":
			return d.str(&r.ImageURL)
		case "video_url":
			return d.str(&r.VideoURL)
		case "thumbnail_url":
			return d.str(&r.ThumbnailURL)
		case "ctwa_clid":
			return d.str(&r.CtwaClid)
		case "welcome_message":
			return decodePtr(d, &r.WelcomeMessage)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// WelcomeMessage is the ad's welcome message.
type WelcomeMessage struct {
	Text  string `json:"text,omitempty"`
	Extra Extras `json:"-"`
}

func (w *WelcomeMessage) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "text" {
			return d.str(&w.Text)
		}
		return d.extra(&w.Extra, k)
	})
}

// Identity is the legacy identity-change block of a message (docs/meta-webhooks.md
// 7.1, unverified).
type Identity struct {
	Acknowledged     bool      `json:"acknowledged,omitempty"`
	CreatedTimestamp FlexInt64 `json:"created_timestamp,omitempty"`
	Hash             string    `json:"hash,omitempty"`
	Extra            Extras    `json:"-"`
}

func (i *Identity) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "acknowledged":
			return d.bool(&i.Acknowledged)
		case "created_timestamp":
			return d.int(&i.CreatedTimestamp)
		case "hash":
			return d.str(&i.Hash)
		default:
			return d.extra(&i.Extra, k)
		}
	})
}

// HistoryContext is the delivery state of a history message (docs/meta-webhooks.md
// 9.14): DELIVERED, ERROR, PENDING, PLAYED, READ or SENT.
type HistoryContext struct {
	Status string `json:"status,omitempty"`
	Extra  Extras `json:"-"`
}

func (h *HistoryContext) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "status" {
			return d.enum(&h.Status)
		}
		return d.extra(&h.Extra, k)
	})
}

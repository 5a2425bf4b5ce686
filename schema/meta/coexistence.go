package meta

import "encoding/json"

// This file holds the values of the coexistence fields (a number used with
// both the WhatsApp Business app and the Cloud API): history and
// smb_app_state_sync. Echoes (smb_message_echoes) are Messages.

// HistoryChunk is one history[] item: a chunk of past chats shared during
// coexistence onboarding (docs/meta-webhooks.md 9.14). These are past messages: never
// count them as live traffic. A declined share carries Errors (code 2593109)
// instead of threads.
type HistoryChunk struct {
	Metadata HistoryMetadata `json:"metadata"`
	Threads  []HistoryThread `json:"threads,omitempty"`
	Errors   []Error         `json:"errors,omitempty"`
	Raw      json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (h *HistoryChunk) setItem(raw json.RawMessage, unknown Extras) { h.Raw, h.Unknown = raw, unknown }

func (h *HistoryChunk) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "metadata":
			return decodeIn(d, &h.Metadata)
		case "threads":
			return decodeItems(d, &h.Threads)
		case "errors":
			return decodeArray(d, &h.Errors)
		default:
			return d.extra(&h.Extra, k)
		}
	})
}

// HistoryMetadata places a chunk in the sync: phase 0-2, chunk_order (chunks
// can arrive out of order) and progress 0-100.
type HistoryMetadata struct {
	Phase      FlexInt64 `json:"phase"`
	ChunkOrder FlexInt64 `json:"chunk_order"`
	Progress   FlexInt64 `json:"progress"`
	Extra      Extras    `json:"-"`
}

func (m *HistoryMetadata) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "phase":
			return d.int(&m.Phase)
		case "chunk_order":
			return d.int(&m.ChunkOrder)
		case "progress":
			return d.int(&m.Progress)
		default:
			return d.extra(&m.Extra, k)
		}
	})
}

// HistoryThread is one chat of a history chunk. ID is the user's phone
// number. A thread can hold thousands of messages, so each message is an
// item of its own: one bad message does not cost the thread.
type HistoryThread struct {
	ID       string          `json:"id"`
	Messages []Message       `json:"messages,omitempty"`
	Raw      json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (t *HistoryThread) setItem(raw json.RawMessage, unknown Extras) { t.Raw, t.Unknown = raw, unknown }

func (t *HistoryThread) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&t.ID)
		case "messages":
			return decodeItems(d, &t.Messages)
		default:
			return d.extra(&t.Extra, k)
		}
	})
}

// StateSync is one state_sync[] item of smb_app_state_sync: a change to the
// Business app's contact book (docs/meta-webhooks.md 9.15).
type StateSync struct {
	Type     string            `json:"type,omitempty"`
	Contact  *StateContact     `json:"contact,omitempty"`
	Action   string            `json:"action,omitempty"`
	Metadata StateSyncMetadata `json:"metadata"`
	Raw      json.RawMessage   `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (s *StateSync) setItem(raw json.RawMessage, unknown Extras) { s.Raw, s.Unknown = raw, unknown }

func (s *StateSync) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "type":
			return d.str(&s.Type)
		case "contact":
			return decodePtr(d, &s.Contact)
		case "action":
			return d.str(&s.Action)
		case "metadata":
			return decodeIn(d, &s.Metadata)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

// StateContact is a contact of the Business app's contact book.
type StateContact struct {
	FullName    string `json:"full_name,omitempty"`
	FirstName   string `json:"first_name,omitempty"`
	PhoneNumber string `json:"phone_number,omitempty"`
	Extra       Extras `json:"-"`
}

func (c *StateContact) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "full_name":
			return d.str(&c.FullName)
		case "first_name":
			return d.str(&c.FirstName)
		case "phone_number":
			return d.str(&c.PhoneNumber)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// StateSyncMetadata holds the time of a state change: a string in Meta's example,
// an int in its table (docs/meta-webhooks.md 9.15); both are accepted.
type StateSyncMetadata struct {
	Timestamp FlexInt64 `json:"timestamp"`
	Extra     Extras    `json:"-"`
}

func (m *StateSyncMetadata) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "timestamp" {
			return d.int(&m.Timestamp)
		}
		return d.extra(&m.Extra, k)
	})
}

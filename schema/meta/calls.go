package meta

import "encoding/json"

// Call is one calls[] item of field calls: a call event such as connect or
// terminate (docs/meta-webhooks.md 9.16).
type Call struct {
	// ID is the call id ("wacid.").
	ID   string `json:"id"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Event is "connect" or "terminate".
	Event string `json:"event,omitempty"`
	// Direction is USER_INITIATED or BUSINESS_INITIATED.
	Direction             string          `json:"direction,omitempty"`
	Timestamp             FlexInt64       `json:"timestamp"`
	Status                string          `json:"status,omitempty"`
	StartTime             FlexInt64       `json:"start_time,omitempty"`
	EndTime               FlexInt64       `json:"end_time,omitempty"`
	Duration              FlexInt64       `json:"duration,omitempty"`
	Session               *CallSession    `json:"session,omitempty"`
	BizOpaqueCallbackData string          `json:"biz_opaque_callback_data,omitempty"`
	Errors                []Error         `json:"errors,omitempty"`
	Raw                   json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (c *Call) setItem(raw json.RawMessage, unknown Extras) { c.Raw, c.Unknown = raw, unknown }

func (c *Call) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&c.ID)
		case "from":
			return d.str(&c.From)
		case "to":
			return d.str(&c.To)
		case "event":
			return d.enum(&c.Event)
		case "direction":
			return d.enum(&c.Direction)
		case "timestamp":
			return d.int(&c.Timestamp)
		case "status":
			return d.enum(&c.Status)
		case "start_time":
			return d.int(&c.StartTime)
		case "end_time":
			return d.int(&c.EndTime)
		case "duration":
			return d.int(&c.Duration)
		case "session":
			return decodePtr(d, &c.Session)
		case "biz_opaque_callback_data":
			return d.str(&c.BizOpaqueCallbackData)
		case "errors":
			return decodeArray(d, &c.Errors)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// CallSession is the WebRTC session description of a call.
type CallSession struct {
	SDPType string `json:"sdp_type,omitempty"`
	SDP     string `json:"sdp,omitempty"`
	Extra   Extras `json:"-"`
}

func (s *CallSession) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "sdp_type":
			return d.str(&s.SDPType)
		case "sdp":
			return d.str(&s.SDP)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

// CallStatus is one statuses[] item of field calls (type "call", status
// RINGING, ACCEPTED, REJECTED, ...). It is not a message status and must
// never be counted in delivery analytics (docs/meta-webhooks.md 9.16).
type CallStatus struct {
	ID                    string          `json:"id"`
	Type                  string          `json:"type,omitempty"`
	Status                string          `json:"status"`
	Timestamp             FlexInt64       `json:"timestamp"`
	RecipientID           string          `json:"recipient_id,omitempty"`
	RecipientUserID       string          `json:"recipient_user_id,omitempty"`
	BizOpaqueCallbackData string          `json:"biz_opaque_callback_data,omitempty"`
	Errors                []Error         `json:"errors,omitempty"`
	Raw                   json.RawMessage `json:"-"`
	// Unknown holds every unknown key within the item, nested ones included,
	// keyed by path relative to the item (such as "pricing.pricing_tier").
	Unknown Extras `json:"-"`
	Extra   Extras `json:"-"`
}

func (s *CallStatus) setItem(raw json.RawMessage, unknown Extras) { s.Raw, s.Unknown = raw, unknown }

func (s *CallStatus) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&s.ID)
		case "type":
			return d.enum(&s.Type)
		case "status":
			return d.enum(&s.Status)
		case "timestamp":
			return d.int(&s.Timestamp)
		case "recipient_id":
			return d.str(&s.RecipientID)
		case "recipient_user_id":
			return d.str(&s.RecipientUserID)
		case "biz_opaque_callback_data":
			return d.str(&s.BizOpaqueCallbackData)
		case "errors":
			return decodeArray(d, &s.Errors)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

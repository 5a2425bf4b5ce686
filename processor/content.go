package processor

import (
	"github.com/wahook/wahook/schema/meta"
)

// NormalizerOption changes a Normalizer made by NewNormalizer.
type NormalizerOption func(*Normalizer)

// WithContent switches content storage on or off; it is off by default.
// When on, the text of each inbound message (what content returns) goes
// into InboundRow.Content, and so into inbound_messages.content and the
// message's event on WAHOOK_EVENTS. When off, Content stays empty and the
// text is kept nowhere (docs/architecture.md, "ClickHouse"). Event ids never depend
// on it: switching it changes what is stored, not what is counted.
func WithContent(on bool) NormalizerOption {
	return func(n *Normalizer) { n.content = on }
}

// maxEditDepth bounds how deep content follows an edit's message, which
// may itself be an edit in a crafted body.
const maxEditDepth = 4

// content returns the text that the user wrote or chose in an inbound
// message (docs/meta-webhooks.md 7.2), or "" for a type without any:
//
//   - text: text.body
//   - image, video, document, audio, sticker: the caption
//   - interactive: the title of the button or list row tapped
//   - button (a template's quick reply): its text
//   - reaction: the emoji ("" when a reaction is removed)
//   - location: name and address, on two lines when both are set
//   - order: the text sent with the order
//   - edit: the content of the edited message
//
// Left out on purpose: a shared contact card and a system message (which
// carry phone numbers, kept only as keyed hashes), a flow's answers
// (nfm_reply.response_json, structured data rather than text), a
// document's filename, a quick reply's payload and an ad's texts (the
// business wrote those, not the user).
func content(m *meta.Message) string {
	for depth := 0; m != nil && depth <= maxEditDepth; depth++ {
		// The payload named by type: a body may carry other keys beside it.
		switch m.Type {
		case "text":
			if m.Text != nil {
				return m.Text.Body
			}
		case "image":
			return caption(m.Image)
		case "video":
			return caption(m.Video)
		case "document":
			return caption(m.Document)
		case "audio":
			return caption(m.Audio)
		case "sticker":
			return caption(m.Sticker)
		case "interactive":
			if i := m.Interactive; i != nil {
				if i.ButtonReply != nil {
					return i.ButtonReply.Title
				}
				if i.ListReply != nil {
					return i.ListReply.Title
				}
			}
		case "button":
			if m.Button != nil {
				return m.Button.Text
			}
		case "reaction":
			if m.Reaction != nil {
				return m.Reaction.Emoji
			}
		case "location":
			if l := m.Location; l != nil {
				if l.Name != "" && l.Address != "" {
					return l.Name + "\n" + l.Address
				}
				return l.Name + l.Address
			}
		case "order":
			if m.Order != nil {
				return m.Order.Text
			}
		case "edit":
			if m.Edit != nil {
				m = m.Edit.Message
				continue
			}
		}
		return ""
	}
	return ""
}

func caption(m *meta.Media) string {
	if m == nil {
		return ""
	}
	return m.Caption
}

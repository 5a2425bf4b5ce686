package meta

import (
	"iter"
	"strconv"
)

// This file holds helpers that walk a decoded payload and hand out each item
// with its envelope context, which is what a stage-1 processor needs to turn
// the payload into rows. They walk every entry and change (docs/meta-webhooks.md 11.2
// rule 2: one POST may mix WABAs, numbers and fields) and route by field
// (rule 3). Items reported in Payload.Problems are not in the typed view and
// so are not yielded.

// Envelope locates an item: the entry and change it came in. EntryIndex and
// ChangeIndex index Payload.Entries and Entry.Changes; Path gives the
// location in the body, which differs after a bad entry or change.
type Envelope struct {
	EntryIndex  int
	ChangeIndex int
	Entry       *Entry
	Change      *Change
}

// WABAID returns the entry id: the WABA id (a business portfolio id for
// partner_solutions).
func (e Envelope) WABAID() string { return e.Entry.ID }

// EntryTime returns entry.time (unix seconds), 0 where Meta omits it.
func (e Envelope) EntryTime() int64 { return int64(e.Entry.Time) }

// Field returns the change's field.
func (e Envelope) Field() string { return e.Change.Field }

// PhoneNumberID returns metadata.phone_number_id of the change's value, or ""
// for values without metadata (management fields).
func (e Envelope) PhoneNumberID() string {
	if md := e.Change.Metadata; md != nil {
		return md.PhoneNumberID
	}
	return ""
}

// DisplayPhoneNumber returns the business number as displayed: from the
// value's metadata, or from the display_phone_number of a quality, name or
// security update, which carry no phone_number_id (docs/meta-webhooks.md 11.2 rule 10).
func (e Envelope) DisplayPhoneNumber() string {
	c := e.Change
	switch {
	case c.Metadata != nil:
		return c.Metadata.DisplayPhoneNumber
	case c.QualityUpdate != nil:
		return c.QualityUpdate.DisplayPhoneNumber
	case c.NameUpdate != nil:
		return c.NameUpdate.DisplayPhoneNumber
	case c.Security != nil:
		return c.Security.DisplayPhoneNumber
	}
	return ""
}

// Path returns the change's location in the body, such as
// "entry[0].changes[1]", in the form ItemError.Path uses.
func (e Envelope) Path() string {
	return "entry[" + strconv.Itoa(e.Entry.pos) + "].changes[" + strconv.Itoa(e.Change.pos) + "]"
}

// Ref is one list item with its envelope and its index in its list.
type Ref[T any] struct {
	Envelope
	Index int
	Item  *T
}

// Changes yields every change with its envelope.
func (p *Payload) Changes() iter.Seq[Envelope] {
	return func(yield func(Envelope) bool) {
		for i := range p.Entries {
			e := &p.Entries[i]
			for j := range e.Changes {
				if !yield(Envelope{EntryIndex: i, ChangeIndex: j, Entry: e, Change: &e.Changes[j]}) {
					return
				}
			}
		}
	}
}

// items yields the elements of the list that list picks from each change of
// the given field (any field if field is "").
func items[T any](p *Payload, field string, list func(v *MessagingValue) []T) iter.Seq[Ref[T]] {
	return func(yield func(Ref[T]) bool) {
		for env := range p.Changes() {
			v := env.Change.Messaging
			if v == nil || (field != "" && env.Change.Field != field) {
				continue
			}
			s := list(v)
			for k := range s {
				if !yield(Ref[T]{Envelope: env, Index: k, Item: &s[k]}) {
					return
				}
			}
		}
	}
}

// Statuses yields every message status: the statuses[] of field messages
// only, never call statuses (docs/meta-webhooks.md 9.16).
func (p *Payload) Statuses() iter.Seq[Ref[Status]] {
	return items(p, FieldMessages, func(v *MessagingValue) []Status { return v.Statuses })
}

// InboundMessages yields every inbound message: the messages[] of field
// messages only (history and echoes are not inbound traffic).
func (p *Payload) InboundMessages() iter.Seq[Ref[Message]] {
	return items(p, FieldMessages, func(v *MessagingValue) []Message { return v.Messages })
}

// Contacts yields every value.contacts[] item of field messages.
func (p *Payload) Contacts() iter.Seq[Ref[Contact]] {
	return items(p, FieldMessages, func(v *MessagingValue) []Contact { return v.Contacts })
}

// CallStatuses yields the statuses[] of field calls.
func (p *Payload) CallStatuses() iter.Seq[Ref[CallStatus]] {
	return items(p, FieldCalls, func(v *MessagingValue) []CallStatus { return v.CallStatuses })
}

// Calls yields the calls[] of field calls.
func (p *Payload) Calls() iter.Seq[Ref[Call]] {
	return items(p, FieldCalls, func(v *MessagingValue) []Call { return v.Calls })
}

// Echoes yields the message_echoes[] of field smb_message_echoes: messages
// the business sent from the Business app (docs/meta-webhooks.md 9.13).
func (p *Payload) Echoes() iter.Seq[Ref[Message]] {
	return items(p, FieldSMBMessageEchoes, func(v *MessagingValue) []Message { return v.MessageEchoes })
}

// UserPreferences yields the user_preferences[] of field user_preferences.
func (p *Payload) UserPreferences() iter.Seq[Ref[UserPreference]] {
	return items(p, FieldUserPreferences, func(v *MessagingValue) []UserPreference { return v.UserPreferences })
}

// AutomaticEvents yields the automatic_events[] of field automatic_events.
func (p *Payload) AutomaticEvents() iter.Seq[Ref[AutomaticEvent]] {
	return items(p, FieldAutomaticEvents, func(v *MessagingValue) []AutomaticEvent { return v.AutomaticEvents })
}

// HistoryMessageRef is one message of a history sync.
type HistoryMessageRef struct {
	Envelope
	// Chunk and Thread are nil for a media follow-up, which arrives as a
	// value.messages[] item of field history (docs/meta-webhooks.md 9.14).
	Chunk  *HistoryChunk
	Thread *HistoryThread
	Item   *Message
}

// HistoryMessages yields every message of field history: those in
// history[].threads[].messages[] and the value.messages[] of media
// follow-ups. They are past messages, not live traffic.
func (p *Payload) HistoryMessages() iter.Seq[HistoryMessageRef] {
	return func(yield func(HistoryMessageRef) bool) {
		for env := range p.Changes() {
			v := env.Change.Messaging
			if v == nil || env.Change.Field != FieldHistory {
				continue
			}
			for i := range v.History {
				h := &v.History[i]
				for j := range h.Threads {
					t := &h.Threads[j]
					for k := range t.Messages {
						if !yield(HistoryMessageRef{Envelope: env, Chunk: h, Thread: t, Item: &t.Messages[k]}) {
							return
						}
					}
				}
			}
			for k := range v.Messages {
				if !yield(HistoryMessageRef{Envelope: env, Item: &v.Messages[k]}) {
					return
				}
			}
		}
	}
}

// ErrorPlace says where in a value an error object was found (docs/meta-webhooks.md
// 6.2).
type ErrorPlace int

// Places of errors.
const (
	// ErrorInStatus is statuses[].errors[]: a message we sent failed.
	ErrorInStatus ErrorPlace = iota + 1
	// ErrorInValue is value.errors[]: a system, app or account problem.
	ErrorInValue
	// ErrorInMessage is messages[].errors[] (or message_echoes[] and
	// history thread messages): a message we cannot be given.
	ErrorInMessage
	// ErrorInHistory is history[].errors[]: history sharing declined.
	ErrorInHistory
	// ErrorInCall is calls[].errors[] or call statuses[].errors[].
	ErrorInCall
)

func (p ErrorPlace) String() string {
	switch p {
	case ErrorInStatus:
		return "status"
	case ErrorInValue:
		return "value"
	case ErrorInMessage:
		return "message"
	case ErrorInHistory:
		return "history"
	case ErrorInCall:
		return "call"
	}
	return "ErrorPlace(" + strconv.Itoa(int(p)) + ")"
}

// ErrorRef is one error object with its envelope and the item it belongs
// to.
type ErrorRef struct {
	Envelope
	Place ErrorPlace
	// Status is the status the error belongs to (ErrorInStatus), else nil.
	Status *Status
	// Message is the message the error belongs to (ErrorInMessage), else
	// nil.
	Message *Message
	Item    *Error
}

// Errors yields every error object in the typed view of every messaging-style
// value, whatever its field; filter on Place and Field. A failed status with
// two errors yields two (docs/meta-webhooks.md 6.2: codes are a multiset).
func (p *Payload) Errors() iter.Seq[ErrorRef] {
	return func(yield func(ErrorRef) bool) {
		for env := range p.Changes() {
			v := env.Change.Messaging
			if v == nil {
				continue
			}
			if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInValue}, v.Errors) {
				return
			}
			for i := range v.Statuses {
				s := &v.Statuses[i]
				if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInStatus, Status: s}, s.Errors) {
					return
				}
			}
			for _, list := range [][]Message{v.Messages, v.MessageEchoes} {
				for i := range list {
					m := &list[i]
					if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInMessage, Message: m}, m.Errors) {
						return
					}
				}
			}
			for i := range v.History {
				h := &v.History[i]
				if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInHistory}, h.Errors) {
					return
				}
				for j := range h.Threads {
					for k := range h.Threads[j].Messages {
						m := &h.Threads[j].Messages[k]
						if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInMessage, Message: m}, m.Errors) {
							return
						}
					}
				}
			}
			for i := range v.Calls {
				if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInCall}, v.Calls[i].Errors) {
					return
				}
			}
			for i := range v.CallStatuses {
				if !yieldErrors(yield, ErrorRef{Envelope: env, Place: ErrorInCall}, v.CallStatuses[i].Errors) {
					return
				}
			}
		}
	}
}

func yieldErrors(yield func(ErrorRef) bool, ref ErrorRef, errs []Error) bool {
	for i := range errs {
		ref.Item = &errs[i]
		if !yield(ref) {
			return false
		}
	}
	return true
}

// PhoneNumberIDs returns the distinct metadata.phone_number_id values of the
// body, in order of appearance, over every change that has metadata. A body
// can span several numbers: partition per item, not by the first id
// (docs/meta-webhooks.md 11.2 rule 2).
func (p *Payload) PhoneNumberIDs() []string {
	var ids []string
	for env := range p.Changes() {
		id := env.PhoneNumberID()
		if id == "" {
			continue
		}
		seen := false
		for _, x := range ids {
			if x == id {
				seen = true
				break
			}
		}
		if !seen {
			ids = append(ids, id)
		}
	}
	return ids
}

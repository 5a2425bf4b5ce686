package processor

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// This file keeps the unknown keys of a body's envelope in one row.

// unknownKeys adds one row holding the unknown keys of the body that no
// other row keeps: those of the envelope (root, entry, change, value,
// metadata) and of the items without an Extra column (value-level errors,
// calls, call statuses, user preferences, automatic events, settings), as
// {path: value} in body order. Its id is the body's: it says what this POST
// carried.
func (b *run) unknownKeys() {
	p := b.p
	if len(p.Unknown) == 0 && p.UnknownDropped == 0 {
		return
	}
	keep := map[*byte]struct{}{}
	add := func(x meta.Extras) {
		for i := range x {
			if len(x[i].Value) > 0 {
				keep[&x[i].Value[0]] = struct{}{}
			}
		}
	}
	add(p.Extra)
	for i := range p.Entries {
		e := &p.Entries[i]
		add(e.Extra)
		for j := range e.Changes {
			c := &e.Changes[j]
			add(c.Extra)
			v := c.Messaging
			if v == nil {
				continue
			}
			add(v.Extra)
			if v.Metadata != nil {
				add(v.Metadata.Extra)
			}
			if v.PhoneNumberSettings != nil {
				add(v.PhoneNumberSettings.Extra)
			}
			for k := range v.Errors {
				add(v.Errors[k].Unknown)
			}
			for k := range v.CallStatuses {
				add(v.CallStatuses[k].Unknown)
			}
			for k := range v.Calls {
				add(v.Calls[k].Unknown)
			}
			for k := range v.UserPreferences {
				add(v.UserPreferences[k].Unknown)
			}
			for k := range v.AutomaticEvents {
				add(v.AutomaticEvents[k].Unknown)
			}
		}
	}
	if len(keep) == 0 && p.UnknownDropped == 0 {
		return
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for _, u := range p.Unknown {
		if len(u.Value) == 0 {
			continue
		}
		if _, ok := keep[&u.Value[0]]; !ok {
			continue
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(u.Path)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(u.Value)
	}
	buf.WriteByte('}')
	r := schema.ManagementRow{
		Source: b.src, EventID: schema.EventID(schema.KindOther, FieldUnknownKeys, b.bodyID()), Kind: schema.KindOther,
		Field: FieldUnknownKeys, EventTime: b.fallback, Raw: b.private(buf.String()),
	}
	if p.UnknownDropped > 0 {
		// Past meta.MaxUnknown the keys are counted, not kept: the row says
		// how many, and RAW keeps the body.
		r.Reason = fmt.Sprintf("%d more unknown keys after the first %d, not kept (the body is in RAW)", p.UnknownDropped, meta.MaxUnknown)
	}
	if len(p.Entries) == 1 {
		r.WabaID = p.Entries[0].ID
	}
	if ids := p.PhoneNumberIDs(); len(ids) == 1 {
		r.PhoneNumberID = ids[0]
	}
	b.rows.Management = append(b.rows.Management, r)
}

package meta

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const testMetadata = `"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"}`

// envelope wraps changes (JSON objects) into a one-entry body.
func envelope(changes ...string) []byte {
	return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[` +
		strings.Join(changes, ",") + `]}]}`)
}

// statusesChange is a messages change whose statuses are the given objects.
func statusesChange(statuses ...string) string {
	return `{"value":{` + testMetadata + `,"statuses":[` + strings.Join(statuses, ",") + `]},"field":"messages"}`
}

func status(id, more string) string {
	s := `{"id":"` + id + `","status":"delivered","timestamp":"1781514031","recipient_id":"16505550187"`
	if more != "" {
		s += "," + more
	}
	return s + "}"
}

func statusIDs(p *Payload) []string {
	var ids []string
	for r := range p.Statuses() {
		ids = append(ids, r.Item.ID)
	}
	return ids
}

// TestBadItems checks that one wrong-typed item is reported with its path,
// bytes and reason, and costs nothing else in the body.
func TestBadItems(t *testing.T) {
	tests := []struct {
		name     string
		body     []byte
		wantIDs  []string // message status ids still decoded
		wantPath string   // path of the one problem
		wantErr  string   // text the problem's error must contain
		wantRaw  string   // the problem's bytes
	}{
		{
			name:     "status with a bool given as a string",
			body:     envelope(statusesChange(status("a", ""), status("b", `"pricing":{"billable":"true","category":"utility"}`), status("c", ""))),
			wantIDs:  []string{"a", "c"},
			wantPath: "entry[0].changes[0].value.statuses[1]",
			wantErr:  "pricing.billable: got string, want bool",
			wantRaw:  status("b", `"pricing":{"billable":"true","category":"utility"}`),
		},
		{
			name:     "status with a timestamp that is not a number",
			body:     envelope(statusesChange(status("a", ""), `{"id":"b","status":"sent","timestamp":"soon"}`)),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0].value.statuses[1]",
			wantErr:  "timestamp: got string holding text that is not a number, want integer",
			wantRaw:  `{"id":"b","status":"sent","timestamp":"soon"}`,
		},
		{
			name:     "status with a fractional timestamp",
			body:     envelope(statusesChange(`{"id":"b","timestamp":1781514031.5}`, status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0].value.statuses[0]",
			wantErr:  "timestamp: got number that is not an integer, want integer",
		},
		{
			name:     "status with an error code out of range",
			body:     envelope(statusesChange(status("a", `"errors":[{"code":99999999999999999999}]`), status("b", ""))),
			wantIDs:  []string{"b"},
			wantPath: "entry[0].changes[0].value.statuses[0]",
			wantErr:  "errors[0].code: got number out of range, want integer",
		},
		{
			name:     "status id given as an object",
			body:     envelope(statusesChange(status("a", ""), `{"id":{"wamid":"x"},"status":"sent"}`)),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0].value.statuses[1]",
			wantErr:  "id: got object, want string",
		},
		{
			name:     "status that is a number",
			body:     envelope(statusesChange(status("a", ""), `42`, status("c", ""))),
			wantIDs:  []string{"a", "c"},
			wantPath: "entry[0].changes[0].value.statuses[1]",
			wantErr:  "got number, want object",
			wantRaw:  `42`,
		},
		{
			name:     "status that is null",
			body:     envelope(statusesChange(`null`, status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0].value.statuses[0]",
			wantErr:  "got null, want object",
		},
		{
			name: "inbound message with an object for its text body",
			body: envelope(`{"value":{` + testMetadata + `,"messages":[` +
				`{"from":"1","id":"m1","timestamp":"1","type":"text","text":{"body":{"x":1}}},` +
				`{"from":"1","id":"m2","timestamp":"2","type":"text","text":{"body":"ok"}}]},"field":"messages"}`),
			wantPath: "entry[0].changes[0].value.messages[0]",
			wantErr:  "text.body: got object, want string",
		},
		{
			name:     "change whose value is a string",
			body:     envelope(`{"value":"oops","field":"messages"}`, statusesChange(status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0]",
			wantErr:  "value: got string, want object",
			wantRaw:  `{"value":"oops","field":"messages"}`,
		},
		{
			name:     "change whose metadata is a string",
			body:     envelope(`{"value":{"metadata":"x","statuses":[`+status("z", "")+`]},"field":"messages"}`, statusesChange(status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0]",
			wantErr:  "value.metadata: got string, want object",
		},
		{
			name:     "change whose statuses is an object",
			body:     envelope(`{"value":{"statuses":{"id":"z"}},"field":"messages"}`, statusesChange(status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0]",
			wantErr:  "value.statuses: got object, want array",
		},
		{
			name:     "change without a field",
			body:     envelope(`{"value":{}}`, statusesChange(status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0]",
			wantErr:  "field: got missing, want string",
		},
		{
			name:     "change without a value",
			body:     envelope(statusesChange(status("a", "")), `{"field":"messages"}`),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[1]",
			wantErr:  "value: got missing, want object",
		},
		{
			name:     "management change with an object for its event",
			body:     envelope(`{"value":{"event":{"a":1}},"field":"account_update"}`, statusesChange(status("a", ""))),
			wantIDs:  []string{"a"},
			wantPath: "entry[0].changes[0]",
			wantErr:  "value.event: got object, want string",
		},
		{
			name: "entry whose time is a bool",
			body: []byte(`{"entry":[{"id":"1","time":true,"changes":[` + statusesChange(status("z", "")) + `]},` +
				`{"id":"2","changes":[` + statusesChange(status("a", "")) + `]}]}`),
			wantIDs:  []string{"a"},
			wantPath: "entry[0]",
			wantErr:  "time: got bool, want integer",
		},
		{
			name: "history message deep in a thread",
			body: envelope(`{"value":{` + testMetadata + `,"history":[{"metadata":{"phase":0},"threads":[{"id":"1","messages":[` +
				`{"id":"h1","timestamp":"1","type":"text"},{"id":"h2","timestamp":[1],"type":"text"}]}]}]},"field":"history"}`),
			wantPath: "entry[0].changes[0].value.history[0].threads[0].messages[1]",
			wantErr:  "timestamp: got array, want integer",
		},
		{
			name:     "top-level object key of the wrong type",
			body:     []byte(`{"object":{"v":2},"entry":[{"id":"1","changes":[` + statusesChange(status("a", "")) + `]}]}`),
			wantIDs:  []string{"a"},
			wantPath: "object",
			wantErr:  "got object, want string",
			wantRaw:  `{"v":2}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(tt.body)
			if err != nil {
				t.Fatalf("Decode: got error %v, want a payload", err)
			}
			if got := statusIDs(p); fmt.Sprint(got) != fmt.Sprint(tt.wantIDs) {
				t.Errorf("status ids: got %v, want %v", got, tt.wantIDs)
			}
			if len(p.Problems) != 1 {
				t.Fatalf("problems: got %d (%v), want 1", len(p.Problems), p.Problems)
			}
			pr := p.Problems[0]
			if pr.Path != tt.wantPath {
				t.Errorf("path: got %q, want %q", pr.Path, tt.wantPath)
			}
			if !strings.Contains(pr.Error(), tt.wantErr) {
				t.Errorf("error: got %q, want it to contain %q", pr.Error(), tt.wantErr)
			}
			if !errors.Is(pr, ErrBadItem) || !errors.Is(pr, ErrWrongType) || errors.Is(pr, ErrMalformed) {
				t.Errorf("error %v: got Is(ErrBadItem)=%v Is(ErrWrongType)=%v Is(ErrMalformed)=%v, want true true false",
					pr, errors.Is(pr, ErrBadItem), errors.Is(pr, ErrWrongType), errors.Is(pr, ErrMalformed))
			}
			wantReason := ReasonWrongType
			if strings.Contains(tt.wantErr, "got missing") {
				wantReason = ReasonMissingKey
			}
			if got := Reason(pr); got != wantReason {
				t.Errorf("reason: got %q, want %q", got, wantReason)
			}
			var te *TypeError
			if !errors.As(pr, &te) {
				t.Errorf("error %v: want a *TypeError cause", pr)
			}
			if tt.wantRaw != "" && string(pr.Raw) != tt.wantRaw {
				t.Errorf("raw: got %s, want %s", pr.Raw, tt.wantRaw)
			}
			if !strings.Contains(string(tt.body), string(pr.Raw)) || len(pr.Raw) == 0 {
				t.Errorf("raw: got %q, want a non-empty slice of the body", pr.Raw)
			}
		})
	}
}

// TestBadItemContext checks the context a dead-letter row gets from a bad
// item: entry id, field and phone number id, whatever the key order.
func TestBadItemContext(t *testing.T) {
	body := []byte(`{"entry":[{"changes":[{"field":"messages","value":{"statuses":[{"id":7.5e300,"status":{}}],` +
		testMetadata + `}}],"id":"104281907735512"}]}`)
	p, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) != 1 {
		t.Fatalf("problems: got %v, want 1", p.Problems)
	}
	pr := p.Problems[0]
	got := [3]string{pr.EntryID, pr.Field, pr.PhoneNumberID}
	want := [3]string{"104281907735512", "messages", "107655290331184"}
	if got != want {
		t.Errorf("context: got %v, want %v", got, want)
	}
	if want := "meta: entry[0].changes[0].value.statuses[0]: status: got object, want string: wrong type"; pr.Error() != want {
		t.Errorf("message: got %q, want %q", pr.Error(), want)
	}
}

// TestBadItemDiscardsItsInsides checks that problems and unknown keys found
// inside an item that turns out bad are not reported twice: the item's bytes
// hold them.
func TestBadItemDiscardsItsInsides(t *testing.T) {
	body := envelope(`{"value":{` + testMetadata + `,"statuses":[{"id":"x","new_key":1},5],"metadata":[]},"field":"messages"}`)
	p, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) != 1 || p.Problems[0].Path != "entry[0].changes[0]" {
		t.Errorf("problems: got %v, want one for entry[0].changes[0]", p.Problems)
	}
	if len(p.Unknown) != 0 {
		t.Errorf("unknown keys: got %v, want none", p.Unknown)
	}
	if len(p.Entries[0].Changes) != 0 {
		t.Errorf("changes: got %d, want 0", len(p.Entries[0].Changes))
	}
}

// TestFlexibleValues checks docs/meta-webhooks.md 11.1 and 11.2 rule 4: every spelling
// of a disputed or flexible value decodes, without a problem.
func TestFlexibleValues(t *testing.T) {
	tests := []struct {
		name  string
		body  []byte
		check func(p *Payload) (got, want any)
	}{
		{
			name: "timestamp as a number",
			body: envelope(statusesChange(`{"id":"a","status":"sent","timestamp":1781514031}`)),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].Timestamp, FlexInt64(1781514031)
			},
		},
		{
			name: "timestamp written with an exponent",
			body: envelope(statusesChange(`{"id":"a","status":"sent","timestamp":1.781514031e9}`)),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].Timestamp, FlexInt64(1781514031)
			},
		},
		{
			name: "error code as a string",
			body: envelope(statusesChange(status("a", `"status":"failed","errors":[{"code":"131049"}]`))),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].Errors[0].Code, FlexInt64(131049)
			},
		},
		{
			name: "id as a number longer than int64 keeps its digits",
			body: envelope(statusesChange(`{"id":"a","recipient_id":123456789012345678901234567890}`)),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].RecipientID, "123456789012345678901234567890"
			},
		},
		{
			name:  "entry id as a number",
			body:  []byte(`{"entry":[{"id":104281907735512,"changes":[]}]}`),
			check: func(p *Payload) (any, any) { return p.Entries[0].ID, "104281907735512" },
		},
		{
			name: "parent BSUID under its older spelling",
			body: envelope(statusesChange(status("a", `"parent_recipient_user_id":"US.ENT.1"`))),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].RecipientParentUserID, "US.ENT.1"
			},
		},
		{
			name: "conversation expiration as a number",
			body: envelope(statusesChange(status("a", `"conversation":{"id":"c","expiration_timestamp":1781600412}`))),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].Messaging.Statuses[0].Conversation.ExpirationTimestamp, FlexInt64(1781600412)
			},
		},
		{
			name: "latitude as a string",
			body: envelope(`{"value":{` + testMetadata + `,"messages":[{"id":"m","type":"location","location":{"latitude":"51.5194133","longitude":-0.1269566}}]},"field":"messages"}`),
			check: func(p *Payload) (any, any) {
				l := p.Entries[0].Changes[0].Messaging.Messages[0].Location
				return [2]FlexFloat64{l.Latitude, l.Longitude}, [2]FlexFloat64{51.5194133, -0.1269566}
			},
		},
		{
			name: "template id as a string",
			body: envelope(`{"value":{"event":"APPROVED","message_template_id":"1284407716390542"},"field":"message_template_status_update"}`),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].TemplateStatus.TemplateID, FlexString("1284407716390542")
			},
		},
		{
			name: "template id as a 16-digit number keeps every digit",
			body: envelope(`{"value":{"event":"APPROVED","message_template_id":9007199254740993},"field":"message_template_status_update"}`),
			check: func(p *Payload) (any, any) {
				return p.Entries[0].Changes[0].TemplateStatus.TemplateID, FlexString("9007199254740993")
			},
		},
		{
			name: "messaging limit as an int",
			body: envelope(`{"value":{"max_daily_conversations_per_business":2000},"field":"business_capability_update"}`),
			check: func(p *Payload) (any, any) {
				n, ok := p.Entries[0].Changes[0].CapabilityUpdate.MaxDailyConversationsPerBusiness.Int64()
				return spaced(n, ok), "2000 true"
			},
		},
		{
			name: "restriction expiration as an ISO string",
			body: envelope(`{"value":{"event":"ACCOUNT_RESTRICTION","restriction_info":[{"expiration":"2026-04-19T13:59:20+0000"}]},"field":"account_update"}`),
			check: func(p *Payload) (any, any) {
				e := p.Entries[0].Changes[0].AccountUpdate.RestrictionInfo[0].Expiration
				_, isUnix := e.Int64()
				return spaced(e, isUnix), "2026-04-19T13:59:20+0000 false"
			},
		},
		{
			name: "null where an object, list or string belongs",
			body: envelope(statusesChange(`{"id":"a","status":null,"pricing":null,"errors":null,"conversation":null,"timestamp":null}`)),
			check: func(p *Payload) (any, any) {
				s := p.Entries[0].Changes[0].Messaging.Statuses[0]
				return spaced(s.Status == "", s.Pricing == nil, s.Errors == nil, s.Conversation == nil, s.Timestamp), "true true true true 0"
			},
		},
		{
			name: "field before value",
			body: envelope(`{"field":"calls","value":{` + testMetadata + `,"statuses":[{"id":"wacid.1","type":"call","status":"RINGING"}]}}`),
			check: func(p *Payload) (any, any) {
				v := p.Entries[0].Changes[0].Messaging
				return spaced(len(v.Statuses), len(v.CallStatuses), v.CallStatuses[0].Status), "0 1 RINGING"
			},
		},
		{
			name: "field given twice: the last one wins, as in encoding/json",
			body: envelope(`{"field":"calls","value":{"statuses":[{"id":"x","status":"sent"}]},"field":"messages"}`),
			check: func(p *Payload) (any, any) {
				v := p.Entries[0].Changes[0].Messaging
				return spaced(p.Entries[0].Changes[0].Field, len(v.Statuses), len(v.CallStatuses)), "messages 1 0"
			},
		},
		{
			name: "escaped key",
			body: envelope(statusesChange(`{"\u0069d":"a","st\u0061tus":"read"}`)),
			check: func(p *Payload) (any, any) {
				s := p.Entries[0].Changes[0].Messaging.Statuses[0]
				return s.ID + " " + s.Status, "a read"
			},
		},
		{
			name: "unknown status value and upper case",
			body: envelope(statusesChange(status("a", `"status":"queued"`), status("b", `"status":"READ"`))),
			check: func(p *Payload) (any, any) {
				v := p.Entries[0].Changes[0].Messaging.Statuses
				return spaced(v[0].Status, v[1].Is(StatusRead)), "queued true"
			},
		},
		{
			name: "unknown field with an array value",
			body: envelope(`{"value":[1,{"a":"b"}],"field":"future_field"}`),
			check: func(p *Payload) (any, any) {
				c := p.Entries[0].Changes[0]
				return spaced(c.Known(), string(c.Value), c.Metadata == nil), `false [1,{"a":"b"}] true`
			},
		},
		{
			name:  "unknown object value (a non-WhatsApp object) is kept",
			body:  []byte(`{"object":"page","entry":[]}`),
			check: func(p *Payload) (any, any) { return p.Object, "page" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(tt.body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(p.Problems) != 0 {
				t.Fatalf("problems: got %v, want none", p.Problems)
			}
			if got, want := tt.check(p); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// spaced joins values with single spaces.
func spaced(v ...any) string { return strings.TrimSuffix(fmt.Sprintln(v...), "\n") }

// TestRecipientKeys checks the recipient and sender fallbacks of
// docs/meta-webhooks.md 8.3 and the group accessors of 8.1.
func TestRecipientKeys(t *testing.T) {
	tests := []struct {
		s         Status
		recipient string
		group     string
	}{
		{Status{RecipientID: "1", RecipientUserID: "US.1"}, "1", ""},
		{Status{RecipientUserID: "US.1", RecipientParentUserID: "US.ENT.1"}, "US.1", ""},
		{Status{RecipientParentUserID: "US.ENT.1"}, "US.ENT.1", ""},
		{Status{RecipientType: "group", RecipientID: "G", RecipientParticipantID: "2"}, "2", "G"},
		{Status{RecipientType: "group", RecipientID: "G", RecipientParticipantUserID: "US.2"}, "US.2", "G"},
	}
	for _, tt := range tests {
		if got := tt.s.Recipient(); got != tt.recipient {
			t.Errorf("%+v Recipient: got %q, want %q", tt.s, got, tt.recipient)
		}
		if got := tt.s.GroupID(); got != tt.group {
			t.Errorf("%+v GroupID: got %q, want %q", tt.s, got, tt.group)
		}
	}
	m := Message{FromUserID: "US.1", FromParentUserID: "US.ENT.1"}
	if got := m.Sender(); got != "US.1" {
		t.Errorf("Sender: got %q, want US.1", got)
	}
}

// TestPathAfterBadItem checks that Envelope.Path and item paths name the
// place in the body, not the place in the typed view, once an earlier entry
// or change was left out.
func TestPathAfterBadItem(t *testing.T) {
	body := []byte(`{"entry":[{"id":[]},{"id":"2","changes":[{"value":7,"field":"messages"},` +
		statusesChange(`{"id":"x","status":{}}`, status("a", "")) + `]}]}`)
	p, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for env := range p.Changes() {
		paths = append(paths, env.Path())
	}
	if got, want := spaced(paths), "[entry[1].changes[1]]"; got != want {
		t.Errorf("change paths: got %s, want %s", got, want)
	}
	var probs []string
	for _, pr := range p.Problems {
		probs = append(probs, pr.Path)
	}
	want := "[entry[0] entry[1].changes[0] entry[1].changes[1].value.statuses[0]]"
	if got := spaced(probs); got != want {
		t.Errorf("problem paths: got %s, want %s", got, want)
	}
}

// TestNestedEditKeptRaw checks that an edit inside an edit's message is kept
// raw, which bounds how deep typed decoding (and so each path) can go.
func TestNestedEditKeptRaw(t *testing.T) {
	inner := `{"original_message_id":"m0","message":{"type":"text","text":{"body":"x"}}}`
	body := envelope(`{"value":{` + testMetadata + `,"messages":[{"id":"m2","type":"edit","edit":` +
		`{"original_message_id":"m1","message":{"type":"edit","edit":` + inner + `}}}]},"field":"messages"}`)
	p, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Entries[0].Changes[0].Messaging.Messages[0]
	outer := m.Edit.Message
	if outer == nil || outer.Edit != nil {
		t.Fatalf("edit message: got %+v, want a message whose own edit is kept raw", outer)
	}
	if raw, ok := outer.Extra.Get("edit"); !ok || string(raw) != inner {
		t.Errorf("nested edit: got %s (present %v), want %s", raw, ok, inner)
	}
	if len(p.Unknown) != 1 || p.Unknown[0].Path != "entry[0].changes[0].value.messages[0].edit.message.edit" {
		t.Errorf("unknown keys: got %v, want the nested edit", p.Unknown)
	}
}

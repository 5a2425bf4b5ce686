package meta

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// good is a well-formed status; bad has an id of the wrong type.
const (
	goodStatus = `{"id":"wamid.A","status":"sent","timestamp":"1781514312","recipient_id":"1555"}`
	badStatus  = `{"id":{"x":1}}`
)

// TestDuplicateKeyDropsEarlierRecords checks that a known key given twice
// reports only what its last value holds: the problems and unknown keys of
// the earlier value, which is not in the typed view, go with it. A problem
// there made a dead letter of a body whose kept copy was fine.
func TestDuplicateKeyDropsEarlierRecords(t *testing.T) {
	value := func(field, v string) string { return `{"value":{` + v + `},"field":"` + field + `"}` }
	manyBad := strings.Repeat(badStatus+",", MaxProblems+50) + badStatus
	var manyUnknown strings.Builder
	for i := 0; i <= MaxUnknown+500; i++ {
		fmt.Fprintf(&manyUnknown, `,"k%d":0`, i)
	}
	tests := []struct {
		name     string
		body     string
		problems []string // paths
		unknown  []string // paths
		statuses []string // ids
		dropped  [2]int   // ProblemsDropped, UnknownDropped
	}{
		{
			name:     "items given twice",
			body:     string(envelope(value("messages", `"statuses":[`+badStatus+`],"statuses":[`+goodStatus+`]`))),
			statuses: []string{"wamid.A"},
		},
		{
			name:     "unknown keys of the earlier items",
			body:     string(envelope(value("messages", `"statuses":[{"id":"wamid.B","zz":1}],"statuses":[`+goodStatus+`]`))),
			statuses: []string{"wamid.A"},
		},
		{
			name: "another key in between keeps its records",
			body: string(envelope(value("messages",
				`"statuses":[`+badStatus+`],"contacts":[{"wa_id":"1","zz":1}],"statuses":[`+goodStatus+`]`))),
			unknown:  []string{"entry[0].changes[0].value.contacts[0].zz"},
			statuses: []string{"wamid.A"},
		},
		{
			// The records of a later key move when an earlier one goes.
			name: "two keys given twice, interleaved",
			body: string(envelope(value("messages",
				`"contacts":[{"a":1}],"statuses":[{"id":"wamid.B","b":1}],"contacts":[{"c":1}],"statuses":[{"id":"wamid.A","d":1}]`))),
			unknown:  []string{"entry[0].changes[0].value.contacts[0].c", "entry[0].changes[0].value.statuses[0].d"},
			statuses: []string{"wamid.A"},
		},
		{
			name:     "problems past MaxProblems in the earlier copy",
			body:     string(envelope(value("messages", `"statuses":[`+manyBad+`],"statuses":[`+goodStatus+`]`))),
			statuses: []string{"wamid.A"},
		},
		{
			name:     "unknown keys past MaxUnknown in the earlier copy",
			body:     string(envelope(value("messages", `"statuses":[{"id":"wamid.B"`+manyUnknown.String()+`}],"statuses":[{"id":"wamid.A","zz":1}]`))),
			unknown:  []string{"entry[0].changes[0].value.statuses[0].zz"},
			statuses: []string{"wamid.A"},
		},
		{
			name:     "value given twice after the field",
			body:     string(envelope(`{"field":"messages","value":{"statuses":[` + badStatus + `],"zz":1},"value":{"statuses":[` + goodStatus + `]}}`)),
			statuses: []string{"wamid.A"},
		},
		{
			name:     "value given twice before the field",
			body:     string(envelope(`{"value":{"statuses":[` + badStatus + `],"zz":1},"value":{"statuses":[` + goodStatus + `]},"field":"messages"}`)),
			statuses: []string{"wamid.A"},
		},
		{
			// The value was decoded as messages, then the last field says
			// it is an unknown field, which is kept raw.
			name: "field given again after the value",
			body: string(envelope(`{"field":"messages","value":{"statuses":[` + badStatus + `],"zz":1},"field":"zzz"}`)),
		},
		{
			// The other way round the last field finds the bad status.
			name:     "field given again, the last one finds a problem",
			body:     string(envelope(`{"field":"zzz","value":{"statuses":[` + badStatus + `],"zz":1},"field":"messages"}`)),
			problems: []string{"entry[0].changes[0].value.statuses[0]"},
			unknown:  []string{"entry[0].changes[0].value.zz"},
		},
		{
			name: "entry given twice",
			body: `{"entry":[{"changes":[{"value":{}}]}],"entry":[]}`,
		},
		{
			name: "object given twice",
			body: `{"object":{"a":1},"object":"whatsapp_business_account","entry":[]}`,
		},
		{
			// An unknown key is kept each time it is given.
			name:    "unknown key given twice",
			body:    `{"zz":1,"entry":[],"zz":2}`,
			unknown: []string{"zz", "zz"},
		},
	}
	paths := func(n int, at func(int) string) []string {
		var out []string
		for i := range n {
			out = append(out, at(i))
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			problems := paths(len(p.Problems), func(i int) string { return p.Problems[i].Path })
			unknown := paths(len(p.Unknown), func(i int) string { return p.Unknown[i].Path })
			if fmt.Sprint(problems) != fmt.Sprint(tt.problems) {
				t.Errorf("problems: got %v, want %v", p.Problems, tt.problems)
			}
			if fmt.Sprint(unknown) != fmt.Sprint(tt.unknown) {
				t.Errorf("unknown keys: got %v, want %v", unknown, tt.unknown)
			}
			if got := statusIDs(p); fmt.Sprint(got) != fmt.Sprint(tt.statuses) {
				t.Errorf("statuses: got %v, want %v", got, tt.statuses)
			}
			if got := [2]int{p.ProblemsDropped, p.UnknownDropped}; got != tt.dropped {
				t.Errorf("dropped problems and unknown keys: got %v, want %v", got, tt.dropped)
			}
			// Each item's Unknown holds what Payload.Unknown holds for it.
			for env := range p.Changes() {
				if got := len(env.Change.Unknown); got != len(unknown) {
					t.Errorf("change %s: %d unknown keys, want %d", env.Path(), got, len(unknown))
				}
			}
		})
	}
}

// TestDuplicateKeysUnlikeEncodingJSON pins where a key given twice decodes
// differently from encoding/json, on purpose: an object given again
// replaces the earlier one, where encoding/json merges the two into one
// that matches neither copy (the typed view is always one copy's bytes);
// and keys match exactly, where encoding/json also takes a key in another
// case (Meta sends lower-case keys; "ID" is something else, kept as an
// unknown key).
func TestDuplicateKeysUnlikeEncodingJSON(t *testing.T) {
	tests := []struct {
		name      string
		status    string
		mine, std string // the status's known keys, as JSON
	}{
		{
			name:   "an object held by pointer is replaced",
			status: `{"id":"wamid.A","pricing":{"billable":true,"category":"utility"},"pricing":{"pricing_model":"PMP"}}`,
			mine:   `{"id":"wamid.A","status":"","timestamp":0,"pricing":{"pricing_model":"PMP"}}`,
			std:    `{"id":"wamid.A","status":"","timestamp":0,"pricing":{"billable":true,"pricing_model":"PMP","category":"utility"}}`,
		},
		{
			name:   "an object held by value is replaced",
			status: `{"id":"wamid.A","conversation":{"id":"c","origin":{"type":"service"},"origin":{}}}`,
			mine:   `{"id":"wamid.A","status":"","timestamp":0,"conversation":{"id":"c","origin":{}}}`,
			std:    `{"id":"wamid.A","status":"","timestamp":0,"conversation":{"id":"c","origin":{"type":"service"}}}`,
		},
		{
			name:   "a key in another case is another key",
			status: `{"id":"wamid.A","ID":"wamid.B"}`,
			mine:   `{"id":"wamid.A","status":"","timestamp":0}`,
			std:    `{"id":"wamid.B","status":"","timestamp":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(envelope(statusesChange(tt.status)))
			if err != nil {
				t.Fatal(err)
			}
			ss := p.Entries[0].Changes[0].Messaging.Statuses
			if len(ss) != 1 || len(p.Problems) != 0 {
				t.Fatalf("got %d statuses and problems %v, want one status", len(ss), p.Problems)
			}
			var std Status
			if err := json.Unmarshal([]byte(tt.status), &std); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what string
				v    any
				want string
			}{{"mine", &ss[0], tt.mine}, {"encoding/json", &std, tt.std}} {
				got, err := json.Marshal(c.v)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != c.want {
					t.Errorf("%s: got %s, want %s", c.what, got, c.want)
				}
			}
		})
	}
}

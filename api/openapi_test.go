package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The document lists every route with every parameter it accepts, and its
// schemas describe every field the answers carry.
func TestOpenAPIDocument(t *testing.T) {
	var doc struct {
		OpenAPI string
		Paths   map[string]map[string]struct {
			Parameters []struct {
				Name   string
				Schema map[string]any
			}
			Responses map[string]any
		}
		Components struct{ Schemas map[string]map[string]any }
	}
	if err := json.Unmarshal(openAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	for _, r := range routes {
		op, ok := doc.Paths[r.Path]["get"]
		if !ok {
			t.Errorf("%s missing", r.Path)
			continue
		}
		var names []string
		for _, p := range op.Parameters {
			names = append(names, p.Name)
		}
		for _, p := range r.Params {
			if !strings.Contains(","+strings.Join(names, ",")+",", ","+p.Name+",") {
				t.Errorf("%s: parameter %s missing", r.Path, p.Name)
			}
		}
		// A default is of its parameter's own type (a string default on
		// an integer or an array breaks code generators).
		for _, p := range op.Parameters {
			def, ok := p.Schema["default"]
			if !ok {
				continue
			}
			switch p.Schema["type"] {
			case "integer":
				if _, isNum := def.(float64); !isNum {
					t.Errorf("%s: %s's default %#v is no number", r.Path, p.Name, def)
				}
			case "array":
				if _, isList := def.([]any); !isList {
					t.Errorf("%s: %s's default %#v is no list", r.Path, p.Name, def)
				}
			case "string":
				if _, isString := def.(string); !isString {
					t.Errorf("%s: %s's default %#v is no string", r.Path, p.Name, def)
				}
			}
		}
		for _, code := range []string{"200", "400", "401", "404", "429", "500", "503"} {
			if op.Responses[code] == nil {
				t.Errorf("%s: no %s response", r.Path, code)
			}
		}
		if doc.Components.Schemas[r.Schema] == nil {
			t.Errorf("%s: schema %s missing", r.Path, r.Schema)
		}
	}

	for _, p := range []string{"/api/v1/pacing", "/api/v1/pacing/stream", "/api/v1/send-results"} {
		if len(doc.Paths[p]) == 0 {
			t.Errorf("%s missing", p)
		}
	}
	// The answers send-results gives besides 202.
	for _, code := range []string{"400", "401", "403", "404", "408", "413", "429", "503"} {
		if doc.Paths["/api/v1/send-results"]["post"].Responses[code] == nil {
			t.Errorf("send-results: no %s response", code)
		}
	}
	if doc.Components.Schemas["Signals"] == nil {
		t.Error("schema Signals missing")
	}

	// Answers with every optional field set: each key must be in the schema.
	p50, code, s, yes := 1.5, int32(131026), "x", true
	now := time.Now()
	answers := map[string]any{
		"Failures": Failures{Rows: []FailureRow{{Time: &now, Code: &code, Title: s, Class: "c", Verdict: "v", Retryable: &yes,
			PhoneNumberID: &s, WabaID: &s, Template: &s, Campaign: &s, Origin: s}}, GroupBy: []string{"code"}, Step: "1m"},
		"Funnel":      Funnel{Rows: []FunnelRow{{ToDeliver: Durations{P50: &p50, P95: &p50}}}},
		"Throughput":  Throughput{PeakTime: &now, Points: []ThroughputPoint{{}}},
		"Numbers":     Numbers{Numbers: []NumberState{{LastThroughputUpgrade: &now, MaintenanceFrom: &now, MaintenanceUntil: &now, LastChange: &now, DisplayPhoneNumber: s, WabaID: s, MessagingLimit: s, PreviousMessagingLimit: s, RecentChanges: []Change{{OldValue: s, NewValue: s, Reason: s}}}}},
		"DeadLetters": DeadLetters{ByReason: []DeadLetterReason{{}}, Recent: []DeadLetterItem{{}}},
		"Error":       errorBody{Error: &Error{Code: s, Message: s, Parameter: s}},
	}
	for name, v := range answers {
		b, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(b, &m)
		checkAgainstSchema(t, name, m, doc.Components.Schemas[name])
	}
}

func checkAgainstSchema(t *testing.T, path string, v any, schema map[string]any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, x := range v {
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s is not in the schema", path, k)
				continue
			}
			checkAgainstSchema(t, path+"."+k, x, sub)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for _, x := range v {
			checkAgainstSchema(t, path+"[]", x, items)
		}
	}
}

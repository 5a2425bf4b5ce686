package meta

import (
	"errors"
	"strings"
	"testing"
)

// TestMalformed checks the only failures of a whole body: not JSON, a top
// level that is not an object, an entry that is missing or not an array.
func TestMalformed(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	tests := []struct {
		name   string
		body   string
		want   string // text the error must contain
		reason string
	}{
		{"empty", ``, "empty body at offset 0", ReasonEmptyBody},
		{"only spaces", " \n\t", "empty body", ReasonEmptyBody},
		{"not JSON", `hello`, `invalid character 'h' looking for value at offset 0`, ReasonNotJSON},
		{"text that starts like a literal", `this is not json`, "body is not valid JSON (it starts like a bool)", ReasonNotJSON},
		{"number then text", `42 is the answer`, "body is not valid JSON (it starts like a number)", ReasonNotJSON},
		{"top level array", `[{"entry":[]}]`, "top level is array, want object", ReasonNotObject},
		{"top level string", `"x"`, "top level is string, want object", ReasonNotObject},
		{"top level null", `null`, "top level is null, want object", ReasonNotObject},
		{"no entry", `{"object":"whatsapp_business_account"}`, "no entry array", ReasonNoEntry},
		{"entry null", `{"entry":null}`, "entry is null, want array", ReasonNoEntry},
		{"entry object", `{"entry":{"id":"1"}}`, "entry is object, want array at offset 9 (entry)", ReasonNoEntry},
		{"truncated", `{"entry":[{"id":"1","changes":[{"value":{"statuses":[{"id":"a"`, "unexpected end of input", ReasonNotJSON},
		{"trailing garbage", `{"entry":[]} x`, "invalid character 'x' looking for end of input after top-level object", ReasonNotJSON},
		{"two objects", `{"entry":[]}{"entry":[]}`, "after top-level object", ReasonNotJSON},
		{"bad escape in a deferred value", `{"entry":[{"changes":[{"value":{"statuses":[{"id":"\q"}]},"field":"messages"}]}]}`, `invalid escape 'q' in string`, ReasonNotJSON},
		{"brackets that only match by count", `{"entry":[{"changes":[{"value":{"statuses":[}]},"field":"messages"}]}]}`, "looking for value", ReasonNotJSON},
		{"bad number in an unknown field", `{"entry":[{"changes":[{"value":{"x":01},"field":"future"}]}]}`, "looking for ',' or '}'", ReasonNotJSON},
		{"control character in a string", "{\"entry\":[],\"k\":\"a\x01b\"}", "invalid control character", ReasonNotJSON},
		{"missing colon", `{"entry" []}`, "looking for ':' after object key", ReasonNotJSON},
		{"trailing comma", `{"entry":[],}`, "looking for object key", ReasonNotJSON},
		{"single quotes", `{'entry':[]}`, "looking for object key", ReasonNotJSON},
		{"bad literal", `{"entry":[],"x":tru}`, "literal true", ReasonNotJSON},
		{"nesting too deep", `{"entry":[],"x":` + deep + `}`, "nesting deeper than 10000 levels", ReasonTooDeep},
		{"nesting too deep in a deferred value", `{"entry":[{"changes":[{"value":` + deep + `,"field":"x"}]}]}`, "nesting deeper", ReasonTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode([]byte(tt.body))
			if err == nil {
				t.Fatalf("Decode: got payload %+v, want an error", p)
			}
			if p != nil {
				t.Errorf("payload: got %+v, want nil", p)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v: want it to wrap ErrMalformed", err)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Errorf("error %v: want a *SyntaxError", err)
			}
			if got := Reason(err); got != tt.reason {
				t.Errorf("reason: got %q, want %q", got, tt.reason)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestNotMalformed checks bodies at the edge that must decode.
func TestNotMalformed(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"empty entry", `{"entry":[]}`},
		{"spaces around", " \r\n{ \"entry\" : [ ] }\n "},
		{"entry with nothing", `{"entry":[{}]}`},
		{"invalid UTF-8 in a string", "{\"entry\":[],\"k\":\"\xff\xfe\"}"},
		{"lone surrogate escape", `{"entry":[],"k":"\ud800"}`},
		{"deep but allowed", `{"entry":[],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode([]byte(tt.body)); err != nil {
				t.Errorf("Decode: got %v, want no error", err)
			}
		})
	}
}

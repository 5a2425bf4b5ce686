package meta

import (
	"encoding/json"
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
		// A repeated value replaces the earlier one, which was only
		// bracket-matched: it must still be validated.
		{"bad earlier copy of a repeated value", `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"value":{"a":tru},"value":{"messaging_product":"whatsapp"},"field":"messages"}]}]}`, "literal true", ReasonNotJSON},
		{"bad earlier copy of a value repeated after the field", `{"entry":[{"changes":[{"value":{"a":tru},"field":"messages","value":{}}]}]}`, "literal true", ReasonNotJSON},
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

// TestDepthLimitKeyOrder checks that the nesting limit does not depend on
// whether a change's "field" comes before its "value" (decoded in one pass)
// or after it (decoded once the change is read), and that it falls where
// encoding/json puts it. A value nested k levels deep inside "x" sits at
// level 6+k: the top object, entry, the entry, changes, the change, the
// value.
func TestDepthLimitKeyOrder(t *testing.T) {
	nest := func(k int) string { return strings.Repeat("[", k) + strings.Repeat("]", k) }
	for _, k := range []int{maxDepth - 6, maxDepth - 6 + 1} {
		for _, order := range []string{
			`{"entry":[{"changes":[{"value":{"x":%s},"field":"zzz"}]}]}`,
			`{"entry":[{"changes":[{"field":"zzz","value":{"x":%s}}]}]}`,
			`{"entry":[{"changes":[{"value":{"x":%s},"field":"messages"}]}]}`,
			`{"entry":[{"changes":[{"field":"messages","value":{"x":%s}}]}]}`,
		} {
			body := []byte(strings.Replace(order, "%s", nest(k), 1))
			var v any
			stdErr := json.Unmarshal(body, &v)
			_, err := Decode(body)
			if (err != nil) != (stdErr != nil) {
				t.Errorf("k=%d %s: got error %v, encoding/json %v", k, strings.Replace(order, "%s", "NEST", 1), err, stdErr)
			}
			if err != nil && Reason(err) != ReasonTooDeep {
				t.Errorf("k=%d %s: reason %q, want %q", k, strings.Replace(order, "%s", "NEST", 1), Reason(err), ReasonTooDeep)
			}
		}
	}
}

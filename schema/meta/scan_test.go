package meta

import (
	"encoding/json"
	"testing"
)

// decodeString reads one JSON string with the package's scanner.
func decodeString(b []byte) (string, error) {
	var s string
	err := unmarshalWith(b, func(d *decoder) error {
		if d.peek() != '"' {
			return d.wrongType("string")
		}
		return d.str(&s)
	})
	return s, err
}

// validJSON reports whether b is one JSON value according to the package's
// scanner.
func validJSON(b []byte) bool {
	return unmarshalWith(b, func(d *decoder) error { return d.skipValue() }) == nil
}

func TestStringsAgreeWithEncodingJSON(t *testing.T) {
	tests := []string{
		`""`, `"plain"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"😀 direct"`, `"\ud800"`, `"\udc00\ud800"`,
		`"\ud800\u0041"`, `"\ud83d\ud83d\ude00"`, `"\n\t\r\b\f\/\\\""`, "\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"",
		`"\u0000"`, `"\uD83D\uDE00"`,
	}
	for _, in := range tests {
		var want string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("encoding/json %s: %v", in, err)
		}
		got, err := decodeString([]byte(in))
		if err != nil || got != want {
			t.Errorf("%s: got %q (%v), want %q", in, got, err, want)
		}
	}
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	tests := []string{
		`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e`, `1e+`, `-1.5e-3`, `+1`, `0x10`,
		`true`, `tru`, `false`, `null`, `nul`, `NaN`, `""`, `"a`, `"\x"`, `"\u12"`, `"\u12G4"`,
		`[]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{1:2}`, `{"a":1 "b":2}`,
		`[[[]]]`, `[{"a":[{"b":null}]}]`, ` [ 1 , 2 ] `, `[1]]`, `{"a":[}`, "\"\x1f\"", "\"\x7f\"",
		// Bytes outside ASCII, alone, at the end and before an escape.
		"\"\xff", "\"caf\xc3\xa9", "\"\xc3\xa9\\", "[\"\xe2\x80\xa8", "\"\xe2\x80\xa8\\u00e9\"",
	}
	for _, in := range tests {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("%q: got valid=%v, want %v (encoding/json)", in, got, want)
		}
	}
}

// TestSkipFastEndsWhereSkipValueDoes: skipFast, which only matches quotes
// and brackets, must end a value exactly where the validating skipValue does,
// whatever escapes its strings hold and wherever they fall in the 8-byte
// words it scans; cut off, it stops at the end of the input.
func TestSkipFastEndsWhereSkipValueDoes(t *testing.T) {
	for _, v := range []string{
		`{"a":"x\"}"}`, `{"a":"01234567\"]}"}`, `{"a":"\\"}`, `{"a":"x\\\"}"}`, `["\\\\","]"]`,
		`{"a":"0\\"}`, "{\"a\":\"caf\xc3\xa9 \\\"}\"}", `[{"b":"]\"["},"\\u005d"]`,
	} {
		in := v + `,"b":1}`
		fast := decoder{data: []byte(in)}
		fast.skipFast()
		valid := decoder{data: []byte(in)}
		if err := valid.skipValue(); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if fast.pos != len(v) || valid.pos != len(v) {
			t.Errorf("%s: skipFast ends at %d, skipValue at %d, want %d", in, fast.pos, valid.pos, len(v))
		}
	}
	for _, in := range []string{
		`{"a":"`, `{"a":"x`, `{"a":"0123456789`, `{"a":"x\`, `{"a":"0\`, `{"a":"01234567\`, `{"a":"x\"`, `["\\`,
	} {
		d := decoder{data: []byte(in)}
		d.skipFast()
		if d.pos != len(in) {
			t.Errorf("%s: skipFast ends at %d, want the end, %d", in, d.pos, len(in))
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"-0", 0, false},
		{"1781514031", 1781514031, false},
		{"9223372036854775807", 9223372036854775807, false},
		{"-9223372036854775808", -9223372036854775808, false},
		{"9223372036854775808", 0, true},
		{"-9223372036854775809", 0, true},
		{"2000.0", 2000, false},
		{"1e3", 1000, false},
		{"1.5", 0, true},
		{"1e400", 0, true},
		{" 1", 0, true},
		{"0x10", 0, true},
		{"12abc", 0, true},
	}
	for _, tt := range tests {
		got, why := parseInt([]byte(tt.in))
		if (why != "") != tt.bad || got != tt.want {
			t.Errorf("parseInt(%q): got %d (%q), want %d (bad %v)", tt.in, got, why, tt.want, tt.bad)
		}
	}
}

func TestFlexUnmarshalJSON(t *testing.T) {
	var v struct {
		A, B FlexInt64
		C, D FlexString
		E, F FlexFloat64
	}
	in := `{"A":12,"B":"34","C":"x","D":1093318472265089,"E":1.5,"F":"-2.25"}`
	if err := json.Unmarshal([]byte(in), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 12 || v.B != 34 || v.C != "x" || v.D != "1093318472265089" || v.E != 1.5 || v.F != -2.25 {
		t.Errorf("got %+v", v)
	}
	for _, bad := range []string{`{"A":true}`, `{"A":"x"}`, `{"C":[]}`, `{"E":{}}`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s: got no error, want one", bad)
		}
	}
}

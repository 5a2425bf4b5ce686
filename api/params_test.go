package api

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// A parameter given empty (step=, as a form sends its empty fields) is as
// if it were absent, for every route and every parameter, as an empty item
// of a list is: step= was refused (`"" is not one of 1m, 1h, 1d`) while
// its documentation says "empty: one bucket".
func TestParamEmptyIsAbsent(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	for _, r := range routes {
		for _, p := range r.Params {
			base := url.Values{}
			if p.Name != "phone_number_id" && r.Name == "throughput" {
				base.Set("phone_number_id", "106540352240001")
			}
			wantQ, wantErr := parseQuery(r.Params, base, now)
			for _, empty := range []string{"", " "} {
				v := url.Values{}
				for k, vs := range base {
					v[k] = vs
				}
				v.Set(p.Name, empty)
				q, err := parseQuery(r.Params, v, now)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(q, wantQ) {
					t.Errorf("%s?%s: %+v, %v; want as without it: %+v, %v", r.Path, v.Encode(), q, err, wantQ, wantErr)
				}
			}
		}
	}
}

// A list item in double quotes is taken whole, commas and spaces in it
// included, with "" for a quote in it, as in CSV: a campaign is often JSON,
// and split at its commas it matched nothing. A campaign is up to
// Meta's 512 characters (2,048 bytes); other strings up to 256 bytes.
func TestListQuoting(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	var failures []param
	for _, r := range routes {
		if r.Name == "errors" {
			failures = r.Params
		}
	}
	if failures == nil {
		t.Fatal("no route errors")
	}
	long := func(n int) string { return strings.Repeat("é", n/2) } // n bytes of UTF-8
	for _, c := range []struct {
		name, value string
		campaigns   []string
		codes       []int32
		err         string // in the error; "" for none
	}{
		{"campaign", `"{""c"":""spring"",""id"":1}"`, []string{`{"c":"spring","id":1}`}, nil, ""},
		{"campaign", `a, "b, c" ,d`, []string{"a", "b, c", "d"}, nil, ""},
		{"campaign", `" spaced "`, []string{" spaced "}, nil, ""},
		{"campaign", `he said "hi"`, []string{`he said "hi"`}, nil, ""},
		{"campaign", `"a`, nil, nil, "not closed"},
		{"campaign", `"a"b`, nil, nil, "text after the quoted item"},
		{"campaign", `{"c":"spring","id":1}`, nil, nil, "text after the quoted item"}, // split at its commas as before; now refused, naming the quoting
		{"campaign", `"a"  x`, nil, nil, "ends at byte 2"},
		{"campaign", "\n\u00a0\"a,b\"\r", []string{"a,b"}, nil, ""},
		{"campaign", `""`, nil, nil, ""},
		{"code", `,131026, "130429"`, nil, []int32{131026, 130429}, ""},
		{"campaign", long(2048), []string{long(2048)}, nil, ""},
		{"campaign", long(2050), nil, nil, "longer than 2048 bytes"},
		{"template", long(300), nil, nil, "longer than 256 bytes"},
	} {
		q, err := parseQuery(failures, url.Values{c.name: {c.value}}, now)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s=%s: %v; want an error saying %q", c.name, c.value, err, c.err)
			}
		case err != nil:
			t.Errorf("%s=%s: %v", c.name, c.value, err)
		case !slices.Equal(q.Campaigns, c.campaigns) || !slices.Equal(q.Codes, c.codes):
			t.Errorf("%s=%s: campaigns %q, codes %v; want %q, %v", c.name, c.value, q.Campaigns, q.Codes, c.campaigns, c.codes)
		}
	}
}

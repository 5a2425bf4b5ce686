package api

import (
	"fmt"
	"net/url"
	"reflect"
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

package api

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// Each entry of the dimensions table is whole: a filter has a parameter
// that parses into the Query and a condition on its column; a group_by
// value a column and a field of the row; the funnel's by values their
// places; a tenant one column of WABAs and one of numbers. The orders of
// the API's lists stay those it has always given.
func TestDimensionsTable(t *testing.T) {
	if got, want := groupByNames(), []string{"code", "class", "number", "waba", "template", "campaign", "origin"}; !slices.Equal(got, want) {
		t.Errorf("group_by %v, want %v", got, want)
	}
	if got, want := byNames(), []string{"campaign", "template", "number", "waba", "total"}; !slices.Equal(got, want) {
		t.Errorf("by %v, want %v", got, want)
	}
	for r, want := range map[string]string{
		"errors":  "from to phone_number_id waba_id template campaign code class origin group_by step limit",
		"funnel":  "from to phone_number_id waba_id template campaign by limit",
		"numbers": "from to phone_number_id waba_id limit",
	} {
		for _, rt := range routes {
			if rt.Name == r {
				if got := strings.ReplaceAll(acceptedNames(rt.Params), ", ", " "); got != want {
					t.Errorf("%s accepts %s, want %s", r, got, want)
				}
			}
		}
	}
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	wabas, numbers, bys := 0, 0, map[int]bool{}
	for i := range dimensions {
		d := &dimensions[i]
		if d.Name == "" || d.Column == "" {
			t.Errorf("%+v: no name or column", d)
		}
		switch d.Tenant {
		case tenantWaba:
			wabas++
		case tenantNumber:
			numbers++
		}
		if d.By > 0 {
			if bys[d.By] || d.Lifecycle == "" {
				t.Errorf("%s: by place %d taken, or no column in the funnel at query time", d.Name, d.By)
			}
			bys[d.By] = true
		}
		if d.GroupBy && d.scan == nil {
			t.Errorf("%s: a group_by value without a field in the row", d.Name)
		}
		if d.Filters == 0 {
			continue
		}
		if d.Param.Name == "" || d.Param.set == nil || (d.where == nil && d.Param.values == nil) {
			t.Errorf("%s: a filter without a parameter, or a parameter without a place in the Query or a condition", d.Name)
			continue
		}
		// A value of the filter reaches its condition, with one argument
		// per value or the values in the SQL.
		v := "x"
		switch d.Param.Kind {
		case kindInts:
			v = "131026"
		case kindEnum, kindEnums:
			v = d.Param.Enum[0]
		}
		q, err := parseQuery([]param{d.Param}, url.Values{d.Param.Name: {v}}, now)
		if err != nil {
			t.Errorf("%s=%s: %v", d.Param.Name, v, err)
			continue
		}
		var w where
		d.filter(&w, "col", q)
		if len(w.conds) != 1 || !strings.Contains(w.conds[0], "col") {
			t.Errorf("%s=%s: conditions %q", d.Param.Name, v, w.conds)
		}
		var none where
		d.filter(&none, "col", Query{})
		if len(none.conds) != 0 {
			t.Errorf("%s without values: conditions %q", d.Param.Name, none.conds)
		}
	}
	for i := 1; i <= len(bys); i++ {
		if !bys[i] {
			t.Errorf("no by value in place %d of %d", i, len(bys))
		}
	}
	if wabas != 1 || numbers != 1 {
		t.Errorf("%d WABA and %d number dimensions for tenants, want one each", wabas, numbers)
	}
}

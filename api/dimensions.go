package api

import (
	"sort"
	"strconv"

	"github.com/wahook/wahook/schema"
)

// dimension is one thing the reports filter and group by: a number, a
// WABA, a template, a campaign, an error code, ... The reports read the
// table below for their query parameters (the filters, group_by's and
// by's values), their SQL (the columns, the conditions, the tenant's
// scope) and the fields of their answers, so that a new dimension is one
// entry there.
type dimension struct {
	// Name is its value in the failures' group_by and the funnel's by.
	Name string
	// Param is its filter's query parameter (Name "": it has none); its
	// set stores the parsed values in the Query.
	Param param
	// Filters are the reports that take its filter. A route's parameters
	// are from and to, the filters it shares with other reports, then its
	// own (in the table's order), then the route's others (reportParams).
	Filters reportSet

	// Column is its column in failures_by_minute and funnel_messages.
	Column string
	// GroupBy makes it a value of the failures' group_by, selected as
	// Expr (default: Column) and set in each row by scan.
	GroupBy bool
	Expr    string
	// By is its place among the values of the funnel's by (1 first; 0:
	// the funnel is not by it), whose order the API has always given.
	By int
	// Lifecycle is its column in the funnel resolved at query time
	// (funnelLive): a column of message_lifecycle's sorting key when
	// LifecycleKey, filtered before the messages are merged, else one of
	// the merged messages'.
	Lifecycle    string
	LifecycleKey bool
	// Tenant is its part in a scoped token's condition (scopeCond).
	Tenant tenantPart

	// where adds the condition of q's values on the column col.
	where func(w *where, col string, q Query)
	// scan is a fresh destination for its column in a failures row, and
	// what sets the row's fields from it.
	scan func() (any, func(r *FailureRow))
}

// reportSet is a set of the reports that take a dimension's filter.
type reportSet uint8

const (
	inFailures reportSet = 1 << iota
	inFunnel
	inNumbers
)

// tenantPart is what a dimension is to a scoped token.
type tenantPart int

const (
	tenantNone   tenantPart = iota
	tenantWaba              // the tenant's WABAs
	tenantNumber            // the tenant's numbers, for the rows without a WABA (send results)
)

// dimensions are the reports' dimensions, in the order of group_by's
// values.
var dimensions = []dimension{
	{
		Name: "code", Column: "code", GroupBy: true, Filters: inFailures,
		Param: param{Name: "code", Kind: kindInts, Doc: "Meta error codes", set: func(q *Query, vs []string) error {
			for _, v := range vs {
				n, err := strconv.ParseInt(v, 10, 32)
				if err != nil {
					return BadParameter("code", "%q is not an integer error code", v)
				}
				q.Codes = append(q.Codes, int32(n))
			}
			return nil
		}},
		where: func(w *where, col string, q Query) {
			if len(q.Codes) > 0 {
				w.add(col + " IN (" + joinInts(q.Codes) + ")")
			}
		},
		scan: func() (any, func(r *FailureRow)) {
			var code int32
			return &code, func(r *FailureRow) {
				e, _ := schema.LookupError(code)
				r.Code, r.Title, r.Class, r.Verdict, r.Retryable = &code, e.Title, e.Class, e.Verdict, &e.Retryable
			}
		},
	},
	{
		// The class is the code's (schema's catalogue).
		Name: "class", Column: "code", GroupBy: true, Expr: classExpr("code") + " AS class", Filters: inFailures,
		Param: param{Name: "class", Kind: kindEnums, Doc: "error classes", Enum: classNames(), set: func(q *Query, vs []string) error {
			for _, v := range vs {
				q.Classes = append(q.Classes, schema.ErrorClass(v))
			}
			return nil
		}},
		where: func(w *where, col string, q Query) { classCodes(w, col, q.Classes) },
		scan: func() (any, func(r *FailureRow)) {
			var class string
			return &class, func(r *FailureRow) {
				r.Class = schema.ErrorClass(class)
				if r.Verdict == "" {
					r.Verdict = schema.ClassVerdict(r.Class)
				}
			}
		},
	},
	{
		Name: "number", Column: "phone_number_id", GroupBy: true, By: 3, Lifecycle: "phone_number_id", LifecycleKey: true,
		Tenant: tenantNumber, Filters: inFailures | inFunnel | inNumbers,
		Param: stringsParam("phone_number_id", "business phone number ids (repeat or comma-separate)", func(q *Query) *[]string { return &q.PhoneNumberIDs }),
		scan:  stringField(func(r *FailureRow, v *string) { r.PhoneNumberID = v }),
	},
	{
		Name: "waba", Column: "waba_id", GroupBy: true, By: 4, Lifecycle: "m_waba",
		Tenant: tenantWaba, Filters: inFailures | inFunnel | inNumbers,
		Param: stringsParam("waba_id", "WhatsApp Business Account ids", func(q *Query) *[]string { return &q.WabaIDs }),
		scan:  stringField(func(r *FailureRow, v *string) { r.WabaID = v }),
	},
	{
		Name: "template", Column: "template", GroupBy: true, By: 2, Lifecycle: "m_template", Filters: inFailures | inFunnel,
		Param: stringsParam("template", "template names", func(q *Query) *[]string { return &q.Templates }),
		scan:  stringField(func(r *FailureRow, v *string) { r.Template = v }),
	},
	{
		Name: "campaign", Column: "campaign", GroupBy: true, By: 1, Lifecycle: "m_campaign", Filters: inFailures | inFunnel,
		Param: campaignParam,
		scan:  stringField(func(r *FailureRow, v *string) { r.Campaign = v }),
	},
	{
		Name: "origin", Column: "origin", GroupBy: true, Filters: inFailures,
		Param: param{Name: "origin", Kind: kindEnums, Doc: "where the error was reported: in a failed status, at the value level of a webhook, in an inbound message, in a history sync, in a call, in a message echo (sent from the Business app), or in a send result",
			Enum: []string{schema.OriginStatus, schema.OriginValue, schema.OriginInbound, schema.OriginHistory, schema.OriginCall, schema.OriginEcho, schema.OriginSendResult},
			set:  func(q *Query, vs []string) error { q.Origins = vs; return nil }},
		where: func(w *where, col string, q Query) { w.in(col, q.Origins) },
		scan:  stringField(func(r *FailureRow, v *string) { r.Origin = *v }),
	},
	{
		// The funnel's one row of every message.
		Name: "total", Column: "''", By: 5, Lifecycle: "''",
	},
}

// campaignParam is the campaign filter: a biz_opaque_callback_data is up to
// 512 characters (2,048 bytes of UTF-8), often JSON with commas of its own
// (an item in double quotes keeps them: splitList).
var campaignParam = func() param {
	p := stringsParam("campaign", "campaigns: the `biz_opaque_callback_data` the message was sent with (one with commas in double quotes, a quote in it doubled, as in CSV)", func(q *Query) *[]string { return &q.Campaigns })
	p.MaxLen = 2048
	return p
}()

// stringsParam is the filter of a dimension of strings, kept in the
// Query's field that field points to; its where is "column IN (values)".
func stringsParam(name, doc string, field func(q *Query) *[]string) param {
	return param{Name: name, Kind: kindStrings, Doc: doc, values: field,
		set: func(q *Query, vs []string) error { *field(q) = vs; return nil }}
}

// stringField scans a string column into a failures row's field.
func stringField(set func(r *FailureRow, v *string)) func() (any, func(r *FailureRow)) {
	return func() (any, func(r *FailureRow)) {
		var v string
		return &v, func(r *FailureRow) { set(r, &v) }
	}
}

// dimensionNamed is the dimension of a group_by or by value (parsing has
// checked it against their enums).
func dimensionNamed(name string) *dimension {
	for i := range dimensions {
		if dimensions[i].Name == name {
			return &dimensions[i]
		}
	}
	panic("api: no dimension " + name)
}

// filter adds the condition of q's values of d on the column col to w.
func (d *dimension) filter(w *where, col string, q Query) {
	switch {
	case d.where != nil:
		d.where(w, col, q)
	case d.Param.values != nil:
		w.in(col, *d.Param.values(&q))
	}
}

// groupExpr is its expression in the failures' SELECT.
func (d *dimension) groupExpr() string {
	if d.Expr != "" {
		return d.Expr
	}
	return d.Column
}

func (d *dimension) column() string    { return d.Column }
func (d *dimension) lifecycle() string { return d.Lifecycle }

// filterDimensions are the dimensions whose filters report r takes: those
// it shares with other reports, then its own, each in the table's order.
func filterDimensions(r reportSet) []*dimension {
	var out []*dimension
	for _, shared := range []bool{true, false} {
		for i := range dimensions {
			d := &dimensions[i]
			if d.Filters&r != 0 && (d.Filters != r) == shared {
				out = append(out, d)
			}
		}
	}
	return out
}

// reportParams are the parameters of report r: from, to, its filters
// (filterDimensions), then extra.
func reportParams(r reportSet, extra ...param) []param {
	ps := []param{pFrom, pTo}
	for _, d := range filterDimensions(r) {
		ps = append(ps, d.Param)
	}
	return append(ps, extra...)
}

// groupByNames are the values of the failures' group_by, in the table's
// order.
func groupByNames() []string {
	var out []string
	for _, d := range dimensions {
		if d.GroupBy {
			out = append(out, d.Name)
		}
	}
	return out
}

// byNames are the values of the funnel's by, in their places (By).
func byNames() []string {
	var ds []dimension
	for _, d := range dimensions {
		if d.By > 0 {
			ds = append(ds, d)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].By < ds[j].By })
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// scopeColumns are the columns of a tenant's WABAs and numbers, by col.
func scopeColumns(col func(d *dimension) string) (waba, number string) {
	for i := range dimensions {
		switch d := &dimensions[i]; d.Tenant {
		case tenantWaba:
			waba = col(d)
		case tenantNumber:
			number = col(d)
		}
	}
	return waba, number
}

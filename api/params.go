package api

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/wahook/wahook/schema"
)

// paramKind is how a query parameter is written.
type paramKind int

const (
	kindTime    paramKind = iota // RFC 3339, a date (UTC) or Unix seconds
	kindStrings                  // repeatable, or comma-separated
	kindInts                     // repeatable, or comma-separated integers
	kindEnum                     // one of Enum
	kindEnums                    // several of Enum, repeatable or comma-separated
	kindInt                      // one integer
	kindString                   // one string
)

// param describes one query parameter; it drives both parsing and the
// OpenAPI document.
type param struct {
	Name     string
	Kind     paramKind
	Doc      string
	Enum     []string
	Default  string
	Required bool
	Min, Max int // kindInt
	// MaxLen bounds each value of a string, in bytes (0: 256).
	MaxLen int

	// set stores the parsed values (kinds other than time and int) in
	// the Query; values is the Query's field of a filter of strings.
	set    func(q *Query, vs []string) error
	values func(q *Query) *[]string
}

// The parameters, shared by the routes that accept them.
var (
	pFrom = param{Name: "from", Kind: kindTime, Doc: "start of the range, inclusive: RFC 3339, a date (UTC) or Unix seconds; default: 24 hours before `to`"}
	pTo   = param{Name: "to", Kind: kindTime, Doc: "end of the range, exclusive; default: now"}

	// The filters are the dimensions' (dimensions.go).
	pGroupBy = param{Name: "group_by", Kind: kindEnums, Default: "code", Doc: "dimensions of the answer", Enum: groupByNames(),
		set: func(q *Query, vs []string) error { q.GroupBy = dedupe(vs); return nil }}
	pStep = param{Name: "step", Kind: kindEnum, Doc: "split the range into buckets of this size (empty: one bucket)", Enum: []string{"1m", "1h", "1d"}, set: setStep}
	pBy   = param{Name: "by", Kind: kindEnum, Default: "campaign", Doc: "what the funnel is per", Enum: byNames(),
		set: func(q *Query, vs []string) error { q.By = vs[0]; return nil }}
	pTStep = param{Name: "step", Kind: kindEnum, Default: "1m", Doc: "bucket size", Enum: []string{"1s", "1m"}, set: setStep}
	pOne   = param{Name: "phone_number_id", Kind: kindString, Required: true, Doc: "the business phone number id",
		set: func(q *Query, vs []string) error { q.PhoneNumberIDs = vs; return nil }}
	pLimit  = param{Name: "limit", Kind: kindInt, Default: "1000", Min: 1, Max: 10000, Doc: "most rows in the answer (totals and shares still cover every row)"}
	pRows   = param{Name: "limit", Kind: kindInt, Default: "1000", Min: 1, Max: 10000, Doc: "most rows in the answer, those with the most messages (truncated says when more were left out)"}
	pRecent = param{Name: "limit", Kind: kindInt, Default: "20", Min: 1, Max: 1000, Doc: "most recent items listed"}
)

func setStep(q *Query, vs []string) error { q.Step = vs[0]; return nil }

func classNames() []string {
	var out []string
	for _, c := range schema.ErrorClasses() {
		out = append(out, string(c))
	}
	return out
}

// Query is a parsed request: the time range and the filters. Each route
// reads what it accepts; parse refuses any parameter a route does not.
type Query struct {
	From, To time.Time
	// ToNow is set when the request gave no end: it is now.
	ToNow bool

	PhoneNumberIDs []string
	WabaIDs        []string
	Templates      []string
	Campaigns      []string
	Codes          []int32
	Classes        []schema.ErrorClass
	Origins        []string

	GroupBy []string // failures
	Step    string   // failures: "", 1m, 1h, 1d; throughput: 1s, 1m
	By      string   // funnel
	Limit   int

	// A scoped token's tenant (tenancy.go): its WABAs and their numbers.
	scoped       bool
	scopeWabas   []string
	scopeNumbers []string
}

// maxValues bounds the values of one list parameter.
const maxValues = 1000

// maxRange bounds the time range of a query.
const maxRange = 1096 * 24 * time.Hour // three years

// parseQuery reads values against the parameters of r; now is the default
// end of the range.
func parseQuery(params []param, values url.Values, now time.Time) (Query, error) {
	var q Query
	known := map[string]param{}
	for _, p := range params {
		known[p.Name] = p
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := known[name]; !ok {
			return q, BadParameter(name, "unknown parameter; this route accepts %s", acceptedNames(params))
		}
	}
	// An empty value is as if the parameter were absent, for every kind:
	// step= is one bucket, limit= the default, as an empty item of a list
	// (code=,131026) is no value (a form sends its empty fields so).
	get := func(p param) ([]string, error) {
		var out []string
		for _, v := range values[p.Name] {
			if p.Kind == kindStrings || p.Kind == kindInts || p.Kind == kindEnums {
				items, err := splitList(v)
				if err != nil {
					return nil, BadParameter(p.Name, "%v", err)
				}
				for _, s := range items {
					if s != "" {
						out = append(out, s)
					}
				}
				continue
			}
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		if len(out) == 0 && p.Default != "" {
			out = strings.Split(p.Default, ",")
		}
		return out, nil
	}
	q.To, q.ToNow = now.UTC().Truncate(time.Second), true
	for _, p := range params {
		vs, err := get(p)
		if err != nil {
			return q, err
		}
		if p.Required && len(vs) == 0 {
			return q, BadParameter(p.Name, "required")
		}
		if len(vs) == 0 {
			continue
		}
		if len(vs) > maxValues {
			return q, BadParameter(p.Name, "%d values; at most %d", len(vs), maxValues)
		}
		if (p.Kind != kindStrings && p.Kind != kindInts && p.Kind != kindEnums) && len(vs) > 1 {
			return q, BadParameter(p.Name, "given %d times; give it once", len(vs))
		}
		switch p.Kind {
		case kindTime:
			t, err := parseTime(vs[0])
			if err != nil {
				return q, BadParameter(p.Name, "%v", err)
			}
			if p.Name == "from" {
				q.From = t
			} else {
				q.To, q.ToNow = t, false
			}
		case kindEnum, kindEnums:
			for _, v := range vs {
				if !slices.Contains(p.Enum, v) {
					return q, BadParameter(p.Name, "%q is not one of %s", v, strings.Join(p.Enum, ", "))
				}
			}
			if err := p.set(&q, vs); err != nil {
				return q, err
			}
		case kindInts:
			if err := p.set(&q, vs); err != nil {
				return q, err
			}
		case kindInt:
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < p.Min || n > p.Max {
				return q, BadParameter(p.Name, "%q is not an integer from %d to %d", vs[0], p.Min, p.Max)
			}
			q.Limit = n
		case kindStrings, kindString:
			maxLen := p.MaxLen
			if maxLen == 0 {
				maxLen = 256
			}
			for _, v := range vs {
				if len(v) > maxLen {
					return q, BadParameter(p.Name, "value longer than %d bytes", maxLen)
				}
			}
			if err := p.set(&q, vs); err != nil {
				return q, err
			}
		}
	}
	if _, ok := known["from"]; ok {
		if q.From.IsZero() {
			q.From = q.To.Add(-24 * time.Hour)
		}
		if !q.From.Before(q.To) {
			return q, BadParameter("from", "must be before to (%s)", q.To.Format(time.RFC3339))
		}
		if q.To.Sub(q.From) > maxRange {
			return q, BadParameter("from", "range longer than %d days", int(maxRange/(24*time.Hour)))
		}
	}
	return q, nil
}

func acceptedNames(params []param) string {
	var names []string
	for _, p := range params {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "no parameters"
	}
	return strings.Join(names, ", ")
}

// parseTime reads RFC 3339, a date (UTC midnight) or Unix seconds.
func parseTime(s string) (time.Time, error) {
	// A time ClickHouse's DateTime cannot hold (before 1970, after 2106)
	// is refused: the zero time would silently become the default range.
	inRange := func(t time.Time) bool { return t.Unix() > 0 && t.Unix() < 1<<32 }
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !inRange(t) {
			return time.Time{}, errBadTime(s)
		}
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		if !inRange(t) {
			return time.Time{}, errBadTime(s)
		}
		return t, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && n < 1<<32 {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, errBadTime(s)
}

type errBadTime string

func (e errBadTime) Error() string {
	return strconv.Quote(string(e)) + " is not a time between 1970 and 2106: give RFC 3339 (2026-03-14T09:00:00Z), a date (2026-03-14) or Unix seconds"
}

func dedupe(vs []string) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// splitList reads one value of a list parameter: items separated by
// commas, each trimmed of spaces. An item in double quotes is taken whole,
// commas and spaces in it included, with "" for a quote in it, as in CSV:
// a campaign (biz_opaque_callback_data) is often JSON, with commas of its
// own, and split at them it matched nothing. A quote elsewhere in an item
// is taken as it is. The byte offsets of its errors are of the value as
// decoded.
func splitList(v string) ([]string, error) {
	var out []string
	for i := 0; ; {
		i += len(v[i:]) - len(strings.TrimLeftFunc(v[i:], unicode.IsSpace))
		if i < len(v) && v[i] == '"' {
			var b strings.Builder
			j := i + 1
			for {
				k := strings.IndexByte(v[j:], '"')
				if k < 0 {
					return nil, fmt.Errorf("a quote opened at byte %d is not closed", i)
				}
				b.WriteString(v[j : j+k])
				j += k + 1
				if j < len(v) && v[j] == '"' {
					b.WriteByte('"')
					j++
					continue
				}
				break
			}
			closed := j - 1
			j += len(v[j:]) - len(strings.TrimLeftFunc(v[j:], unicode.IsSpace))
			if j < len(v) && v[j] != ',' {
				return nil, fmt.Errorf("text after the quoted item that ends at byte %d (a quote in an item is written \"\" inside quotes)", closed)
			}
			out = append(out, b.String())
			if j == len(v) {
				return out, nil
			}
			i = j + 1
			continue
		}
		k := strings.IndexByte(v[i:], ',')
		if k < 0 {
			return append(out, strings.TrimSpace(v[i:])), nil
		}
		out = append(out, strings.TrimSpace(v[i:i+k]))
		i += k + 1
	}
}

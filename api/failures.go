package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// FailureRow is one group of the failure distribution. Only the fields of
// the requested dimensions are set; title, verdict and retryable come with
// the code (or the class).
type FailureRow struct {
	Time          *time.Time        `json:"time,omitempty"`
	Code          *int32            `json:"code,omitempty"`
	Title         string            `json:"title,omitempty"`
	Class         schema.ErrorClass `json:"class,omitempty"`
	Verdict       schema.Verdict    `json:"verdict,omitempty"`
	Retryable     *bool             `json:"retryable,omitempty"`
	PhoneNumberID *string           `json:"phone_number_id,omitempty"`
	WabaID        *string           `json:"waba_id,omitempty"`
	Template      *string           `json:"template,omitempty"`
	Campaign      *string           `json:"campaign,omitempty"`
	Origin        string            `json:"origin,omitempty"`
	Failures      uint64            `json:"failures"`
	Share         float64           `json:"share"` // of the failures of the same bucket (the whole range without step)
}

// Failures is the failure distribution.
type Failures struct {
	From      time.Time    `json:"from"`
	To        time.Time    `json:"to"`
	GroupBy   []string     `json:"group_by"`
	Step      string       `json:"step,omitempty"`
	Total     uint64       `json:"total"`
	Truncated bool         `json:"truncated"` // more rows than limit; total and shares cover them all
	Rows      []FailureRow `json:"rows"`
}

// failureDims maps group_by values to columns of failures_by_minute.
var failureDims = map[string]string{
	"code":     "code",
	"number":   "phone_number_id",
	"waba":     "waba_id",
	"template": "template",
	"campaign": "campaign",
	"origin":   "origin",
}

// stepExpr is the bucket of a minute column for a step.
func stepExpr(step, col string) string {
	switch step {
	case "1m":
		return col
	case "1h":
		return "toStartOfHour(" + col + ")"
	case "1d":
		return "toDateTime(toStartOfDay(" + col + "))"
	}
	return ""
}

func stepDuration(step string) time.Duration {
	switch step {
	case "1s":
		return time.Second
	case "1m":
		return time.Minute
	case "1h":
		return time.Hour
	case "1d":
		return 24 * time.Hour
	}
	return 0
}

// Failures counts error occurrences by the dimensions of q.GroupBy, from
// failures_by_minute (every error of a failed status, of a value-level
// errors array and of an inbound message), each occurrence once however
// often it was inserted. The range is taken in whole minutes: from and to
// are rounded down to the minute, except a default end (now), which takes
// the minute under way in.
func (s *Store) Failures(ctx context.Context, q Query) (*Failures, error) {
	from, to := q.From.Truncate(time.Minute), q.To.Truncate(time.Minute)
	if q.ToNow && !to.Equal(q.To) {
		// Without an end the range runs to now: the minute under way is
		// in, so that an error stamped when it was received (value-level
		// errors have no time of their own) shows at once.
		to = to.Add(time.Minute)
	}
	out := &Failures{From: from, To: to, GroupBy: q.GroupBy, Step: q.Step, Rows: []FailureRow{}}
	if !from.Before(to) {
		return out, nil
	}
	var cols []string
	if q.Step != "" {
		cols = append(cols, stepExpr(q.Step, "minute")+" AS t")
	}
	for _, d := range q.GroupBy {
		if d == "class" {
			cols = append(cols, classExpr("code")+" AS class")
			continue
		}
		cols = append(cols, failureDims[d])
	}
	var w where
	w.add("minute >= toDateTime(?) AND minute < toDateTime(?)", unix(from), unix(to))
	w.in("phone_number_id", q.PhoneNumberIDs)
	w.in("waba_id", q.WabaIDs)
	w.in("template", q.Templates)
	w.in("campaign", q.Campaigns)
	w.in("origin", q.Origins)
	if len(q.Codes) > 0 {
		w.add("code IN (" + joinInts(q.Codes) + ")")
	}
	classCodes(&w, "code", q.Classes)
	scopeCond(&w, q, "waba_id", "phone_number_id")

	keys := make([]string, 0, len(cols))
	for _, c := range cols {
		if i := strings.LastIndex(c, " AS "); i >= 0 {
			c = c[i+4:]
		}
		keys = append(keys, c)
	}
	sel := append(append([]string{}, cols...), "uniqExactMerge(error_keys) AS failures")
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(sel, ", "), s.table("failures_by_minute"), w.sql())
	order := []string{}
	if q.Step != "" {
		order = append(order, "t")
	}
	order = append(order, "failures DESC")
	order = append(order, keys...)
	if len(keys) > 0 {
		sql += " GROUP BY " + strings.Join(keys, ", ")
	}
	sql += " ORDER BY " + strings.Join(order, ", ")

	rows, err := s.conn.Query(ctx, sql, w.args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	bucketTotal := map[time.Time]uint64{}
	for rows.Next() {
		var r FailureRow
		var t time.Time
		var code int32
		var class, number, waba, template, campaign, origin string
		dest := []any{}
		if q.Step != "" {
			dest = append(dest, &t)
		}
		for _, d := range q.GroupBy {
			switch d {
			case "code":
				dest = append(dest, &code)
			case "class":
				dest = append(dest, &class)
			case "number":
				dest = append(dest, &number)
			case "waba":
				dest = append(dest, &waba)
			case "template":
				dest = append(dest, &template)
			case "campaign":
				dest = append(dest, &campaign)
			case "origin":
				dest = append(dest, &origin)
			}
		}
		dest = append(dest, &r.Failures)
		if err := rows.Scan(dest...); err != nil {
			return nil, queryError(ctx, err)
		}
		if q.Step != "" {
			t = t.UTC()
			r.Time = &t
		}
		for _, d := range q.GroupBy {
			switch d {
			case "code":
				e, _ := schema.LookupError(code)
				r.Code, r.Title, r.Class, r.Verdict, r.Retryable = &code, e.Title, e.Class, e.Verdict, &e.Retryable
			case "class":
				r.Class = schema.ErrorClass(class)
				if r.Verdict == "" {
					r.Verdict = schema.ClassVerdict(r.Class)
				}
			case "number":
				r.PhoneNumberID = &number
			case "waba":
				r.WabaID = &waba
			case "template":
				r.Template = &template
			case "campaign":
				r.Campaign = &campaign
			case "origin":
				r.Origin = origin
			}
		}
		out.Total += r.Failures
		bucketTotal[t] += r.Failures
		out.Rows = append(out.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(ctx, err)
	}
	for i := range out.Rows {
		var t time.Time
		if p := out.Rows[i].Time; p != nil {
			t = *p
		}
		if n := bucketTotal[t]; n > 0 {
			out.Rows[i].Share = float64(out.Rows[i].Failures) / float64(n)
		}
	}
	if q.Limit > 0 && len(out.Rows) > q.Limit {
		out.Rows, out.Truncated = out.Rows[:q.Limit], true
	}
	return out, nil
}

package api

import (
	"context"
	"fmt"
	"strconv"
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

// stepExpr is the bucket of a minute column for a step.
func stepExpr(step, col string) string {
	switch step {
	case "1m":
		return col
	case "1h", "1d":
		// UTC hours and days by arithmetic: toStartOfHour and
		// toStartOfDay follow the server's time zone, and days would
		// start at its midnight.
		n := strconv.Itoa(int(stepDuration(step) / time.Second))
		return "toDateTime(intDiv(toUInt32(" + col + "), " + n + ") * " + n + ")"
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
	if q.Step != "" {
		// Each bucket keeps a total while the rows stream in.
		if n := to.Sub(from) / stepDuration(q.Step); n > maxBuckets {
			return nil, BadParameter("step", "%s buckets over this range make %d; at most %d: a larger step or a shorter range", q.Step, n, maxBuckets)
		}
	}
	var cols []string
	if q.Step != "" {
		cols = append(cols, stepExpr(q.Step, "minute")+" AS t")
	}
	groups := make([]*dimension, len(q.GroupBy))
	for i, name := range q.GroupBy {
		groups[i] = dimensionNamed(name)
		cols = append(cols, groups[i].groupExpr())
	}
	var w where
	w.add("minute >= toDateTime(?) AND minute < toDateTime(?)", unix(from), unix(to))
	for _, d := range filterDimensions(inFailures) {
		d.filter(&w, d.Column, q)
	}
	scopeCond(&w, q, (*dimension).column)

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
		dest := []any{}
		if q.Step != "" {
			dest = append(dest, &t)
		}
		sets := make([]func(r *FailureRow), len(groups))
		for i, d := range groups {
			var v any
			v, sets[i] = d.scan()
			dest = append(dest, v)
		}
		dest = append(dest, &r.Failures)
		if err := rows.Scan(dest...); err != nil {
			return nil, queryError(ctx, err)
		}
		if q.Step != "" {
			t = t.UTC()
			r.Time = &t
		}
		// In the order of group_by: a code sets its class and verdict over
		// a class's.
		for _, set := range sets {
			set(&r)
		}
		out.Total += r.Failures
		bucketTotal[t] += r.Failures
		// Past the limit a row counts in the totals and shares only: the
		// answer's memory is bounded by the limit, not by the range.
		if q.Limit > 0 && len(out.Rows) >= q.Limit {
			out.Truncated = true
			continue
		}
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
	return out, nil
}

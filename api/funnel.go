package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/schema"
)

// Durations are p50 and p95 of a time in seconds, over the messages that
// have both ends; null when none has.
type Durations struct {
	P50     *float64 `json:"p50"`
	P95     *float64 `json:"p95"`
	Samples uint64   `json:"samples"`
}

// FunnelRow is the funnel of one campaign, template, number or WABA.
//
// A message counts once per recipient (each group participant apart), in
// the range when its first status is. One that ever failed counts as failed
// and in no other stage; a later stage implies the earlier ones (a read
// message was delivered even if its delivered status was lost).
type FunnelRow struct {
	Key       string    `json:"key"`
	Messages  uint64    `json:"messages"`
	Sent      uint64    `json:"sent"`
	Delivered uint64    `json:"delivered"`
	Read      uint64    `json:"read"`
	Failed    uint64    `json:"failed"`
	ToDeliver Durations `json:"sent_to_delivered_seconds"`
	ToRead    Durations `json:"sent_to_read_seconds"`
}

// Funnel is the delivery funnel.
type Funnel struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	By   string    `json:"by"`
	// AsOf is the funnel resolver's watermark: every status inserted before
	// it is counted (later ones after its next pass, a few seconds on). Null
	// when no resolver has completed a pass on this database: the funnel is
	// then resolved at query time, exact now but slow on large data.
	AsOf *time.Time  `json:"as_of"`
	Rows []FunnelRow `json:"rows"`
	// Truncated is set when there were more rows than limit: those with
	// the fewest messages were left out.
	Truncated bool `json:"truncated"`
}

// nz is a DateTime as seconds, or the largest UInt32 when it is zero (the
// status never came), so that least() skips it.
func nz(col string) string {
	return fmt.Sprintf("if(%[1]s > toDateTime(0), toUInt32(%[1]s), %[2]d)", col, schema.FunnelNever)
}

// Funnel computes the delivery funnel, with the median and 95th percentile
// (exact, nearest rank: the smallest value with at least that share of the
// values at or below it) of the time from sent to delivered and to read. It
// sums funnel_messages, which the funnel resolver (processor/funnel) keeps
// resolved; before the resolver's first pass it resolves message_lifecycle
// at query time.
func (s *Store) Funnel(ctx context.Context, q Query) (*Funnel, error) {
	wm, ok, err := funnelWatermark(ctx, s.conn, s.db)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == unknownTable {
		// A database migrated by an older wahook: no resolver yet.
		return s.funnelLive(ctx, q)
	}
	if err != nil {
		return nil, queryError(ctx, err)
	}
	if !ok {
		return s.funnelLive(ctx, q)
	}
	out := &Funnel{From: q.From, To: q.To, By: q.By, AsOf: &wm, Rows: []FunnelRow{}}
	// Whole hours of the range come from the hourly sums (kinds 1 to 3),
	// the parts of hours at its ends from the message rows.
	from, to := uint32(q.From.Unix()), uint32(q.To.Unix())
	const sums = schema.FunnelSumSeconds
	h0, h1 := (from+sums-1)/sums*sums, to/sums*sums
	var filters where
	for _, d := range filterDimensions(inFunnel) {
		d.filter(&filters, d.Column, q)
	}
	scopeCond(&filters, q, (*dimension).column)
	key := dimensionNamed(q.By).Column
	// Every row counts n times (n is -1 for a row the resolver took back),
	// in the sums and as the weight of the quantiles: ClickHouse adds
	// weights as UInt64, so a -1 (toUInt64: 2^64-1) wraps around and cancels
	// its +1. A message row carries its counts and both durations; an
	// hourly counts row the counts; a duration row (kinds 2, 3) how many
	// messages (n) took that long.
	part := fmt.Sprintf(`SELECT %[1]s AS key, n_sent, n_delivered, n_read, n_failed, to_deliver, to_read,
           if(kind <= %[3]d, n, 0) AS m,
           if(kind <= %[3]d, n_to_deliver, 0) AS dn,
           if(kind <= %[3]d, n_to_read, 0) AS rn,
           multiIf(kind = %[4]d, n_to_deliver, kind = %[5]d, n, 0) AS dw,
           multiIf(kind = %[4]d, n_to_read, kind = %[6]d, n, 0) AS rw
    FROM %[2]s
    PREWHERE kind IN (%%s) AND first >= toDateTime(?) AND first < toDateTime(?)
    WHERE %[7]s`, key, s.table("funnel_messages"),
		schema.FunnelKindCounts, schema.FunnelKindMessage, schema.FunnelKindToDeliver, schema.FunnelKindToRead, filters.sql())
	// One part for each span, each read on its own (PREWHERE on its kinds
	// and times: the message rows of a part of an hour are found among
	// their day's by first alone).
	var parts []string
	var args []any
	span := func(kinds string, lo, hi uint32) {
		if lo < hi { // an empty part would still read its days' granules
			parts = append(parts, fmt.Sprintf(part, kinds))
			args = append(append(args, lo, hi), filters.args...)
		}
	}
	messageKinds, sumKinds := fmt.Sprint(schema.FunnelKindMessage), fmt.Sprintf("%d, %d, %d", schema.FunnelKindCounts, schema.FunnelKindToDeliver, schema.FunnelKindToRead)
	if h0 < h1 {
		span(messageKinds, from, h0)
		span(sumKinds, h0, h1)
		span(messageKinds, h1, to)
	} else {
		span(messageKinds, from, to)
	}
	if len(parts) == 0 {
		return out, nil // an empty range
	}
	sql := fmt.Sprintf(`
SELECT key,
       sum(m) AS messages, sum(n_sent), sum(n_delivered), sum(n_read), sum(n_failed),
       quantilesExactWeighted(0.5, 0.95)(to_deliver, toUInt64(dw)), sum(dn),
       quantilesExactWeighted(0.5, 0.95)(to_read, toUInt64(rw)), sum(rn)
FROM
(
    %s
)
GROUP BY key
HAVING messages != 0
ORDER BY messages DESC, key
%s`, strings.Join(parts, "\n    UNION ALL\n    "), limitAndOne(q))
	rows, err := s.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r FunnelRow
		var counts [7]int64
		var dq, rq []int32
		if err := rows.Scan(&r.Key, &counts[0], &counts[1], &counts[2], &counts[3], &counts[4], &dq, &counts[5], &rq, &counts[6]); err != nil {
			return nil, queryError(ctx, err)
		}
		// Negative only while a cut-short pass awaits its repair.
		u := func(i int) uint64 { return uint64(max(counts[i], 0)) }
		r.Messages, r.Sent, r.Delivered, r.Read, r.Failed = u(0), u(1), u(2), u(3), u(4)
		r.ToDeliver.Samples, r.ToRead.Samples = u(5), u(6)
		r.ToDeliver.set(floats(dq))
		r.ToRead.set(floats(rq))
		out.add(r, q)
	}
	return out.done(ctx, rows.Err(), q)
}

// add appends a row of the answer ("total" names the one row of by=total).
func (f *Funnel) add(r FunnelRow, q Query) {
	if q.By == "total" {
		r.Key = "total"
	}
	f.Rows = append(f.Rows, r)
}

// done returns the answer, cut to q's limit, once its rows are read. The
// queries ask for one row more than the limit, to know whether there are
// more: an answer of 50 rows over a month of campaigns (often one per
// message) held every one of them in the API's memory.
func (f *Funnel) done(ctx context.Context, err error, q Query) (*Funnel, error) {
	if err != nil {
		return nil, queryError(ctx, err)
	}
	if q.Limit > 0 && len(f.Rows) > q.Limit {
		f.Rows, f.Truncated = f.Rows[:q.Limit], true
	}
	return f, nil
}

// limitAndOne is the LIMIT clause of a query of q's rows, with one row more
// than q's limit (done); none without a limit.
func limitAndOne(q Query) string {
	if q.Limit <= 0 {
		return ""
	}
	return fmt.Sprintf("LIMIT %d", q.Limit+1)
}

// unknownTable is ClickHouse's UNKNOWN_TABLE.
const unknownTable = 60

func floats(v []int32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// funnelLive resolves every message of message_lifecycle at query time:
// the funnel before the resolver's first pass.
func (s *Store) funnelLive(ctx context.Context, q Query) (*Funnel, error) {
	out := &Funnel{From: q.From, To: q.To, By: q.By, Rows: []FunnelRow{}}
	var inner, outer where
	// A message's statuses sit in the months of their times: take the months
	// of the range with one on each side (early statuses of a message seen in
	// the range, which make it not first seen there; late ones of messages
	// first seen in it).
	inner.add("month >= toDate(?) AND month <= toDate(?)", monthStart(q.From).AddDate(0, -1, 0).Format("2006-01-02"),
		monthStart(q.To).AddDate(0, 1, 0).Format("2006-01-02"))
	outer.add("first >= ? AND first < ?", uint32(q.From.Unix()), uint32(q.To.Unix()))
	for _, d := range filterDimensions(inFunnel) {
		if d.LifecycleKey {
			d.filter(&inner, d.Lifecycle, q)
		} else {
			d.filter(&outer, d.Lifecycle, q)
		}
	}
	scopeCond(&outer, q, (*dimension).lifecycle)
	key := dimensionNamed(q.By).Lifecycle
	// done is whether a message reached delivered (or a later stage).
	sql := fmt.Sprintf(`
SELECT %[1]s AS key,
       count() AS messages,
       countIf(has_failed = 0) AS sent_count,
       countIf(has_failed = 0 AND delivered_t != %[9]d) AS delivered_count,
       countIf(has_failed = 0 AND read_t != %[9]d) AS read_count,
       countIf(has_failed = 1) AS failed_count,
       quantilesExactWeightedIf(0.5, 0.95)(toFloat64(delivered_t) - toFloat64(sent_t), 1, has_failed = 0 AND sent_t != %[9]d AND delivered_t != %[9]d AND delivered_t >= sent_t) AS dq,
       countIf(has_failed = 0 AND sent_t != %[9]d AND delivered_t != %[9]d AND delivered_t >= sent_t) AS dn,
       quantilesExactWeightedIf(0.5, 0.95)(toFloat64(read_t) - toFloat64(sent_t), 1, has_failed = 0 AND sent_t != %[9]d AND read_t != %[9]d AND read_t >= sent_t) AS rq,
       countIf(has_failed = 0 AND sent_t != %[9]d AND read_t != %[9]d AND read_t >= sent_t) AS rn
FROM
(
    SELECT phone_number_id, message_id, recipient_key,
           maxMerge(waba_id) AS m_waba,
           maxMerge(campaign) AS m_campaign,
           maxMerge(template) AS m_template,
           %[2]s AS sent_t,
           %[3]s AS delivered_t,
           %[4]s AS read_t,
           %[5]s AS first,
           maxMerge(failed) AS has_failed
    FROM %[6]s
    WHERE %[7]s
    GROUP BY phone_number_id, message_id, recipient_key
)
WHERE %[8]s
GROUP BY key
ORDER BY messages DESC, key
%[10]s`, key,
		nz("minIfMerge(sent_at)"),
		least(nz("minIfMerge(delivered_at)"), nz("minIfMerge(read_at)"), nz("minIfMerge(played_at)")),
		least(nz("minIfMerge(read_at)"), nz("minIfMerge(played_at)")),
		least("sent_t", "delivered_t", nz("minIfMerge(failed_at)")),
		s.table("message_lifecycle"), inner.sql(), outer.sql(), schema.FunnelNever, limitAndOne(q))
	rows, err := s.conn.Query(ctx, sql, append(inner.args, outer.args...)...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r FunnelRow
		var dq, rq []float64
		if err := rows.Scan(&r.Key, &r.Messages, &r.Sent, &r.Delivered, &r.Read, &r.Failed, &dq, &r.ToDeliver.Samples, &rq, &r.ToRead.Samples); err != nil {
			return nil, queryError(ctx, err)
		}
		r.ToDeliver.set(dq)
		r.ToRead.set(rq)
		out.add(r, q)
	}
	return out.done(ctx, rows.Err(), q)
}

func (d *Durations) set(q []float64) {
	if d.Samples == 0 || len(q) != 2 {
		return
	}
	d.P50, d.P95 = &q[0], &q[1]
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// funnelWatermark is the latest watermark of the funnel resolver: the
// funnel is exact up to it. ok is false while no pass has run.
func funnelWatermark(ctx context.Context, conn driver.Conn, db string) (time.Time, bool, error) {
	var w uint32
	var n uint64
	row := conn.QueryRow(ctx, fmt.Sprintf("SELECT toUInt32(max(watermark)), count() FROM %s.%s", db, schema.FunnelResolverTable))
	if err := row.Scan(&w, &n); err != nil {
		return time.Time{}, false, err
	}
	if n == 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(int64(w), 0).UTC(), true, nil
}

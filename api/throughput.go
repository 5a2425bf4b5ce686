package api

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ThroughputPoint is one bucket of a number's traffic. Buckets without
// traffic are left out.
type ThroughputPoint struct {
	Time        time.Time `json:"time"`
	Inbound     uint64    `json:"inbound"`
	Outbound    uint64    `json:"outbound"`
	MPS         float64   `json:"mps"` // (inbound + outbound) / bucket seconds
	TierMPS     int       `json:"tier_mps"`
	Utilization float64   `json:"utilization"` // mps / tier_mps
}

// Throughput is a number's messages per second over time, by Meta's
// timestamps: an outbound message once, at the first of its statuses that
// shows it was sent (sent, delivered, read or played), and every message
// the business sent from the Business app (echoes); an inbound message
// once, at its timestamp. Meta counts both against the tier.
type Throughput struct {
	PhoneNumberID   string            `json:"phone_number_id"`
	From            time.Time         `json:"from"`
	To              time.Time         `json:"to"`
	Step            string            `json:"step"`
	TierMPS         int               `json:"tier_mps"` // at to
	TierSource      string            `json:"tier_source"`
	Inbound         uint64            `json:"inbound"`
	Outbound        uint64            `json:"outbound"`
	AverageMPS      float64           `json:"average_mps"`
	PeakMPS         float64           `json:"peak_mps"`
	PeakTime        *time.Time        `json:"peak_time,omitempty"`
	PeakUtilization float64           `json:"peak_utilization"`
	Points          []ThroughputPoint `json:"points"`
}

// maxBuckets bounds the buckets of one throughput answer.
const maxBuckets = 86400

// Throughput computes the traffic of one number (q.PhoneNumberIDs[0]) in
// buckets of q.Step (1s or 1m).
func (s *Store) Throughput(ctx context.Context, q Query) (*Throughput, error) {
	step := stepDuration(q.Step)
	from, to := q.From.Truncate(step), q.To
	if n := to.Sub(from) / step; n > maxBuckets {
		hint := "shorten the range"
		if q.Step == "1s" {
			hint += " or use step=1m"
		}
		return nil, BadParameter("step", "%s buckets over this range make %d points; at most %d: %s", q.Step, n, maxBuckets, hint)
	}
	id := q.PhoneNumberIDs[0]
	out := &Throughput{PhoneNumberID: id, From: from, To: to, Step: q.Step, Points: []ThroughputPoint{}}
	nums, err := s.Numbers(ctx, Query{From: from, To: to, PhoneNumberIDs: []string{id}}, 0)
	if err != nil {
		return nil, err
	}
	st := &nums.Numbers[0]
	coexistence := st.TierSource == TierCoexistence
	out.TierMPS, out.TierSource = st.TierMPS, st.TierSource

	sec := uint32(step / time.Second)
	f, t := uint32(from.Unix()), uint32(to.Unix())
	buckets := map[uint32]*ThroughputPoint{}
	bucket := func(at uint32) *ThroughputPoint {
		p := buckets[at]
		if p == nil {
			p = &ThroughputPoint{Time: time.Unix(int64(at), 0).UTC()}
			buckets[at] = p
		}
		return p
	}
	count := func(sql string, args []any, add func(p *ThroughputPoint, n uint64)) error {
		rows, err := s.conn.Query(ctx, sql, args...)
		if err != nil {
			return queryError(ctx, err)
		}
		defer rows.Close()
		for rows.Next() {
			var at uint32
			var n uint64
			if err := rows.Scan(&at, &n); err != nil {
				return queryError(ctx, err)
			}
			add(bucket(at), n)
		}
		return queryError(ctx, rows.Err())
	}
	outbound := fmt.Sprintf(`
SELECT toUInt32(intDiv(first, %[1]d) * %[1]d) AS t, count()
FROM
(
    SELECT message_id, %[2]s AS first
    FROM %[3]s
    WHERE phone_number_id = ? AND month >= toDate(?) AND month <= toDate(?)
    GROUP BY message_id
)
WHERE first >= ? AND first < ?
GROUP BY t`, sec, least(nz("minIfMerge(sent_at)"), nz("minIfMerge(delivered_at)"), nz("minIfMerge(read_at)"), nz("minIfMerge(played_at)")),
		s.table("message_lifecycle"))
	months := []any{id, monthStart(from).AddDate(0, -1, 0).Format("2006-01-02"), monthStart(to).Format("2006-01-02"), f, t}
	if err := count(outbound, months, func(p *ThroughputPoint, n uint64) { p.Outbound += n; out.Outbound += n }); err != nil {
		return nil, err
	}
	byTime := func(table, cond string) string {
		return fmt.Sprintf(`SELECT toUInt32(intDiv(toUInt32(event_time), %[1]d) * %[1]d) AS t, uniqExact(event_id)
FROM %[2]s
WHERE phone_number_id = ? AND event_time >= toDateTime(?) AND event_time < toDateTime(?)%[3]s
GROUP BY t`, sec, s.table(table), cond)
	}
	args := []any{id, int64(f), int64(t)}
	if err := count(byTime("inbound_messages", ""), args, func(p *ThroughputPoint, n uint64) { p.Inbound += n; out.Inbound += n }); err != nil {
		return nil, err
	}
	if err := count(byTime("management_events", " AND field = 'smb_message_echoes'"), args,
		func(p *ThroughputPoint, n uint64) { p.Outbound += n; out.Outbound += n }); err != nil {
		return nil, err
	}

	for _, p := range buckets {
		p.MPS = float64(p.Inbound+p.Outbound) / step.Seconds()
		p.TierMPS, _ = s.tierAt(st, coexistence, p.Time)
		if p.TierMPS > 0 {
			p.Utilization = p.MPS / float64(p.TierMPS)
		}
		out.Points = append(out.Points, *p)
	}
	sort.Slice(out.Points, func(i, j int) bool { return out.Points[i].Time.Before(out.Points[j].Time) })
	for i := range out.Points {
		p := &out.Points[i]
		if p.MPS > out.PeakMPS {
			out.PeakMPS, out.PeakTime = p.MPS, &p.Time
		}
		out.PeakUtilization = max(out.PeakUtilization, p.Utilization)
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		out.AverageMPS = float64(out.Inbound+out.Outbound) / d
	}
	return out, nil
}

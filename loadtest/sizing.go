package loadtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// Capacity is what a load run measured on one machine: the per-core
// capacity of `wahook serve` (ingest, embedded JetStream and stage 1 in one
// process) and ClickHouse's bytes per row. Sizing divides by it.
type Capacity struct {
	// Source says where the figures come from: when, on what machine,
	// with what traffic.
	Source string `json:"source"`
	// RequestsPerCPUS and EventsPerCPUS are webhook requests and events
	// answered and stored per second of the service's CPU time.
	RequestsPerCPUS float64 `json:"requests_per_cpu_s"`
	EventsPerCPUS   float64 `json:"events_per_cpu_s"`
	// P99Ms is the p99 latency of the run that measured it.
	P99Ms float64 `json:"p99_ms"`
	// BytesPerRow is ClickHouse's compressed bytes per row, by table. The
	// aggregates grow with the events that feed them (sets of event ids,
	// a row per insert until merges), not with their keys: for them it is
	// bytes per row of their source table (aggregateSource).
	BytesPerRow map[string]float64 `json:"clickhouse_bytes_per_row"`
}

// DefaultCapacity is what a 20 s traffic-model run measured against
// `wahook serve` on the 2-core VM wahook is developed on, with the load
// generator and ClickHouse on the same cores: 20 upgraded numbers at 100
// mps, 30% replies, ~3,310 req/s (2 items each), p99 13 ms, all 200, loss
// and duplicates 0; the median of three runs on 2026-12-05 (4,438–4,828
// requests per CPU second). Replace it with `wahook loadtest
// --capacity-out` on yours.
func DefaultCapacity() Capacity {
	return Capacity{
		Source: "wahook loadtest --numbers 20 --upgraded 20 --coexistence 0 --outbound-mps 100 --duration 20s against wahook serve " +
			"(3,307 req/s, p99 13 ms; median of 3 runs, 2026-12-05) on a 2-core x86-64 VM shared with the load generator and ClickHouse 18.16, Go 1.26",
		RequestsPerCPUS: 4489, EventsPerCPUS: 8894, P99Ms: 13,
		BytesPerRow: map[string]float64{
			"status_events": 80, "errors": 92, "inbound_messages": 82,
			"management_events": 120, // not measured (a handful of rows): an estimate
			// per status event or error that feeds them
			// (message_states holds what message_lifecycle, a Merge table over it, shows)
			"message_states": 24, "status_counts_by_minute": 16, "failures_by_minute": 19,
		},
	}
}

// aggregateSource is the table that feeds each aggregate.
var aggregateSource = map[string]string{
	"status_counts_by_minute": "status_events",
	"message_states":          "status_events",
	"failures_by_minute":      "errors",
}

// CapacityFrom takes the capacity a run measured: its requests and events
// per CPU second and, after a check, ClickHouse's bytes per row.
func CapacityFrom(s Summary) (Capacity, error) {
	if s.RequestsPerCPUS <= 0 {
		return Capacity{}, errors.New("the run measured no service CPU time (is /metrics on the --url's host?)")
	}
	if c := s.Check; c != nil && (!c.Drained || !c.OK()) {
		// The CPU per request would leave out the backlog the service had
		// still to work through (or count a run that lost events): a
		// capacity too high, and too few instances planned from it.
		return Capacity{}, fmt.Errorf("the end-to-end check did not pass (drained %v, lost %d, duplicates %d): the service's CPU does not cover the work of the requests", c.Drained, c.Lost, c.Duplicates)
	}
	c := Capacity{
		Source: fmt.Sprintf("wahook loadtest (%s, %.0f s, %.0f req/s, p99 %.1f ms) on %s, %d cores (%s/%s), load generator on the same machine",
			s.Mode, s.DurationS, s.RatePerS, s.P99Ms, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH),
		RequestsPerCPUS: s.RequestsPerCPUS, EventsPerCPUS: s.EventsPerCPUS, P99Ms: s.P99Ms,
		BytesPerRow: map[string]float64{},
	}
	def := DefaultCapacity()
	if s.Check != nil {
		rows := map[string]uint64{}
		for _, t := range s.Check.Storage {
			rows[t.Table] = t.Rows
		}
		for _, t := range s.Check.Storage {
			n := t.Rows
			if src, ok := aggregateSource[t.Table]; ok {
				n = rows[src]
			}
			// A small table is mostly the overhead of its parts.
			if _, known := def.BytesPerRow[t.Table]; known && n >= 1000 {
				c.BytesPerRow[t.Table] = float64(t.CompressedBytes) / float64(n)
			}
		}
	}
	for t, b := range def.BytesPerRow {
		if _, ok := c.BytesPerRow[t]; !ok {
			c.BytesPerRow[t] = b
		}
	}
	if c.EventsPerCPUS <= 0 {
		c.EventsPerCPUS = c.RequestsPerCPUS
	}
	return c, nil
}

// ReadCapacity reads a capacity file written by WriteCapacity.
func ReadCapacity(path string) (Capacity, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Capacity{}, err
	}
	var c Capacity
	if err := json.Unmarshal(b, &c); err != nil {
		return Capacity{}, fmt.Errorf("%s: %w", path, err)
	}
	if c.RequestsPerCPUS <= 0 || c.EventsPerCPUS <= 0 {
		return Capacity{}, fmt.Errorf("%s: no requests or events per CPU second", path)
	}
	return c, nil
}

// WriteCapacity writes c as JSON to path.
func WriteCapacity(path string, c Capacity) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// SizingInput is what a deployment has to carry.
type SizingInput struct {
	// Model gives the numbers, their outbound rate each, the reply rate
	// (or inbound rate), failures and batching (PerPost 1, the default,
	// sizes for Meta not batching at all, which it does not promise).
	Model Model
	// BurstFactor is the peak over the mean: campaign blasts, and Meta
	// catching up after an outage.
	BurstFactor float64
	// RawRetention and EventsRetention are the streams' max ages;
	// RawReplicas the copies of RAW (1 on one machine, 3 on a cluster).
	RawRetention, EventsRetention time.Duration
	RawReplicas                   int
	// CoresPerInstance and TargetUtilization turn CPU into instances.
	CoresPerInstance  int
	TargetUtilization float64
	Capacity          Capacity
}

// DefaultSizingInput sizes for the default model without batching, a
// burst factor of 2, 7 days of RAW and 24 h of EVENTS with one replica,
// 4-core instances at 60% and the default capacity.
func DefaultSizingInput() SizingInput {
	m := DefaultModel()
	m.PerPost, m.RetryShare, m.RepeatShare, m.QualityEvery, m.UpgradeEvery = 1, 0, 0, 0, 0
	return SizingInput{Model: m, BurstFactor: 2, RawRetention: 7 * 24 * time.Hour, EventsRetention: 24 * time.Hour,
		RawReplicas: 1, CoresPerInstance: 4, TargetUtilization: 0.6, Capacity: DefaultCapacity()}
}

// Sizing is what SizingInput needs.
type Sizing struct {
	Input        SizingInput `json:"-"`
	OutboundMPS  float64     `json:"outbound_mps"`
	InboundMPS   float64     `json:"inbound_mps"`
	MetaRuleRPS  float64     `json:"meta_rule_events_per_s"` // 3x outbound + 1x inbound
	EventsPerS   float64     `json:"events_per_s"`           // the model: failures, read share, echoes
	ItemsPerPost float64     `json:"items_per_post"`
	RequestsPerS float64     `json:"requests_per_s"`
	PeakRPS      float64     `json:"peak_requests_per_s"`
	PeakEventsPS float64     `json:"peak_events_per_s"`
	// Clamped numbers would send more than their tier allows.
	Clamped int `json:"numbers_over_tier"`
	// TierCeilingEPS is the events per second if every number sent at its
	// tier: the most Meta can send.
	TierCeilingEPS float64 `json:"tier_ceiling_events_per_s"`
	// Body and record sizes, measured from the model's bodies.
	MeanBodyBytes    float64 `json:"mean_body_bytes"`
	RawRecordBytes   float64 `json:"raw_record_bytes"`
	EventRecordBytes float64 `json:"event_record_bytes"`
	RawBytes         float64 `json:"raw_stream_bytes"`
	EventsBytes      float64 `json:"events_stream_bytes"`
	// ClickHouse per day.
	RowsPerDay  map[string]float64 `json:"clickhouse_rows_per_day"`
	BytesPerDay map[string]float64 `json:"clickhouse_bytes_per_day"`
	TotalRows   float64            `json:"clickhouse_total_rows_per_day"`
	TotalBytes  float64            `json:"clickhouse_total_bytes_per_day"`
	// Cores and instances of wahook (ingest + stage 1) at the peak.
	Cores     float64 `json:"cores_at_peak"`
	Instances int     `json:"instances"`
}

// Size computes the sizing of in.
func Size(in SizingInput) (*Sizing, error) {
	m := in.Model
	if m.RunID == 0 {
		m.RunID = 1
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	switch {
	case in.BurstFactor < 1:
		return nil, errors.New("burst factor must be at least 1")
	case in.RawRetention <= 0 || in.EventsRetention < 0:
		return nil, errors.New("retention must be positive")
	case in.RawReplicas < 1 || in.RawReplicas > 5:
		return nil, errors.New("replicas must be between 1 and 5")
	case in.CoresPerInstance < 1:
		return nil, errors.New("cores per instance must be at least 1")
	case in.TargetUtilization <= 0 || in.TargetUtilization > 1:
		return nil, errors.New("target utilization must be a share between 0 and 1")
	case in.Capacity.RequestsPerCPUS <= 0 || in.Capacity.EventsPerCPUS <= 0:
		return nil, errors.New("capacity: no requests or events per CPU second")
	}
	r := m.Rates()
	s := &Sizing{Input: in, OutboundMPS: r.Outbound, InboundMPS: r.Inbound, Clamped: r.Clamped,
		MetaRuleRPS: 3*r.Outbound + r.Inbound, EventsPerS: r.Events}
	// Meta's rule is the bar: size for the larger of it and the model.
	events := max(s.MetaRuleRPS+r.Echoes, r.Events)
	ceiling := m
	ceiling.OutboundMPS = TierUpgraded
	s.TierCeilingEPS = 3*ceiling.Rates().Outbound + ceiling.Rates().Inbound
	body, items, err := sampleBodies(m)
	if err != nil {
		return nil, err
	}
	s.MeanBodyBytes, s.ItemsPerPost = body, items
	s.RequestsPerS = events / items
	s.PeakRPS, s.PeakEventsPS = s.RequestsPerS*in.BurstFactor, events*in.BurstFactor
	// A RAW record: the body, its subject and headers, and the file
	// store's record framing (22 bytes) and checksum (8).
	hdr := len("NATS/1.0\r\n") + len(schema.HeaderMsgID+": \r\n") + 64 +
		len(schema.HeaderReceivedAt+": \r\n") + len(schema.FormatReceivedAt(time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC))) +
		len(schema.HeaderApp+": \r\n") + len(schema.DefaultApp) + 2
	s.RawRecordBytes = s.MeanBodyBytes + float64(len(schema.RawSubject(schema.DefaultApp))+hdr+22+8)
	s.RawBytes = s.RequestsPerS * in.RawRetention.Seconds() * s.RawRecordBytes * float64(in.RawReplicas)
	s.EventRecordBytes = eventRecordBytes()
	s.EventsBytes = events * in.EventsRetention.Seconds() * s.EventRecordBytes * float64(in.RawReplicas)
	// ClickHouse: one row per event in its table; aggregates at most one row
	// per key and minute (fewer after merges).
	day := 86400.0
	fail := m.Failures.Total()
	apiOut := 0.0 // outbound sent through the API (not echoes)
	for n := 0; n < m.Numbers; n++ {
		out, _ := m.rates(m.tier(n))
		if n < m.Coexistence {
			out *= 1 - m.EchoShare
		}
		apiOut += out
	}
	statuses := events - r.Inbound - r.Echoes
	failures := apiOut * fail
	codes := float64(max(len(m.Failures), 1))
	s.RowsPerDay = map[string]float64{
		"status_events":           statuses * day,
		"errors":                  failures * day,
		"inbound_messages":        r.Inbound * day,
		"management_events":       r.Echoes * day,
		"message_states":          apiOut * day,
		"status_counts_by_minute": math.Min(statuses, float64(m.Numbers)*4*4*7/60) * day,
		"failures_by_minute":      math.Min(failures, float64(m.Numbers)*codes/60) * day,
	}
	s.BytesPerDay = map[string]float64{}
	for t, rows := range s.RowsPerDay {
		b := in.Capacity.BytesPerRow[t]
		if b == 0 {
			b = DefaultCapacity().BytesPerRow[t]
		}
		counted := rows
		if src, ok := aggregateSource[t]; ok {
			counted = s.RowsPerDay[src]
		}
		s.BytesPerDay[t] = counted * b
		s.TotalRows += rows
		s.TotalBytes += counted * b
	}
	// CPU scales with requests and with events; the capacity measured both
	// at one batching, so take the larger need.
	s.Cores = max(s.PeakRPS/in.Capacity.RequestsPerCPUS, s.PeakEventsPS/in.Capacity.EventsPerCPUS)
	s.Instances = max(1, int(math.Ceil(s.Cores/in.TargetUtilization/float64(in.CoresPerInstance))))
	return s, nil
}

// sampleNumbers is how many numbers sampleBodies generates at most.
const sampleNumbers = 20

// sampleBodies generates a sample of the model's POSTs (at most
// sampleNumbers numbers, up to 4,000 POSTs) and returns their mean size and
// items per POST. A larger fleet is sampled with each number's traffic as
// it is (the fleet's inbound shared over the sample's numbers as over the
// fleet's) and its kinds of numbers in their shares.
func sampleBodies(m Model) (bytes, items float64, err error) {
	if m.Numbers > sampleNumbers {
		share := float64(sampleNumbers) / float64(m.Numbers)
		m.InboundMPS *= share
		coex := int(math.Round(float64(m.Coexistence) * share))
		if m.Coexistence > 0 {
			coex = max(coex, 1)
		}
		up := int(math.Round(float64(m.Upgraded) * share))
		if m.Upgraded > 0 {
			up = max(up, 1)
		}
		m.Numbers = sampleNumbers
		m.Coexistence = min(coex, m.Numbers)
		m.Upgraded = min(up, m.Numbers-m.Coexistence)
	}
	m.WABAs = min(m.WABAs, m.Numbers)
	m.RetryShare, m.RepeatShare = 0, 0
	m.Delays.Max = time.Second // sizes do not depend on delays; a short history is cheap
	g, err := NewTraffic(m, time.Unix(1_781_514_000, 0))
	if err != nil {
		return 0, 0, err
	}
	var n, total, its int
	var buf []byte
	for t := time.Duration(0); t < 120*time.Second && n < 4000; t += 100 * time.Millisecond {
		for _, p := range g.Due(t) {
			buf = g.Body(buf[:0], &p)
			total += len(buf)
			its += p.Len()
			n++
		}
	}
	if n == 0 {
		return 0, 0, errors.New("the model made no POSTs to measure")
	}
	return float64(total) / float64(n), float64(its) / float64(n), nil
}

// eventRecordBytes is the size of a status event on WAHOOK_EVENTS: the
// JSON stage 1 publishes for a typical delivered status, its subject,
// Nats-Msg-Id and the record framing.
func eventRecordBytes() float64 {
	h := strings.Repeat("a", 32)
	row := schema.StatusRow{
		Source:  schema.Source{App: schema.DefaultApp, ReceivedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), RawSeq: 123456789},
		EventID: h, EventTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), WabaID: "104281907735512",
		PhoneNumberID: "107655290331184", DisplayPhoneNumber: "15557810001",
		MessageID: "wamid.HBgLMTY1MDU1NTAxNDIVAgARGBI3N0M2NkNCREQ2NEVGN0MyMzUA", Status: "delivered",
		RecipientHash: h, PricingBillable: 1, PricingModel: "PMP", PricingType: "regular", PricingCategory: "marketing",
		Campaign: "campaign=winter-sale",
	}
	b, _ := json.Marshal(struct {
		Kind schema.Kind `json:"kind"`
		V    int         `json:"v"`
		Row  any         `json:"row"`
	}{schema.KindStatus, 1, row})
	subject := schema.EventsSubject(row.PhoneNumberID, schema.KindStatus)
	hdr := len("NATS/1.0\r\n") + len(schema.HeaderMsgID+": \r\n") + 32 + 2
	return float64(len(b) + len(subject) + hdr + 22 + 8)
}

// WriteText writes the sizing for people.
func (s *Sizing) WriteText(w io.Writer) {
	in, m := s.Input, s.Input.Model
	fmt.Fprintf(w, "wahook sizing: %d numbers (%d coexistence, %d upgraded) x %g mps outbound", m.Numbers, m.Coexistence, m.Upgraded, m.OutboundMPS)
	if m.InboundMPS > 0 {
		fmt.Fprintf(w, ", %g mps inbound\n", m.InboundMPS)
	} else {
		fmt.Fprintf(w, ", reply rate %g%%\n", 100*m.ReplyRate)
	}
	fmt.Fprintf(w, "  outbound %s msgs/s, inbound %s msgs/s", num(s.OutboundMPS), num(s.InboundMPS))
	if s.Clamped > 0 {
		fmt.Fprintf(w, " (%d numbers held to their tier: 80 mps standard, 20 coexistence; ask Meta for THROUGHPUT_UPGRADE, --upgraded)", s.Clamped)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "webhooks")
	fmt.Fprintf(w, "  Meta's rule, 3x outbound + 1x inbound:  %s events/s\n", num(s.MetaRuleRPS))
	fmt.Fprintf(w, "  this model (failures %s, read share %g, echoes): %s events/s\n", m.Failures, m.ReadShare, num(s.EventsPerS))
	fmt.Fprintf(w, "  requests at %.2f items per POST:        %s req/s (mean body %.0f bytes)\n", s.ItemsPerPost, num(s.RequestsPerS), s.MeanBodyBytes)
	fmt.Fprintf(w, "  peak with bursts (x%g):                 %s req/s, %s events/s\n", in.BurstFactor, num(s.PeakRPS), num(s.PeakEventsPS))
	fmt.Fprintf(w, "  ceiling, every number at its tier (80 mps, 1,000 upgraded, 20 coexistence): %s events/s\n", num(s.TierCeilingEPS))
	fmt.Fprintln(w, "JetStream")
	fmt.Fprintf(w, "  WAHOOK_RAW, %s retention, %d replica(s): %s (%.0f bytes per record: body + subject, headers, framing)\n",
		days(in.RawRetention), in.RawReplicas, bytesText(s.RawBytes), s.RawRecordBytes)
	fmt.Fprintf(w, "  WAHOOK_EVENTS, %s retention: %s (%.0f bytes per event record)\n", days(in.EventsRetention), bytesText(s.EventsBytes), s.EventRecordBytes)
	fmt.Fprintln(w, "ClickHouse per day (compressed bytes per row from the capacity's run; aggregate rows are at most one per key")
	fmt.Fprintln(w, "and minute, their bytes grow with the events they count)")
	for _, t := range []string{"status_events", "errors", "inbound_messages", "management_events", "message_states", "status_counts_by_minute", "failures_by_minute"} {
		fmt.Fprintf(w, "  %-24s %12s rows %12s\n", t, num(s.RowsPerDay[t]), bytesText(s.BytesPerDay[t]))
	}
	fmt.Fprintf(w, "  %-24s %12s rows %12s\n", "total", num(s.TotalRows), bytesText(s.TotalBytes))
	fmt.Fprintln(w, "wahook instances (ingest + embedded JetStream + stage 1; ClickHouse's own CPU not included)")
	fmt.Fprintf(w, "  capacity: %.0f requests, %.0f events per CPU second, as measured by %s\n",
		in.Capacity.RequestsPerCPUS, in.Capacity.EventsPerCPUS, in.Capacity.Source)
	fmt.Fprintf(w, "  peak needs %.2f cores: %d instance(s) of %d cores at %.0f%% utilization (add one to survive losing one)\n",
		s.Cores, s.Instances, in.CoresPerInstance, 100*in.TargetUtilization)
}

// WriteJSON writes the sizing as JSON.
func (s *Sizing) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Sizing
		Capacity Capacity `json:"capacity"`
	}{s, s.Input.Capacity})
}

func days(d time.Duration) string {
	switch {
	case d == 24*time.Hour:
		return "1 day"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// num writes a count with thousands separators (millions and billions
// abbreviated).
func num(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2f G", v/1e9)
	case v >= 1e7:
		return fmt.Sprintf("%.1f M", v/1e6)
	}
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// bytesText writes a size in decimal units.
func bytesText(b float64) string {
	for _, u := range []struct {
		v    float64
		name string
	}{{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if b >= u.v {
			return fmt.Sprintf("%.1f %s", b/u.v, u.name)
		}
	}
	return fmt.Sprintf("%.0f B", b)
}

package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is the machine-readable report of a run.
type Summary struct {
	URL         string         `json:"url"`
	Mode        string         `json:"mode"` // open-loop, closed-loop or traffic-model
	TargetRate  float64        `json:"target_rate,omitempty"`
	Connections int            `json:"connections"`
	DurationS   float64        `json:"duration_s"`
	Sent        uint64         `json:"sent"`
	OK          uint64         `json:"ok"`
	Errors      uint64         `json:"errors"`
	Statuses    map[string]int `json:"statuses"`
	Retried     uint64         `json:"retried"`
	GaveUp      uint64         `json:"gave_up"`
	RatePerS    float64        `json:"rate_per_s"` // answers of any status
	OKPerS      float64        `json:"ok_per_s"`   // 200 answers
	P50Ms       float64        `json:"p50_ms"`
	P90Ms       float64        `json:"p90_ms"`
	P99Ms       float64        `json:"p99_ms"`
	P999Ms      float64        `json:"p999_ms"`
	MaxMs       float64        `json:"max_ms"`
	// Interrupted: the run was stopped before its duration, the figures
	// are partial.
	Interrupted bool `json:"interrupted,omitempty"`
	// SendLagP50Ms and SendLagP99Ms are Result.SendLag's (open loop and
	// traffic runs).
	SendLagP50Ms float64 `json:"send_lag_p50_ms,omitempty"`
	SendLagP99Ms float64 `json:"send_lag_p99_ms,omitempty"`
	Over250ms    float64 `json:"share_over_250ms"`
	Over1s       float64 `json:"share_over_1s"`
	MetaSLO      bool    `json:"meets_meta_slo"`
	// ServerCPUS is the CPU time the service used during the run (from its
	// /metrics); ServerCPUDrainedS, when the end-to-end check waited for
	// the service to drain, the CPU time up to the end of that wait, the
	// work the run's requests left queued included (SetDrainedCPU).
	// RequestsPerCPUS is the requests answered 200 per CPU second, of the
	// drained figure when there is one: the per-core capacity that sizing
	// starts from.
	ServerCPUS        float64 `json:"server_cpu_s,omitempty"`
	ServerCPUDrainedS float64 `json:"server_cpu_drained_s,omitempty"`
	RequestsPerCPUS   float64 `json:"requests_per_cpu_s,omitempty"`
	EventsPerCPUS     float64 `json:"events_per_cpu_s,omitempty"`
	// Traffic describes a traffic-model run, with its ledger.
	Traffic *TrafficSummary `json:"traffic,omitempty"`
	// Timeline is the latency per second of intended send time.
	Timeline []Second `json:"timeline,omitempty"`
	// Check is the end-to-end check, when one ran.
	Check *CheckResult `json:"check,omitempty"`
	// Pacing compares the pacing signals with the ledger, when asked.
	Pacing *PacingResult `json:"pacing_check,omitempty"`
}

// TrafficSummary is the model of a run, what it posted and what got a 200.
type TrafficSummary struct {
	RunID       uint32 `json:"run_id"`
	Numbers     int    `json:"numbers"`
	Coexistence int    `json:"coexistence"`
	Upgraded    int    `json:"upgraded"`
	WABAs       int    `json:"wabas"`
	// OutboundMPS is per number, as configured; Planned has the rates after
	// the tiers.
	OutboundMPS float64 `json:"outbound_mps_per_number"`
	InboundMPS  float64 `json:"inbound_mps,omitempty"`
	ReplyRate   float64 `json:"reply_rate"`
	FailureMix  string  `json:"failure_mix"`
	PerPost     int     `json:"items_per_post_max"`
	RetryShare  float64 `json:"retry_share"`
	RepeatShare float64 `json:"repeat_share"`
	Planned     Rates   `json:"planned"`
	// Posted is what the generator posted (Meta's retries and repeats
	// included).
	Posts        uint64  `json:"posts"`
	MetaRetries  uint64  `json:"meta_retries"`
	Repeats      uint64  `json:"repeated_statuses"`
	ItemsPerPost float64 `json:"items_per_post"`
	// Acked is the ledger: every event once, whose body got a 200.
	Acked      Totals  `json:"acked"`
	EventsPerS float64 `json:"acked_events_per_s"`
}

// Summary condenses r.
func (r *Result) Summary() Summary {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	s := Summary{
		URL: r.Config.URL, Mode: "closed-loop", Connections: r.Config.Connections,
		DurationS: r.Elapsed.Seconds(), Sent: r.Sent, OK: r.OK(), Errors: r.Errors,
		Statuses: map[string]int{}, Retried: r.Retried, GaveUp: r.GaveUp, RatePerS: r.Rate(), OKPerS: r.OKRate(), Interrupted: r.Interrupted,
		P50Ms: ms(r.Percentile(50)), P90Ms: ms(r.Percentile(90)), P99Ms: ms(r.Percentile(99)),
		P999Ms: ms(r.Percentile(99.9)), MaxMs: float64(r.Latency.Max()) / 1000,
		Over250ms: r.ShareOver(250 * time.Millisecond), Over1s: r.ShareOver(time.Second),
		MetaSLO: r.MeetsMetaSLO(),
	}
	switch {
	case r.Traffic != nil:
		s.Mode = "traffic-model"
	case r.Config.Rate > 0:
		s.Mode, s.TargetRate = "open-loop", r.Config.Rate
	}
	for code, n := range r.Statuses {
		s.Statuses[fmt.Sprint(code)] = int(n)
	}
	if r.SendLag != nil && r.SendLag.TotalCount() > 0 {
		s.SendLagP50Ms, s.SendLagP99Ms = ms(percentile(r.SendLag, 50)), ms(percentile(r.SendLag, 99))
	}
	if r.Timeline != nil {
		s.Timeline = r.Timeline.Seconds()
	}
	if r.Traffic != nil {
		m, g := r.Traffic.Model(), r.Traffic.Generated()
		t := &TrafficSummary{
			RunID: m.RunID, Numbers: m.Numbers, Coexistence: m.Coexistence, Upgraded: m.Upgraded, WABAs: m.wabas(),
			OutboundMPS: m.OutboundMPS, InboundMPS: m.InboundMPS, ReplyRate: m.ReplyRate,
			FailureMix: m.Failures.String(), PerPost: m.PerPost, RetryShare: m.RetryShare, RepeatShare: m.RepeatShare,
			Planned: m.Rates(), Posts: g.Posts, MetaRetries: g.Retries, Repeats: g.Repeats,
			Acked: r.Ledger.Totals(),
		}
		if g.Posts > 0 {
			t.ItemsPerPost = float64(g.Items) / float64(g.Posts)
		}
		// Over the time the run took, as rate_per_s: an interrupted run's
		// events came in less than the --duration it was given.
		if d := r.Elapsed.Seconds(); d > 0 {
			t.EventsPerS = float64(t.Acked.Events) / d
		}
		s.Traffic = t
	}
	if r.ServerCPU > 0 {
		s.ServerCPUS = r.ServerCPU
		s.perCPU(r.ServerCPU)
	}
	return s
}

// perCPU sets the requests and events per CPU second from cpu seconds.
func (s *Summary) perCPU(cpu float64) {
	// 200s only: a refusal costs the service less than a store.
	s.RequestsPerCPUS = float64(s.OK) / cpu
	if s.Traffic != nil {
		s.EventsPerCPUS = float64(s.Traffic.Acked.Events) / cpu
	}
}

// SetDrainedCPU takes cpu, the service's CPU time from the start of the
// load to the end of the drain (Result.CPUSinceStart after the end-to-end
// check), as the cost of the run's requests: the backlog a saturated
// service worked through after the load is part of what they cost, and a
// capacity without it would size too few instances. A figure no larger
// than the load's own (unknown, or a restarted service) is not taken.
func (s *Summary) SetDrainedCPU(cpu float64) {
	if s.ServerCPUS <= 0 || cpu < s.ServerCPUS {
		return
	}
	s.ServerCPUDrainedS = cpu
	s.perCPU(cpu)
}

// WriteJSON writes the summary as one JSON object.
func (s Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteText writes the summary for people.
func (s Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s %s, %d connections", s.Mode, s.URL, s.Connections)
	if s.TargetRate > 0 {
		fmt.Fprintf(w, ", target %.0f req/s", s.TargetRate)
	}
	if s.Interrupted {
		fmt.Fprintf(w, "\n  INTERRUPTED after %.1fs: the figures below are partial", s.DurationS)
	}
	fmt.Fprintf(w, "\n  sent %d in %.1fs, answered %.0f req/s (200: %.0f req/s), no answer %d, retried %d, gave up %d\n",
		s.Sent, s.DurationS, s.RatePerS, s.OKPerS, s.Errors, s.Retried, s.GaveUp)
	fmt.Fprintf(w, "  answers: %s\n", sortedCounts(s.Statuses))
	fmt.Fprintf(w, "  latency p50 %.2f ms, p90 %.2f, p99 %.2f, p99.9 %.2f, max %.2f\n", s.P50Ms, s.P90Ms, s.P99Ms, s.P999Ms, s.MaxMs)
	if s.SendLagP99Ms > 0 {
		fmt.Fprintf(w, "  waited in the generator before sending (next tick, a free connection, a core): p50 %.2f ms, p99 %.2f\n",
			s.SendLagP50Ms, s.SendLagP99Ms)
	}
	verdict := "FAILS"
	if s.MetaSLO {
		verdict = "meets"
	}
	fmt.Fprintf(w, "  over 250 ms %.3f%%, over 1 s %.3f%%: %s Meta's bar (median < 250 ms, < 1%% over 1 s, all 200)\n",
		100*s.Over250ms, 100*s.Over1s, verdict)
	if s.ServerCPUDrainedS > 0 {
		fmt.Fprintf(w, "  service CPU %.2f s during the load, %.2f s with the drain: %.0f requests answered 200 per CPU second",
			s.ServerCPUS, s.ServerCPUDrainedS, s.RequestsPerCPUS)
		if s.EventsPerCPUS > 0 {
			fmt.Fprintf(w, ", %.0f events per CPU second", s.EventsPerCPUS)
		}
		fmt.Fprintln(w, " (load generator on the same machine)")
	} else if s.ServerCPUS > 0 {
		fmt.Fprintf(w, "  service CPU %.2f s: %.0f requests answered 200 per CPU second", s.ServerCPUS, s.RequestsPerCPUS)
		if s.EventsPerCPUS > 0 {
			fmt.Fprintf(w, ", %.0f events per CPU second", s.EventsPerCPUS)
		}
		fmt.Fprintln(w, " (load generator on the same machine)")
	}
	if t := s.Traffic; t != nil {
		fmt.Fprintf(w, "traffic model, run %d: %d numbers (%d coexistence, %d upgraded) in %d WABAs, outbound %g mps each",
			t.RunID, t.Numbers, t.Coexistence, t.Upgraded, t.WABAs, t.OutboundMPS)
		if t.InboundMPS > 0 {
			fmt.Fprintf(w, ", inbound %g mps", t.InboundMPS)
		} else {
			fmt.Fprintf(w, ", reply rate %g%%", 100*t.ReplyRate)
		}
		fmt.Fprintf(w, ", failures %s\n", t.FailureMix)
		p := t.Planned
		fmt.Fprintf(w, "  planned: %.0f msgs/s out, %.0f in -> %.0f status + %.0f inbound + %.0f echo = %.0f events/s",
			p.Outbound, p.Inbound, p.Statuses, p.Inbound, p.Echoes, p.Events)
		if p.Clamped > 0 {
			fmt.Fprintf(w, " (%d numbers held to their tier)", p.Clamped)
		}
		fmt.Fprintf(w, "\n  posted %d POSTs, %.2f items each (up to %d), %d Meta retries of a 200'd body, %d statuses repeated in other POSTs\n",
			t.Posts, t.ItemsPerPost, t.PerPost, t.MetaRetries, t.Repeats)
		fmt.Fprintf(w, "  ledger (events whose body got a 200, each once): %d, %.0f/s: %s\n",
			t.Acked.Events, t.EventsPerS, sortedCounts64(t.Acked.ByKind))
		if len(t.Acked.Failures) > 0 {
			fmt.Fprintf(w, "  failures by code: %s\n", sortedCounts64(t.Acked.Failures))
		}
	}
	if p := s.Pacing; p != nil {
		fmt.Fprintf(w, "pacing check: %d of %d numbers' signals equal to the ledger (1, 10 and 60 s rates, inbound and outbound), after %.1fs; %d events posted without a 200\n",
			p.Exact, p.Numbers, p.WaitS, p.PostedUnacked)
		for _, d := range p.Differences {
			fmt.Fprintf(w, "  %s\n", d)
		}
		for _, note := range []string{p.Partial, p.Inconclusive} {
			if note != "" {
				fmt.Fprintf(w, "  %s\n", note)
			}
		}
	}
	if c := s.Check; c != nil {
		c.WriteText(w)
	}
}

// WriteText writes the check for people.
func (c *CheckResult) WriteText(w io.Writer) {
	verdict := "PASS"
	if !c.OK() {
		verdict = "FAIL"
	}
	drained := "drained"
	if !c.Drained {
		drained = "NOT drained"
	}
	fmt.Fprintf(w, "end-to-end check against ClickHouse %s: %s (%s after %.1fs)\n", c.Database, verdict, drained, c.WaitS)
	fmt.Fprintf(w, "  ledger %d events, found %d: lost %d, duplicates %d, stored without a 200 %d (allowed)\n",
		c.Expected, c.Found, c.Lost, c.Duplicates, c.StoredUnacked)
	kinds := make([]string, 0, len(c.ByKind))
	for k := range c.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		kc := c.ByKind[k]
		fmt.Fprintf(w, "    %-18s expected %d, found %d, lost %d, duplicates %d\n", k, kc.Expected, kc.Found, kc.Lost, kc.Duplicates)
	}
	match := "matches"
	if !c.FailuresMatch {
		match = "DIFFERS from"
	}
	fmt.Fprintf(w, "  failure distribution (number x minute x code) in failures_by_minute %s the ledger's\n", match)
	for _, d := range c.FailureDiffs {
		fmt.Fprintf(w, "    %s\n", d)
	}
	fmt.Fprintf(w, "  dead letters since the start %d, rows of unknown keys %d\n", c.DeadLetters, c.UnknownKeys)
	for _, l := range c.LostList {
		fmt.Fprintf(w, "    lost: %s\n", l)
	}
	for _, d := range c.DuplicateList {
		fmt.Fprintf(w, "    duplicate: %s\n", d)
	}
}

func sortedCounts(m map[string]int) string {
	m64 := make(map[string]uint64, len(m))
	for k, v := range m {
		m64[k] = uint64(v)
	}
	return sortedCounts64(m64)
}

func sortedCounts64(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatUint(m[k], 10)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

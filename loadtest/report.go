package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Summary is the machine-readable report of a run.
type Summary struct {
	URL         string         `json:"url"`
	Mode        string         `json:"mode"` // open-loop or closed-loop
	TargetRate  float64        `json:"target_rate,omitempty"`
	Connections int            `json:"connections"`
	DurationS   float64        `json:"duration_s"`
	Sent        uint64         `json:"sent"`
	OK          uint64         `json:"ok"`
	Errors      uint64         `json:"errors"`
	Statuses    map[string]int `json:"statuses"`
	RatePerS    float64        `json:"rate_per_s"`
	P50Ms       float64        `json:"p50_ms"`
	P90Ms       float64        `json:"p90_ms"`
	P99Ms       float64        `json:"p99_ms"`
	P999Ms      float64        `json:"p999_ms"`
	MaxMs       float64        `json:"max_ms"`
	Over250ms   float64        `json:"share_over_250ms"`
	Over1s      float64        `json:"share_over_1s"`
	MetaSLO     bool           `json:"meets_meta_slo"`
}

// Summary condenses r.
func (r *Result) Summary() Summary {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	s := Summary{
		URL: r.Config.URL, Mode: "closed-loop", Connections: r.Config.Connections,
		DurationS: r.Elapsed.Seconds(), Sent: r.Sent, OK: r.OK(), Errors: r.Errors,
		Statuses: map[string]int{}, RatePerS: r.Rate(),
		P50Ms: ms(r.Percentile(50)), P90Ms: ms(r.Percentile(90)), P99Ms: ms(r.Percentile(99)),
		P999Ms: ms(r.Percentile(99.9)), MaxMs: float64(r.Latency.Max()) / 1000,
		Over250ms: r.ShareOver(250 * time.Millisecond), Over1s: r.ShareOver(time.Second),
		MetaSLO: r.MeetsMetaSLO(),
	}
	if r.Config.Rate > 0 {
		s.Mode, s.TargetRate = "open-loop", r.Config.Rate
	}
	for code, n := range r.Statuses {
		s.Statuses[fmt.Sprint(code)] = int(n)
	}
	return s
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
	fmt.Fprintf(w, "\n  sent %d in %.1fs, answered %.0f req/s, errors %d\n", s.Sent, s.DurationS, s.RatePerS, s.Errors)
	codes := make([]string, 0, len(s.Statuses))
	for c := range s.Statuses {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	fmt.Fprint(w, "  answers:")
	for _, c := range codes {
		fmt.Fprintf(w, " %s=%d", c, s.Statuses[c])
	}
	fmt.Fprintf(w, "\n  latency p50 %.2f ms, p90 %.2f, p99 %.2f, p99.9 %.2f, max %.2f\n", s.P50Ms, s.P90Ms, s.P99Ms, s.P999Ms, s.MaxMs)
	verdict := "FAILS"
	if s.MetaSLO {
		verdict = "meets"
	}
	fmt.Fprintf(w, "  over 250 ms %.3f%%, over 1 s %.3f%%: %s Meta's bar (median < 250 ms, < 1%% over 1 s, all 200)\n",
		100*s.Over250ms, 100*s.Over1s, verdict)
}

package loadtest

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// resultOf is a Result whose latencies are us (microseconds), all 200.
func resultOf(us []int64) *Result {
	r := &Result{Config: DefaultConfig(), Statuses: map[int]uint64{}, Latency: hdrhistogram.New(1, 60_000_000, 3),
		Elapsed: time.Second, ServerCPU: -1}
	for _, v := range us {
		_ = r.Latency.RecordValue(v)
		r.Statuses[200]++
		r.Sent++
	}
	return r
}

// TestReportPercentiles checks the percentiles against samples whose
// percentiles are known: 1..10000 ms, each once.
func TestReportPercentiles(t *testing.T) {
	var us []int64
	for ms := int64(1); ms <= 10000; ms++ {
		us = append(us, ms*1000)
	}
	s := resultOf(us).Summary()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p50", s.P50Ms, 5000}, {"p90", s.P90Ms, 9000}, {"p99", s.P99Ms, 9900},
		{"p99.9", s.P999Ms, 9990}, {"max", s.MaxMs, 10000},
		{"share over 250 ms", s.Over250ms, 0.975}, {"share over 1 s", s.Over1s, 0.9},
	} {
		// The histogram keeps 3 significant digits.
		if math.Abs(c.got-c.want) > 0.002*c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.MetaSLO {
		t.Error("a 5 s median meets Meta's bar")
	}
}

func TestReportPercentilesMetaVerdict(t *testing.T) {
	// 98.5% at 2 ms and 1.5% at 2 s: the median passes, the 1 s share does
	// not.
	var us []int64
	for i := 0; i < 1000; i++ {
		v := int64(2000)
		if i < 15 {
			v = 2_000_000
		}
		us = append(us, v)
	}
	r := resultOf(us)
	s := r.Summary()
	if s.P50Ms < 1.99 || s.P50Ms > 2.01 || math.Abs(s.Over1s-0.015) > 1e-9 || s.MetaSLO {
		t.Errorf("p50 %v, over 1 s %v, verdict %v: want 2 ms, 1.5%%, fails", s.P50Ms, s.Over1s, s.MetaSLO)
	}
	us = us[10:] // 5 of 990 over 1 s: 0.5%
	s = resultOf(us).Summary()
	if !s.MetaSLO {
		t.Errorf("over 1 s %v: want Meta's bar met", s.Over1s)
	}
	r = resultOf(us)
	r.Statuses[503]++
	r.Sent++
	if r.Summary().MetaSLO {
		t.Error("a 503 meets Meta's bar")
	}
}

// TestReportTimelinePercentile checks the per-second percentiles of the
// chart against known samples.
func TestReportTimelinePercentile(t *testing.T) {
	start := time.Unix(1000, 0)
	tl := NewTimeline(start, 5)
	for i := int64(1); i <= 100; i++ {
		tl.Record(start.Add(300*time.Millisecond), i*1000, 200) // second 0: 1..100 ms
		tl.Record(start.Add(2500*time.Millisecond), 7000, 200)  // second 2: 7 ms
	}
	tl.Record(start.Add(2*time.Second), 7000, 503)
	tl.RecordError(start.Add(10 * time.Second)) // past the end: the last second
	secs := tl.Seconds()
	if len(secs) != 5 {
		t.Fatalf("%d seconds, want 5 (up to the last with a request)", len(secs))
	}
	s0, s2 := secs[0], secs[2]
	if s0.Requests != 100 || math.Abs(s0.P50Ms-50) > 0.5 || math.Abs(s0.P99Ms-99) > 1 || math.Abs(s0.MaxMs-100) > 1 {
		t.Errorf("second 0: %+v, want 100 requests, p50 50, p99 99, max 100", s0)
	}
	if s2.Requests != 101 || s2.Non200 != 1 || math.Abs(s2.P50Ms-7) > 0.1 || secs[1].Requests != 0 || secs[4].Errors != 1 {
		t.Errorf("seconds %+v", secs)
	}
}

func TestReportTextAndJSON(t *testing.T) {
	r := resultOf([]int64{1000, 2000, 3000})
	r.Statuses[503] = 2
	r.Sent += 2
	r.Retried, r.GaveUp, r.ServerCPU = 2, 0, 0.5
	var text bytes.Buffer
	s := r.Summary()
	s.WriteText(&text)
	for _, want := range []string{"answers: 200=3 503=2", "retried 2", "FAILS Meta's bar", "6 requests answered 200 per CPU second"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "share_over_250ms", "share_over_1s", "meets_meta_slo", "statuses", "rate_per_s", "ok_per_s"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %s", k)
		}
	}
}

// TestReportDrainedCPU: the service's CPU through the drain after the load
// becomes the cost of the run's requests (the figure sizing starts from);
// a figure below the load's own (unknown, or a restarted service) is not
// taken.
func TestReportDrainedCPU(t *testing.T) {
	r := resultOf([]int64{1000, 2000, 3000, 4000})
	r.ServerCPU = 0.5
	s := r.Summary()
	if s.RequestsPerCPUS != 8 {
		t.Fatalf("%v requests per CPU second during the load, want 8", s.RequestsPerCPUS)
	}
	s.SetDrainedCPU(0.25)
	s.SetDrainedCPU(-1)
	if s.ServerCPUDrainedS != 0 || s.RequestsPerCPUS != 8 {
		t.Errorf("a drained figure below the load's taken: %v s, %v per CPU second", s.ServerCPUDrainedS, s.RequestsPerCPUS)
	}
	s.SetDrainedCPU(2)
	if s.ServerCPUDrainedS != 2 || s.RequestsPerCPUS != 2 {
		t.Errorf("with the drain: %v s, %v per CPU second; want 2 s, 2", s.ServerCPUDrainedS, s.RequestsPerCPUS)
	}
	var text bytes.Buffer
	s.WriteText(&text)
	if want := "service CPU 0.50 s during the load, 2.00 s with the drain: 2 requests answered 200 per CPU second"; !strings.Contains(text.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, text.String())
	}
}

// TestReportChart checks that the chart is well-formed SVG with its axes,
// Meta's line and one path per statistic.
func TestReportChart(t *testing.T) {
	secs := []Second{
		{Second: 0, Requests: 10, P50Ms: 1, P99Ms: 5, MaxMs: 8},
		{Second: 1},
		{Second: 2, Requests: 10, P50Ms: 2, P99Ms: 300, MaxMs: 2500, Non200: 3},
	}
	var b bytes.Buffer
	if err := WriteChart(&b, "run <1> & co", secs); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	paths := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if paths != 3 {
		t.Errorf("%d paths, want p50, p99 and max", paths)
	}
	for _, want := range []string{"Meta: median under 250 ms", "latency, ms (log scale)", "seconds since the start", "10 s", "0.1 ms", "3 non-200", "run &lt;1&gt; &amp; co"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// A second without requests breaks the lines.
	if !strings.Contains(svg, `d="M`) || strings.Count(svg, " M") < 3 {
		t.Errorf("lines not broken over the empty second:\n%s", svg)
	}
}

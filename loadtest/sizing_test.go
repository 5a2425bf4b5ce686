package loadtest

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizingMetaExample sizes Meta's own example: 1,000 mps with a 30%
// reply rate is 3,000 status webhooks plus 300 inbound per second.
func TestSizingMetaExample(t *testing.T) {
	in := DefaultSizingInput()
	m := &in.Model
	m.Numbers, m.Coexistence, m.Upgraded, m.OutboundMPS, m.ReplyRate, m.Failures = 10, 0, 10, 100, 0.3, nil
	in.Capacity = Capacity{Source: "test", RequestsPerCPUS: 1000, EventsPerCPUS: 1000,
		BytesPerRow: map[string]float64{"status_events": 50}}
	s, err := Size(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.MetaRuleRPS != 3300 || s.OutboundMPS != 1000 || math.Abs(s.InboundMPS-300) > 1e-9 {
		t.Fatalf("Meta's rule %v events/s from %v out, %v in; want 3300 from 1000 and 300", s.MetaRuleRPS, s.OutboundMPS, s.InboundMPS)
	}
	if s.ItemsPerPost != 1 || s.RequestsPerS != 3300 || s.PeakRPS != 6600 {
		t.Errorf("requests %v at %v items per POST, peak %v: want 3300, 1, 6600", s.RequestsPerS, s.ItemsPerPost, s.PeakRPS)
	}
	// 6,600 events/s at 1,000 per CPU second: 6.6 cores, at 60% on 4-core
	// instances 2.75, so 3.
	if math.Abs(s.Cores-6.6) > 1e-9 || s.Instances != 3 {
		t.Errorf("cores %v, instances %d: want 6.6 and 3", s.Cores, s.Instances)
	}
	// RAW: every request for 7 days, body plus overhead.
	if want := 3300 * 7 * 86400 * s.RawRecordBytes; math.Abs(s.RawBytes-want) > 1 || s.MeanBodyBytes < 300 || s.RawRecordBytes < s.MeanBodyBytes+150 {
		t.Errorf("raw %v bytes (record %v, body %v), want %v", s.RawBytes, s.RawRecordBytes, s.MeanBodyBytes, want)
	}
	if got := s.RowsPerDay["status_events"]; got != 3000*86400 {
		t.Errorf("status rows per day %v, want %v", got, 3000*86400)
	}
	if got := s.BytesPerDay["status_events"]; got != 50*3000*86400 {
		t.Errorf("status bytes per day %v", got)
	}
	if got := s.RowsPerDay["inbound_messages"]; math.Abs(got-300*86400) > 1e-3 {
		t.Errorf("inbound rows per day %v", got)
	}
	var b bytes.Buffer
	s.WriteText(&b)
	for _, want := range []string{"3,300 events/s", "6,600 req/s", "WAHOOK_RAW, 7 days", "3 instance(s) of 4 cores", "as measured by test"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSizingTiersAndBatching(t *testing.T) {
	in := DefaultSizingInput()
	in.Model.Numbers, in.Model.Coexistence, in.Model.OutboundMPS = 5, 1, 200
	s, err := Size(in)
	if err != nil {
		t.Fatal(err)
	}
	// 4 standard numbers at 80/1.3, one coexistence at 20/1.3.
	if s.Clamped != 5 || math.Abs(s.OutboundMPS-(4*80+20)/1.3) > 1e-6 {
		t.Errorf("clamped %d, outbound %v", s.Clamped, s.OutboundMPS)
	}
	in.Model.PerPost = 5
	b, err := Size(in)
	if err != nil {
		t.Fatal(err)
	}
	if b.ItemsPerPost < 2 || b.RequestsPerS > s.RequestsPerS/2 || b.MeanBodyBytes < 2*s.MeanBodyBytes {
		t.Errorf("batched: %v items per POST, %v req/s (unbatched %v), body %v (unbatched %v)",
			b.ItemsPerPost, b.RequestsPerS, s.RequestsPerS, b.MeanBodyBytes, s.MeanBodyBytes)
	}
	in.BurstFactor = 0.5
	if _, err := Size(in); err == nil {
		t.Error("a burst factor under 1 accepted")
	}
}

func TestSizingCapacityFile(t *testing.T) {
	s := Summary{Mode: "traffic-model", DurationS: 10, RatePerS: 800, P99Ms: 4, RequestsPerCPUS: 2000, EventsPerCPUS: 4500,
		Check: &CheckResult{Drained: true, Expected: 1000, Found: 1000, FailuresMatch: true,
			Storage: []TableStorage{{Table: "status_events", Rows: 1000, CompressedBytes: 42000}}}}
	c, err := CapacityFrom(s)
	if err != nil {
		t.Fatal(err)
	}
	if c.BytesPerRow["status_events"] != 42 || c.BytesPerRow["errors"] == 0 || !strings.Contains(c.Source, "800 req/s") {
		t.Fatalf("capacity %+v", c)
	}
	path := filepath.Join(t.TempDir(), "capacity.json")
	if err := WriteCapacity(path, c); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCapacity(path)
	if err != nil || back.RequestsPerCPUS != 2000 || back.EventsPerCPUS != 4500 || back.BytesPerRow["status_events"] != 42 {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if _, err := CapacityFrom(Summary{}); err == nil {
		t.Error("a run without CPU time gave a capacity")
	}
	// A check that did not drain (the CPU counted leaves the backlog out),
	// or that lost events, gives no capacity.
	for _, bad := range []CheckResult{
		{Drained: false, Expected: 1000, Found: 900, Lost: 100, FailuresMatch: true},
		{Drained: false, Expected: 1000, Found: 1000, FailuresMatch: true},
		{Drained: true, Expected: 1000, Found: 1000, Duplicates: 3, FailuresMatch: true},
	} {
		s.Check = &bad
		if c, err := CapacityFrom(s); err == nil {
			t.Errorf("a check %+v gave a capacity %+v", bad, c)
		}
	}
}

// TestSizingSampleOfAFleet: a fleet larger than the sample is sampled with
// each number's traffic as it is: 1,000 numbers sharing 20,000 inbound/s
// send and receive as 20 numbers sharing 400, and their bodies measure
// the same (the sample gave each of its 20 numbers the fleet's share of
// 1,000 inbound/s, which the tier left no outbound beside). Kinds of
// numbers keep their shares.
func TestSizingSampleOfAFleet(t *testing.T) {
	size := func(numbers, coexistence, upgraded int, inbound float64) *Sizing {
		t.Helper()
		in := DefaultSizingInput()
		m := &in.Model
		m.Numbers, m.Coexistence, m.Upgraded, m.OutboundMPS, m.InboundMPS = numbers, coexistence, upgraded, 50, inbound
		s, err := Size(in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The sample is generated, not drawn: the same model measures the same.
	for _, c := range []struct {
		what          string
		fleet, sample *Sizing
	}{
		{"1,000 numbers sharing 20,000 inbound/s against 20 sharing 400", size(1000, 0, 0, 20000), size(20, 0, 0, 400)},
		{"100 numbers sharing 600 inbound/s against 20 sharing 120", size(100, 0, 0, 600), size(20, 0, 0, 120)},
		{"1,000 numbers, half coexistence, a quarter upgraded, against 20 in those shares", size(1000, 500, 250, 10000), size(20, 10, 5, 200)},
	} {
		if c.fleet.MeanBodyBytes != c.sample.MeanBodyBytes || c.fleet.ItemsPerPost != c.sample.ItemsPerPost {
			t.Errorf("%s: %.1f bytes a body and %.2f items a POST, against %.1f and %.2f", c.what,
				c.fleet.MeanBodyBytes, c.fleet.ItemsPerPost, c.sample.MeanBodyBytes, c.sample.ItemsPerPost)
		}
	}
}

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wahook/wahook/loadtest"
)

// TestSizingCommand sizes Meta's example (1,000 mps, 30% replies: 3,000
// status webhooks and 300 inbound per second) from the command line.
func TestSizingCommand(t *testing.T) {
	code, out, errOut := runCmd(t, "sizing", "--numbers", "10", "--upgraded", "10", "--outbound-mps", "100", "--reply-rate", "0.3")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, want := range []string{"outbound 1,000 msgs/s, inbound 300 msgs/s", "3x outbound + 1x inbound:  3,300 events/s",
		"peak with bursts (x2)", "WAHOOK_RAW, 7 days retention", "status_events", "instance(s) of 4 cores", "as measured by"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// JSON, with a capacity file and more replicas.
	capFile := filepath.Join(t.TempDir(), "capacity.json")
	if err := loadtest.WriteCapacity(capFile, loadtest.Capacity{Source: "a test machine", RequestsPerCPUS: 1000, EventsPerCPUS: 1000,
		BytesPerRow: map[string]float64{"status_events": 100}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCmd(t, "sizing", "--numbers", "10", "--upgraded", "10", "--outbound-mps", "100", "--reply-rate", "0.3",
		"--failure-mix", "none", "--capacity", capFile, "--raw-replicas", "3", "--burst-factor", "3", "--json")
	if code != 0 {
		t.Fatalf("json: code %d: %s", code, errOut)
	}
	var s struct {
		MetaRule  float64            `json:"meta_rule_events_per_s"`
		Peak      float64            `json:"peak_requests_per_s"`
		Cores     float64            `json:"cores_at_peak"`
		Instances int                `json:"instances"`
		RawBytes  float64            `json:"raw_stream_bytes"`
		Record    float64            `json:"raw_record_bytes"`
		Rows      map[string]float64 `json:"clickhouse_rows_per_day"`
		Bytes     map[string]float64 `json:"clickhouse_bytes_per_day"`
		Capacity  loadtest.Capacity  `json:"capacity"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	// 9,900 req/s at 1,000 per CPU second: 9.9 cores, at 60% of 4 cores: 5.
	if s.MetaRule != 3300 || s.Peak != 9900 || s.Cores != 9.9 || s.Instances != 5 || s.Capacity.Source != "a test machine" {
		t.Errorf("sizing %+v", s)
	}
	if want := 3300 * 7 * 86400 * s.Record * 3; s.RawBytes < want*0.999 || s.RawBytes > want*1.001 {
		t.Errorf("raw bytes %v, want %v (3 replicas)", s.RawBytes, want)
	}
	if s.Rows["status_events"] != 3000*86400 || s.Bytes["status_events"] != 100*3000*86400 {
		t.Errorf("status rows %v, bytes %v", s.Rows["status_events"], s.Bytes["status_events"])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--numbers", "4"}, "--outbound-mps"},
		{[]string{"--outbound-mps", "10", "--capacity", "/nonexistent/capacity.json"}, "--capacity"},
		{[]string{"--outbound-mps", "10", "--burst-factor", "0.5"}, "burst factor"},
		{[]string{"--outbound-mps", "2000"}, "highest tier"},
	} {
		if code, _, errOut := runCmd(t, append([]string{"sizing"}, c.args...)...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, %q; want 2 naming %s", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := runCmd(t, "sizing", "-h"); code != 0 {
		t.Errorf("sizing -h: code %d, %s", code, errOut)
	}
}

package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// openLoop runs rate req/s for d over conns connections against url.
func openLoop(t *testing.T, url string, rate float64, d time.Duration, conns int) *Result {
	t.Helper()
	c := DefaultConfig()
	c.URL, c.Secret, c.Rate, c.Duration, c.Connections, c.Attempts, c.MetricsURL = url, []byte("s"), rate, d, conns, 1, "-"
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunSendLag: in open loop the generator reports how long each body
// waited before it was sent, a part of its latency; when the service is
// slower than the rate, the wait for a free connection shows there.
func TestRunSendLag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ServeBaseline(ln)
	defer ln.Close()
	res := openLoop(t, "http://"+ln.Addr().String()+"/webhook", 400, time.Second, 4)
	lag, lat := res.SendLag, res.Latency
	if lag == nil || res.OK() < 300 || lag.TotalCount() != int64(res.OK()) {
		t.Fatalf("%d answered 200; send lags recorded: %v (want one per body)", res.OK(), lag)
	}
	// Each body's lag is a part of its latency, so every percentile is too.
	for _, p := range []float64{50, 99, 100} {
		if l, d := percentile(lag, p), percentile(lat, p); l > d {
			t.Errorf("p%.0f: send lag %s over the latency %s", p, l, d)
		}
	}
	s := res.Summary()
	var text, js bytes.Buffer
	s.WriteText(&text)
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["send_lag_p99_ms"] == nil || !strings.Contains(text.String(), "before sending") {
		t.Errorf("the reports lack the send lag:\n%s\n%s", text.String(), js.String())
	}

	// One connection to a service that takes 20 ms, asked for 100 req/s:
	// bodies queue for the connection, and their lag grows with the queue.
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // the slow service is the test's subject, not a wait
	})}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go slow.Serve(ln2)
	defer slow.Close()
	res = openLoop(t, "http://"+ln2.Addr().String()+"/webhook", 100, time.Second, 1)
	if res.SendLag == nil || res.SendLag.TotalCount() == 0 {
		t.Fatal("no send lag recorded")
	}
	if med := percentile(res.SendLag, 50); med < 100*time.Millisecond {
		t.Errorf("median send lag %s behind a queue of about 50 bodies: want over 100ms", med)
	}
	// The lag ends when a body is sent: each body's latency is its lag and
	// at least the 20 ms the service takes.
	if lag, lat := percentile(res.SendLag, 50), percentile(res.Latency, 50); lat-lag < 15*time.Millisecond {
		t.Errorf("median latency %s only %s over the median send lag %s: want the 20 ms of service between", lat, lat-lag, lag)
	}

	// Closed loop sends each body when the last is answered: no lag.
	c := DefaultConfig()
	c.URL, c.Secret, c.Duration, c.Connections, c.MetricsURL = "http://"+ln.Addr().String()+"/webhook", []byte("s"), 200*time.Millisecond, 2, "-"
	res, err = Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Summary(); res.SendLag != nil || s.SendLagP99Ms != 0 {
		t.Errorf("closed loop: send lag %v, summary p99 %v; want none", res.SendLag, s.SendLagP99Ms)
	}
}

// TestPaceTick: two intervals, within 100 µs and 1 ms.
func TestPaceTick(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want time.Duration
	}{
		{100, time.Millisecond},
		{2000, time.Millisecond},
		{4000, 500 * time.Microsecond},
		{11500, 173912 * time.Nanosecond},
		{20000, 100 * time.Microsecond},
		{1e6, 100 * time.Microsecond},
	} {
		if got := paceTick(time.Duration(float64(time.Second) / c.rate)); got != c.want {
			t.Errorf("%.0f req/s: tick %s, want %s", c.rate, got, c.want)
		}
	}
	c := DefaultConfig()
	c.URL, c.Secret, c.Rate = "http://127.0.0.1:1/webhook", []byte("s"), 2e6
	if err := c.Validate(); err == nil {
		t.Error("a rate of 2M/s validated")
	}
}

// TestRunOKRate: the rate of 200s leaves out the other answers, which
// rate_per_s counts; a run cut short by its context says so.
func TestRunOKRate(t *testing.T) {
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c := DefaultConfig()
	c.URL, c.Secret, c.Duration, c.Connections, c.Attempts, c.MetricsURL = "http://"+ln.Addr().String()+"/webhook", []byte("s"), 300*time.Millisecond, 2, 1, "-"
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary()
	if s.Interrupted {
		t.Error("a run that lasted its duration is marked interrupted")
	}
	ok, other := res.Statuses[200], res.Statuses[503]
	if ok == 0 || other == 0 { // every other answer a 503: both, however slow the machine
		t.Fatalf("answers %v: want both 200s and 503s", res.Statuses)
	}
	if want := float64(ok) / res.Elapsed.Seconds(); s.OKPerS != want {
		t.Errorf("ok_per_s %v, want %v (200s alone)", s.OKPerS, want)
	}
	if want := float64(ok+other) / res.Elapsed.Seconds(); s.RatePerS != want {
		t.Errorf("rate_per_s %v, want %v (every answer)", s.RatePerS, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c.Duration = time.Minute
	res, err = Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	s = res.Summary()
	var text, js bytes.Buffer
	s.WriteText(&text)
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !s.Interrupted || res.Elapsed > 10*time.Second || !strings.Contains(text.String(), "INTERRUPTED") || !strings.Contains(js.String(), `"interrupted": true`) {
		t.Errorf("a run cancelled after 200ms of 1m: interrupted %v, elapsed %v\n%s\n%s", s.Interrupted, res.Elapsed, text.String(), js.String())
	}
}

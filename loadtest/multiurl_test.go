package loadtest

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunSpreadsOverURLs: with several endpoints, bodies are spread over
// them in turn, and a body refused by one is retried on the next, as
// behind a load balancer; an endpoint that does not answer at all only
// costs errors and retries, never a lost 200.
func TestRunSpreadsOverURLs(t *testing.T) {
	var hits [2]atomic.Int64
	serve := func(i int, code int) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			w.WriteHeader(code)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String() + "/webhook"
	}
	a, b := serve(0, http.StatusOK), serve(1, http.StatusOK)
	res := openLoop(t, a+","+b, 400, time.Second, 4)
	if res.OK() < 300 {
		t.Fatalf("%d answered 200 of %d sent", res.OK(), res.Sent)
	}
	if h0, h1 := hits[0].Load(), hits[1].Load(); h0 < int64(res.OK())/3 || h1 < int64(res.OK())/3 {
		t.Errorf("endpoints got %d and %d of %d bodies: want them spread", h0, h1, res.OK())
	}

	// One endpoint answers 503, the other 200: every body gets its 200
	// within two attempts.
	hits[0].Store(0)
	refusing := serve(0, http.StatusServiceUnavailable)
	ok := serve(1, http.StatusOK)
	c := DefaultConfig()
	c.URL, c.Secret, c.Rate, c.Duration, c.Connections, c.Attempts, c.MetricsURL, c.RetryBackoff =
		refusing+","+ok, []byte("s"), 200, time.Second, 4, 2, "-", time.Millisecond
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.GaveUp != 0 || res.OK() < 150 || hits[0].Load() == 0 {
		t.Errorf("a 503 from one endpoint: %d gave up, %d answered 200, %d refused; want every body retried on the other",
			res.GaveUp, res.OK(), hits[0].Load())
	}

	// A closed port: its requests fail, and are retried on the other.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/webhook"
	ln.Close()
	c.URL = dead + "," + ok
	res, err = Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.GaveUp != 0 || res.Errors == 0 || res.OK() < 150 {
		t.Errorf("a dead endpoint: %d errors, %d gave up, %d answered 200; want its bodies retried on the other",
			res.Errors, res.GaveUp, res.OK())
	}

	// Validate checks every endpoint.
	c.URL = ok + ",http://example.com/webhook"
	if err := c.Validate(); err == nil {
		t.Error("Validate took a second endpoint off this machine")
	}
}

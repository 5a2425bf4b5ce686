package ingest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema/schematest"
)

// TestReadyChecksOneAtATime: /readyz is on the webhook port, and each hit
// sent a request to JetStream's API: many connections looping on it filled
// the server's API queue, which drops its whole backlog once full, the
// stages' requests with it. Requests that come during a check share it;
// the next check starts once it ends, so a recovery is seen at once.
func TestReadyChecksOneAtATime(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := defaultTestConfig()
	pub, err := ingest.NewPublisher(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var inFlight, most, checks atomic.Int64
	var failing atomic.Bool
	ready := func(ctx context.Context) error {
		checks.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Millisecond) // a JetStream API round trip, very slow: the requests come during it
		if failing.Load() {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	s, err := ingest.New(cfg, pub, ready, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	}()
	url := "http://" + ln.Addr().String() + "/readyz"
	get := func() (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const requests = 64
	var wg sync.WaitGroup
	codes := make(chan int, requests)
	for range requests {
		wg.Add(1)
		go func() { defer wg.Done(); c, _ := get(); codes <- c }()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("/readyz answered %d, want 200", c)
		}
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d readiness checks at once for %d concurrent requests, want 1", m, requests)
	}
	if n := checks.Load(); n >= requests {
		t.Errorf("%d checks for %d concurrent requests: none shared", n, requests)
	}
	// Not cached: the first request after a failure begins sees it.
	failing.Store(true)
	if c, body := get(); c != http.StatusServiceUnavailable || !strings.Contains(body, "not ready") {
		t.Errorf("/readyz once the check fails: %d %q, want 503", c, body)
	}
	failing.Store(false)
	if c, body := get(); c != http.StatusOK {
		t.Errorf("/readyz once the check passes again: %d %q, want 200", c, body)
	}
}

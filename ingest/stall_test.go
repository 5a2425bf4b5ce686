package ingest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// TestStalledNATSLink: the link to NATS silently stops delivering (no
// reset, no close) while webhooks of 512 KiB come in. The client's writes
// then block once the sockets' buffers are full, holding the connection's
// lock and with it every publish, and the publisher's lock with them, so
// that no request got its 503 at its deadline: all hung until the write
// gave up, after nats.go's default of a minute. The write now gives up
// after a few seconds (ingest.NATSOptions), the connection is made again,
// every request is answered, and once the link delivers again bodies are
// stored.
func TestStalledNATSLink(t *testing.T) {
	var proxy *testutil.NATSProxy
	h := newHarnessVia(t, defaultTestConfig(), ingest.DefaultStreamConfig(), func(url string) string {
		proxy = testutil.StartNATSProxy(t, url)
		return proxy.URL
	})
	h.client.Timeout = 40 * time.Second
	proxy.Stall(true)
	const n = 64
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := append(body(i), bytes.Repeat([]byte(" "), 512<<10)...)
			results[i] = h.post("/webhook", b, schema.Sign([]byte(secretA), b))
		}()
	}
	wg.Wait()
	var slowest time.Duration
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("request %d: no answer: %v after %s", i, r.err, r.elapsed)
		}
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("request %d while the link is stalled: %d %q, want 503", i, r.status, r.body)
		}
		slowest = max(slowest, r.elapsed)
	}
	t.Logf("%d requests of 512 KiB over a stalled link: the slowest answered in %s", n, slowest)
	if slowest > 20*time.Second {
		t.Errorf("the slowest request was answered in %s, want within 20 s (the write gives up after %s)", slowest, ingest.NATSWriteTimeout)
	}
	proxy.Stall(false)
	b := body(n)
	testutil.Eventually(t, 30*time.Second, "a webhook stored once the link delivers again", func() (bool, string) {
		r := h.post("/webhook", b, schema.Sign([]byte(secretA), b))
		return r.status == 200, fmt.Sprintf("%d %v", r.status, r.err)
	})
}

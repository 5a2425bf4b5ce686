package stage2

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// TestStalledConsumer: a pull request lost on its way to the consumer (as
// when the NATS node leading the consumer dies holding it) is never
// answered. Here a proxy between stage 2 and the server drops stage 2's
// pull requests for a while: stage 2 notices that its consumer holds
// events while no pull request waits, and reads it again, until a pull
// passes; then every event is applied. Its reader also pulls again by
// itself after two missed heartbeats (4 s): the test waits for the
// check's own warning, the second line.
func TestStalledConsumer(t *testing.T) {
	h := startServer(t, sec(0))
	proxy := testutil.StartNATSProxy(t, h.url)
	proxy.Drop("$JS.API.CONSUMER.MSG.NEXT." + schema.StreamEvents + ".")
	nc, err := nats.Connect(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if h.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		t.Fatal(err)
	}
	h.cfg = DefaultConfig()
	h.cfg.Now = h.clock.Now
	h.cfg.StallAfter = 2 * time.Second
	h.run()
	t.Cleanup(h.close)
	const n = 20
	for i := range n {
		h.sent1("1001", fmt.Sprint("stall-", i), sec(0))
	}
	// Stage 2 reads its consumer again, and that pull is lost too.
	// Each look takes two checks of the consumer a second apart, after 2 s
	// of waiting: slow under -race on a loaded machine.
	// (Its reader also pulls again after two missed heartbeats, 4 s: the
	// rule tested here is the second line.)
	testutil.Eventually(t, 45*time.Second, "stage 2 to read its stalled consumer again", func() (bool, string) {
		got := metricValue(h.s.m.restarts)
		stalled := h.warnings.FilterMessageSnippet("reading again").FilterFieldKey("error").Filter(func(e observer.LoggedEntry) bool {
			return strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "no pull request waits")
		}).Len()
		return stalled >= 1 && got >= 1 && proxy.Dropped() >= 2, fmt.Sprintf("%d stalls seen, %v restarts, %d pulls dropped", stalled, got, proxy.Dropped())
	})
	c, err := h.js.Consumer(context.Background(), schema.StreamEvents, h.cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != n || info.NumWaiting != 0 || proxy.Dropped() < 2 {
		t.Fatalf("while pulls are dropped: %d pending, %d pulls waiting, %d pulls dropped; want %d, 0, at least 2",
			info.NumPending, info.NumWaiting, proxy.Dropped(), n)
	}
	if got := h.count(resultApplied); got != 0 {
		t.Fatalf("%d events applied while every pull was dropped", got)
	}
	proxy.Drop("")
	testutil.Eventually(t, 45*time.Second, "stage 2 to apply every event", func() (bool, string) {
		got := h.count(resultApplied)
		return got >= n, fmt.Sprintf("%d of %d applied", got, n)
	})
	if got := h.count(resultApplied); got != n {
		t.Errorf("events applied: got %d, want %d", got, n)
	}
}

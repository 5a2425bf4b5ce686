package processor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestStage1StalledConsumer: a pull request lost on its way to the
// consumer (as when the NATS node leading the consumer dies holding it) is
// never answered, and nats.go keeps waiting for it, however many bodies
// the consumer holds: its own watch for missed heartbeats runs within one
// Next, and stage 1's calls are shorter. Here a proxy between stage 1 and
// the server drops stage 1's pull requests for a while: stage 1 notices
// that its consumer holds bodies it does not deliver and reads it again,
// until a pull passes; then every body is stored. (Without the check,
// stage 1 waits for ever: the test times out in drained.)
func TestStage1StalledConsumer(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxAckPending = 20 // pulls of 10
	p.cfg.StallAfter = 2 * time.Second
	proxy := testutil.StartNATSProxy(t, p.nats.URL())
	pulls := "$JS.API.CONSUMER.MSG.NEXT." + schema.StreamRaw + "."
	proxy.Drop(pulls)
	nc, err := nats.Connect(proxy.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if p.stageJS, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	p.start()
	const n = 30
	for i := range n {
		p.publish("default", []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.stall-%d","status":"sent","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i)))
	}
	// Stage 1 reads its consumer again, and that pull is lost too. Each
	// look takes two backlog polls (5 s apart) after the last start.
	testutil.Eventually(t, 60*time.Second, "stage 1 to read its stalled consumer again", func() (bool, string) {
		got := p.metric(0, "wahook_processor_consumer_restarts_total")
		return got >= 1 && proxy.Dropped() >= 2, fmt.Sprintf("%v restarts, %d pulls dropped", got, proxy.Dropped())
	})
	info, err := p.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != n || info.NumWaiting != 0 || proxy.Dropped() < 2 {
		t.Fatalf("while pulls are dropped: %d pending, %d pulls waiting, %d pulls dropped; want %d, 0, at least 2",
			info.NumPending, info.NumWaiting, proxy.Dropped(), n)
	}
	proxy.Drop("")
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Fatalf("statuses stored: got %d, want %d", got, n)
	}
	if got := p.warnings.FilterMessageSnippet("delivered nothing").Len(); got < 1 {
		t.Errorf("no warning of the stalled consumer")
	}
}

package processor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestStage1NATSOutage stops the nats-server while stage 1 writes batches
// with EVENTS on, and starts it again: what the outage interrupted comes
// back (a batch whose EVENTS acks were lost fails and is written again, a
// RAW ack lost is redelivered), and in the end ClickHouse and WAHOOK_EVENTS
// hold every event once.
func TestStage1NATSOutage(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.BatchRows = 500
	// The duplicate window outlasts the test: every event published again
	// (a failed batch, bodies redelivered after the ack wait) falls within
	// it, however slow the machine. With the default 30 s, a CI run whose
	// redeliveries went on for longer stored 455 events twice: beyond the
	// window the stream stores a republished event again, and consumers
	// deduplicate it by event id (docs/architecture.md).
	ecfg := processor.DefaultEventsConfig()
	ecfg.DuplicateWindow = 10 * time.Minute
	if err := processor.EnsureEventsStream(context.Background(), p.js, ecfg, true); err != nil {
		t.Fatal(err)
	}
	p.start()
	const per, bodies = 50, 400
	body := func(i int) []byte {
		b := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[`)
		for j := 0; j < per; j++ {
			if j > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"id":"wamid.nats-%d-%d","status":"delivered","timestamp":"%d","recipient_id":"4915155500734"}`, i, j, 1781514312+i)
		}
		return append(b, `]}}]}]}`...)
	}
	for i := 0; i < bodies/2; i++ {
		p.publish("default", body(i))
	}
	// Stop the server while those are being written and published.
	ctx := context.Background()
	c, err := p.js.Consumer(ctx, schema.StreamRaw, p.cfg.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.nats.Shutdown()
	if ci.NumPending+uint64(ci.NumAckPending) == 0 {
		t.Fatal("stage 1 was done before the outage: the test did not test an outage")
	}
	time.Sleep(time.Second) // the outage itself: NATS stays down a while
	p.nats.Start()
	for i := bodies / 2; i < bodies; i++ {
		p.publish("default", body(i))
	}
	p.drained(90 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != per*bodies {
		t.Fatalf("statuses after the outage: got %d, want %d", got, per*bodies)
	}
	// Every event is on EVENTS, once: the duplicate window caught the
	// ones published again.
	s, err := p.js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != ecfg.DuplicateWindow {
		t.Errorf("WAHOOK_EVENTS' duplicate window is %s, want the test's %s", info.Config.Duplicates, ecfg.DuplicateWindow)
	}
	if info.State.Msgs != per*bodies {
		t.Errorf("WAHOOK_EVENTS holds %d events, want %d", info.State.Msgs, per*bodies)
	}
	t.Logf("bodies pending at the outage: %d unacked, %d not delivered; batches failed: %v",
		ci.NumAckPending, ci.NumPending, p.metric(0, "wahook_processor_write_failures_total"))
}

package ingest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestBatchPublisherEndsBatchWhenConnectionDrops: a dropped connection ends
// the current batch, whichever status reports it. A connection that will
// reconnect, as wahook's do, reports RECONNECTING and never DISCONNECTED,
// so that is the one that matters. CONNECTED ends nothing.
func TestBatchPublisherEndsBatchWhenConnectionDrops(t *testing.T) {
	for _, tt := range []struct {
		status nats.Status
		ends   bool
	}{{nats.RECONNECTING, true}, {nats.DISCONNECTED, true}, {nats.CONNECTED, false}} {
		p := &BatchPublisher{batches: map[string]*batch{}}
		b := &batch{id: "b1"}
		p.cur, p.batches[b.id] = b, b
		p.connectionChanged(tt.status)
		if tt.ends && (p.cur != nil || !b.ending) || !tt.ends && (p.cur != b || b.ending) {
			t.Errorf("%s: current batch %v, ending %v; want the batch ended: %v", tt.status, p.cur, b.ending, tt.ends)
		}
	}
}

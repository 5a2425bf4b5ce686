package ingest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestBatchPublisherEndsBatchWhenConnectionDrops: a dropped connection ends
// the current batch, whichever status reports it. A connection that will
// reconnect, as wahook's do, reports RECONNECTING and never DISCONNECTED,
// so that is the one that matters.
func TestBatchPublisherEndsBatchWhenConnectionDrops(t *testing.T) {
	for _, s := range []nats.Status{nats.RECONNECTING, nats.DISCONNECTED} {
		p := &BatchPublisher{batches: map[string]*batch{}}
		b := &batch{id: "b1"}
		p.cur, p.batches[b.id] = b, b
		p.connectionChanged(s)
		if p.cur != nil || !b.ending {
			t.Errorf("%s: current batch %v, ending %v; want none, and the batch ended", s, p.cur, b.ending)
		}
	}
	p := &BatchPublisher{batches: map[string]*batch{}}
	b := &batch{id: "b1"}
	p.cur, p.batches[b.id] = b, b
	p.connectionChanged(nats.CONNECTED)
	if p.cur != b || b.ending {
		t.Errorf("CONNECTED ended the current batch")
	}
}

package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// TestStorageRefused: the refusals for want of room, as a PubAck's API
// error and as the batch publisher words a batch's refusal, make /readyz
// fail; the account's limits (10002) among them, which an external NATS
// with per-account limits answers. A message's own refusal does not.
func TestStorageRefused(t *testing.T) {
	// A batch's refusal as the stream sends it, read as the publisher does.
	batchRefusal := func(reply string) error {
		var r batchReply
		if err := json.Unmarshal([]byte(reply), &r); err != nil || r.Error == nil {
			t.Fatalf("%s: %v", reply, err)
		}
		return r.refused()
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 400, ErrorCode: 10002, Description: "resource limits exceeded for account"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10047, Description: "insufficient storage resources available"}, true},
		{fmt.Errorf("publish: %w", &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}), true},
		{batchRefusal(`{"type":"err","seq":3,"error":{"code":400,"err_code":10002,"description":"resource limits exceeded for account"}}`), true},
		{batchRefusal(`{"type":"err","seq":3,"error":{"code":500,"err_code":10047,"description":"insufficient storage resources available"}}`), true},
		{batchRefusal(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`), false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, false},
		{errors.New("nats: timeout"), false},
	} {
		if got := storageRefused(c.err); got != c.want {
			t.Errorf("storageRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

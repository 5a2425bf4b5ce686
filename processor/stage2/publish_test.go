package stage2

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublisherTimesOut: a KV write whose PubAck never comes (here a
// subscriber takes the message and answers nothing, as a node that died
// after taking it would) resolves with an error after the publisher's
// timeout, so that reap, which settles writes in order, never stops at it.
func TestPublisherTimesOut(t *testing.T) {
	h := startServer(t, t0)
	sub, err := h.nc.SubscribeSync("wahook.test.no_ack")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the test ends
	pub, err := newPublisher(h.nc, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	f, err := pub.PublishMsgAsync(&nats.Msg{Subject: "wahook.test.no_ack", Data: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("the write did not go out: %v", err)
	}
	select {
	case <-f.Ok():
		t.Fatal("acknowledged by nobody")
	case err := <-f.Err():
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Errorf("the write failed with %v, want %v", err, jetstream.ErrAsyncPublishTimeout)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write without a PubAck never resolved")
	}
}

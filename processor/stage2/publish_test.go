package stage2

import (
	"context"
	"errors"
	"fmt"
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

// TestFailedWritesStayListed: a write that fails while flush walks the
// numbers due (its publish refused at once, or, once maxPendingWrites are
// in flight, an earlier one settled failed by the blocking reap inside the
// loop) marks its number again. The number must be on the writer's list
// afterwards: dropped from it, it would stay dirty for good, never written
// again, and the messages it holds never acked.
func TestFailedWritesStayListed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		numbers int
		closed  bool // the connection closed: every publish is refused
	}{
		{"publish refused", 50, true},
		{"settled inside the loop", maxPendingWrites + 50, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startServer(t, t0)
			cfg := DefaultConfig()
			cfg.Now = h.clock.Now
			s, err := New(cfg, h.js, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// No KV bucket: every write that goes out is answered "no
			// responders", a failed write.
			for i := range tc.numbers {
				s.w.mark(s.seed(fmt.Sprint(70000+i), nil))
			}
			if tc.closed {
				h.nc.Close()
			}
			s.w.flush(context.Background(), time.Now(), true)
			listed := map[*number]bool{}
			for _, n := range s.w.dirty {
				if listed[n] {
					t.Errorf("number %s listed twice", n.id)
				}
				listed[n] = true
			}
			dirty, missing := 0, 0
			for _, n := range s.nums {
				if n.dirty {
					dirty++
					if !listed[n] {
						missing++
					}
				}
			}
			if dirty != tc.numbers || missing != 0 || len(s.w.pending) != 0 {
				t.Fatalf("after every write failed: %d of %d numbers dirty, %d of them not listed to be written again, %d writes pending",
					dirty, tc.numbers, missing, len(s.w.pending))
			}
		})
	}
}

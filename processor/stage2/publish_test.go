package stage2

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
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

// TestRedeliveryWaitsForTheWriteInFlight: the redelivery of an event whose
// signal write failed finds the event applied already and changes nothing.
// While the number's next write is in flight it must not be acked: should
// the process die before that write lands, the KV would never hold the
// event. It is acked once that write is stored.
func TestRedeliveryWaitsForTheWriteInFlight(t *testing.T) {
	h := startServer(t, sec(10))
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Now = h.clock.Now
	s, err := New(cfg, h.js, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The KV's writes are taken by a subscriber that answers only when the
	// test says so: a write awaits its ack until the publisher's timeout.
	kv, err := h.nc.SubscribeSync("$KV." + schema.BucketPacing + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Unsubscribe()                                          //nolint:errcheck // the test ends
	if s.pub, err = newPublisher(h.nc, 3*time.Second); err != nil { // longer than the nak's delay (cooldownRetry)
		t.Fatal(err)
	}
	cons, err := h.js.CreateOrUpdateConsumer(ctx, schema.StreamEvents, jetstream.ConsumerConfig{
		Durable: "redelivery", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) jetstream.Msg {
		t.Helper()
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			return m
		}
		t.Fatalf("%s: not delivered", what)
		return nil
	}
	ackPending := func() int {
		t.Helper()
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending
	}
	kvWrite := func(what string) *nats.Msg {
		t.Helper()
		m, err := kv.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s did not go out: %v", what, err)
		}
		return m
	}

	n := s.seed("6001", nil)
	h.sent1("6001", "ev-1", sec(5))
	first := next("the event")
	s.handle(ctx, first)
	if !n.dirty || len(n.held) != 1 {
		t.Fatalf("the event did not change its number (dirty %v, %d held)", n.dirty, len(n.held))
	}
	// The first write is lost: it times out, its message is nak'ed.
	s.w.write(n, cfg.Now(), time.Now())
	kvWrite("the first write")
	s.w.reap(ctx, true)
	if !n.dirty || n.writes != 0 {
		t.Fatalf("after the failed write: dirty %v, %d writes in flight; want dirty, none", n.dirty, n.writes)
	}
	// The number is written again; while that write is in flight, the
	// event comes back.
	s.w.flush(ctx, time.Now().Add(cfg.Coalesce), false)
	second := kvWrite("the second write")
	again := next("the redelivery")
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("the redelivery: %+v, %v", md, err)
	}
	rec := &recordedMsg{Msg: again}
	s.handle(ctx, rec)
	if n.dirty || len(n.held) != 0 {
		t.Fatalf("the redelivery changed its number (dirty %v, %d held)", n.dirty, len(n.held))
	}
	if rec.acks != 0 {
		t.Fatal("the redelivery was acked while its number's write is in flight")
	}
	// The second write is stored: the redelivery is acked.
	if err := second.Respond([]byte(`{"stream":"KV_wahook_pacing","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	s.w.reap(ctx, true)
	if n.writes != 0 || n.dirty {
		t.Fatalf("after the stored write: %d writes in flight, dirty %v, %v writes failed", n.writes, n.dirty, metricValue(s.m.writeFails))
	}
	if rec.acks != 1 {
		t.Fatalf("the redelivery acked %d times once the write is stored, want 1", rec.acks)
	}
	testutil.Eventually(t, 5*time.Second, "the server has the ack", func() (bool, string) {
		got := ackPending()
		return got == 0, fmt.Sprint(got, " awaiting their ack")
	})
}

// recordedMsg counts the acks of a message.
type recordedMsg struct {
	jetstream.Msg
	acks int
}

func (m *recordedMsg) Ack() error { m.acks++; return m.Msg.Ack() }

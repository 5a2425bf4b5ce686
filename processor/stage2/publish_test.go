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
			h, s := idle(t, t0)
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
// While the number's next write is in flight it must not be acked (should
// the process die before that write lands, the KV would never hold the
// event), nor may the number be evicted (the redelivery would then find no
// write to wait for): it goes with that write, nak'ed if it fails too,
// acked once one is stored.
func TestRedeliveryWaitsForTheWriteInFlight(t *testing.T) {
	h, s := idle(t, sec(10))
	ctx, cfg := context.Background(), s.cfg
	// The KV's writes are taken by a subscriber that answers as the test
	// says: a write awaits its answer.
	kv, err := h.nc.SubscribeSync("$KV." + schema.BucketPacing + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Unsubscribe() //nolint:errcheck // the test ends
	cons := eventsConsumer(t, h, "redelivery")
	answer := func(what string, ok bool) {
		t.Helper()
		m, err := kv.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s did not go out: %v", what, err)
		}
		reply := `{"error":{"code":503,"err_code":10008,"description":"test: not stored"}}`
		if ok {
			reply = `{"stream":"KV_wahook_pacing","seq":1}`
		}
		if err := m.Respond([]byte(reply)); err != nil {
			t.Fatal(err)
		}
	}
	// rewrite writes the number again, as flush does once it is due.
	rewrite := func() { s.w.flush(ctx, time.Now().Add(cfg.Coalesce), false) }

	n := s.seed("6001", nil)
	h.sent1("6001", "ev-1", sec(5))
	first := fetchOne(t, cons, "the event", 1)
	s.handle(ctx, first)
	if !n.dirty || len(n.held) != 1 {
		t.Fatalf("the event did not change its number (dirty %v, %d held)", n.dirty, len(n.held))
	}
	// The first write fails: its message is nak'ed, the number marked.
	s.w.write(n, cfg.Now(), time.Now())
	answer("the first write", false)
	s.w.reap(ctx, true)
	if !n.dirty || n.writes != 0 || first.naks != 1 || first.acks != 0 {
		t.Fatalf("after the failed write: dirty %v, %d writes in flight, the event nak'ed %d and acked %d times",
			n.dirty, n.writes, first.naks, first.acks)
	}
	// The number is written again; while that write is in flight, the
	// event comes back, and the number's traffic and holds are long past.
	rewrite()
	again := fetchOne(t, cons, "the redelivery", 2)
	s.handle(ctx, again)
	if n.dirty || len(n.held) != 0 {
		t.Fatalf("the redelivery changed its number (dirty %v, %d held)", n.dirty, len(n.held))
	}
	if again.acks != 0 {
		t.Fatal("the redelivery was acked while its number's write is in flight")
	}
	// Long after, with its last signal what its signal says then, only the
	// write in flight keeps the number.
	late := sec(10_000)
	n.last = n.p.Signal(late, cfg.Tiers)
	s.w.refresh(late)
	if s.nums["6001"] != n || n.dirty {
		t.Fatalf("the number was evicted (%v) or marked (%v) while its write is in flight", s.nums["6001"] != n, n.dirty)
	}
	// That write fails too: the redelivery goes back with it.
	answer("the second write", false)
	s.w.reap(ctx, true)
	if again.naks != 1 || again.acks != 0 || !n.dirty {
		t.Fatalf("after the second write failed: the redelivery nak'ed %d and acked %d times, number dirty %v", again.naks, again.acks, n.dirty)
	}
	// The third write is stored: the third delivery, made while it is in
	// flight, is acked once, after it.
	rewrite()
	third := fetchOne(t, cons, "the second redelivery", 3)
	s.handle(ctx, third)
	if third.acks != 0 {
		t.Fatal("the second redelivery was acked while its number's write is in flight")
	}
	answer("the third write", true)
	s.w.reap(ctx, true)
	if n.writes != 0 || n.dirty || third.acks != 1 || third.naks != 0 {
		t.Fatalf("after the stored write: %d writes in flight, dirty %v, the redelivery acked %d and nak'ed %d times",
			n.writes, n.dirty, third.acks, third.naks)
	}
	// Settled, the idle number is evicted.
	n.last = n.p.Signal(late, cfg.Tiers)
	s.w.refresh(late)
	if s.nums["6001"] != nil {
		t.Fatal("the idle number, its writes settled, was not evicted")
	}
	testutil.Eventually(t, 5*time.Second, "the server has the ack", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.NumAckPending == 0, fmt.Sprint(info.NumAckPending, " awaiting their ack")
	})
}

// recordedMsg counts the acks and naks of a message.
type recordedMsg struct {
	jetstream.Msg
	acks, naks int
}

func (m *recordedMsg) Ack() error { m.acks++; return m.Msg.Ack() }

func (m *recordedMsg) NakWithDelay(d time.Duration) error { m.naks++; return m.Msg.NakWithDelay(d) }

// idle is a stage 2 on a server with the EVENTS stream, not started: the
// test drives its handle and its writer itself, with no KV bucket unless
// it makes one.
func idle(t *testing.T, at time.Time) (*harness, *Stage2) {
	t.Helper()
	h := startServer(t, at)
	cfg := DefaultConfig()
	cfg.Now = h.clock.Now
	s, err := New(cfg, h.js, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, s
}

// eventsConsumer is a durable consumer of every EVENTS message, for a
// test to fetch them one by one.
func eventsConsumer(t *testing.T, h *harness, name string) jetstream.Consumer {
	t.Helper()
	cons, err := h.js.CreateOrUpdateConsumer(context.Background(), schema.StreamEvents, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// fetchOne fetches the consumer's next message, delivered for the
// delivered-th time, with its acks and naks counted.
func fetchOne(t *testing.T, cons jetstream.Consumer, what string, delivered uint64) *recordedMsg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-b.Messages()
	if !ok {
		t.Fatalf("%s: not delivered", what)
	}
	if md, err := m.Metadata(); err != nil || md.NumDelivered != delivered {
		t.Fatalf("%s: delivered %+v (%v), want delivery %d", what, md, err, delivered)
	}
	return &recordedMsg{Msg: m}
}

// TestForgetGivesBackTheMessages: a number whose partition moves is written
// once more; when that write is refused at once (here the connection is
// closed), the messages it would have carried go back, for the new owner,
// rather than waiting out AckWait with a number written no more.
func TestForgetGivesBackTheMessages(t *testing.T) {
	h, s := idle(t, sec(10))
	cons := eventsConsumer(t, h, "forget")
	n := s.seed("6101", nil)
	h.sent1("6101", "ev-1", sec(5))
	msg := fetchOne(t, cons, "the event", 1)
	s.handle(context.Background(), msg)
	if !n.dirty || len(n.held) != 1 {
		t.Fatalf("the event did not change its number (dirty %v, %d held)", n.dirty, len(n.held))
	}
	h.nc.Close()
	s.w.forget(n, s.cfg.Now(), time.Now())
	if !n.gone || len(n.held) != 0 || msg.naks != 1 || msg.acks != 0 {
		t.Fatalf("forgotten with its write refused: gone %v, %d held, the message nak'ed %d and acked %d times; want it nak'ed once",
			n.gone, len(n.held), msg.naks, msg.acks)
	}
}

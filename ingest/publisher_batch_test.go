package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestBatchPublisherDeduplicates: JetStream's duplicate window applies to
// fast-batch messages. Bodies published several times at once, within one
// batch and across batches, are stored once each, and every publish is
// answered as stored.
func TestBatchPublisherDeduplicates(t *testing.T) {
	nc := connectJetStream(t, "dedupe-test")
	sc := ingest.DefaultStreamConfig()
	sc.DuplicateWindow = time.Minute // the copies come within it however slow the machine
	js := rawStream(t, nc, sc)
	opts := ingest.DefaultBatchOptions()
	opts.Flow = 4 // flow acks as well as commits cover messages
	pub, err := ingest.NewBatchPublisher(nc, 1024, 5*time.Second, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	const distinct, copies = 60, 4
	var wg sync.WaitGroup
	errs := make(chan error, distinct*copies)
	for c := 0; c < copies; c++ {
		for i := 0; i < distinct; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				now := time.Now()
				if _, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(body(i)), body(i), now, now.Add(5*time.Second)); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	// Once more, alone: a batch of only duplicates reports them. (Which
	// message of a batch with stored ones was a duplicate is not known.)
	// The last batch has ended (its linger), so the retry starts its own.
	testutil.Eventually(t, 5*time.Second, "the last batch to end", func() (bool, string) {
		return !ingest.BatchOpen(pub), "a batch is open"
	})
	now := time.Now()
	if dup, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(body(0)), body(0), now, now.Add(5*time.Second)); err != nil || !dup {
		t.Fatalf("a lone retry: got duplicate %v, %v; want true, nil", dup, err)
	}
	seen := storedIDs(t, js)
	if len(seen) != distinct {
		t.Fatalf("stored %d distinct bodies, want %d", len(seen), distinct)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("body %s stored %d times, want 1", id, n)
		}
	}
}

// TestBatchPublisherRefusedMessage: a message the stream refuses for itself
// (here: over the stream's max message size) fails at once, while the
// messages around it, whose batch the refusal ends, are published again and
// stored.
func TestBatchPublisherRefusedMessage(t *testing.T) {
	nc := connectJetStream(t, "refused-test")
	js := rawStream(t, nc, ingest.DefaultStreamConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.StreamRaw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := ingest.NewBatchPublisher(nc, 1024, 3*time.Second, ingest.DefaultBatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	big := []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 8000)))
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []int
		var bigErr error
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := body(1000*round + i)
				if i == 20 {
					b = append(big, byte(round))
				}
				start := time.Now()
				_, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(b), b, start, start.Add(3*time.Second))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case i == 20:
					bigErr = err
					if time.Since(start) > 2*time.Second {
						t.Errorf("the refused message took %s to fail, want well within the ack timeout", time.Since(start))
					}
				case err != nil:
					failed = append(failed, i)
					t.Errorf("publish %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if bigErr == nil || errors.Is(bigErr, ingest.ErrAckTimeout) {
			t.Fatalf("round %d: the oversize message: got %v, want the stream's refusal", round, bigErr)
		}
		if len(failed) > 0 {
			t.Fatalf("round %d: %d messages beside the refused one failed", round, len(failed))
		}
	}
	if seen := storedIDs(t, js); len(seen) != 3*39 {
		t.Fatalf("stored %d bodies, want %d", len(seen), 3*39)
	}
}

// TestBatchPublisherStreamWithoutBatches: a stream that does not allow
// batches refuses each message at once; nothing waits for the ack timeout.
func TestBatchPublisherStreamWithoutBatches(t *testing.T) {
	nc := connectJetStream(t, "nobatch-test")
	sc := ingest.DefaultStreamConfig()
	sc.AllowBatch = false
	rawStream(t, nc, sc)
	pub, err := ingest.NewBatchPublisher(nc, 16, 3*time.Second, ingest.DefaultBatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	start := time.Now()
	_, err = pub.Publish(schema.DefaultApp, schema.RawMsgID(body(1)), body(1), start, start.Add(3*time.Second))
	// At once: well before the 3 s ack timeout, with a margin for a
	// loaded machine.
	if err == nil || errors.Is(err, ingest.ErrAckTimeout) || time.Since(start) > 2*time.Second {
		t.Fatalf("got %v after %s, want the stream's refusal at once", err, time.Since(start))
	}
}

// TestBatchPublisherProtocol runs the publisher against a scripted stream (a
// plain subscriber answering as JetStream does), to reach the answers a real
// stream gives only after a gap, a restart or a lost message: a publish
// succeeds only once an answer covers its message, and a message the stream
// did not store for its batch is published again in a new batch.
func TestBatchPublisherProtocol(t *testing.T) {
	tests := []struct {
		name string
		// answer returns the reply to message seq of the n-th batch (from
		// 0) holding sent messages so far, commit telling whether it ends
		// the batch; "" sends none.
		answer func(n int, seq uint64, commit bool, sent uint64) string
		// wantResent: a message is seen in two batches.
		wantResent bool
		// wantTimeout: every publish ends with ErrAckTimeout.
		wantTimeout bool
	}{
		{
			name: "flow acks and commits",
			answer: func(n int, seq uint64, commit bool, sent uint64) string {
				switch {
				case commit:
					return pubAck(7, sent)
				case seq%2 == 0:
					return fmt.Sprintf(`{"type":"ack","seq":%d,"msgs":2}`, seq)
				}
				return ""
			},
		},
		{
			name: "commit covering less than was sent",
			answer: func(n int, seq uint64, commit bool, sent uint64) string {
				if !commit {
					return ""
				}
				if n == 0 {
					return pubAck(7, sent-1) // the last message was not stored
				}
				return pubAck(9, sent)
			},
			wantResent: true,
		},
		{
			name: "batch unknown to the stream",
			answer: func(n int, seq uint64, commit bool, sent uint64) string {
				switch {
				case n == 0 && (seq > 1 || commit):
					// The stream lost the batch after its first message
					// (say, in a restart): it refuses the rest and the
					// commit. The first message is covered by no answer.
					return `{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"},"stream":"WAHOOK_RAW"}`
				case n == 0:
					return ""
				case commit:
					return pubAck(9, sent)
				}
				return ""
			},
			wantResent: true,
		},
		{
			name:        "no answer",
			answer:      func(int, uint64, bool, uint64) string { return "" },
			wantTimeout: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := connectJetStream(t, "protocol-test")
			st := newScriptedStream(t, nc, tt.answer)
			opts := ingest.DefaultBatchOptions()
			opts.Linger, opts.MaxDelay = 5*time.Millisecond, 5*time.Millisecond
			pub, err := ingest.NewBatchPublisher(nc, 64, 500*time.Millisecond, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			var wg sync.WaitGroup
			for i := 0; i < 6; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := body(i)
					now := time.Now()
					_, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(b), b, now, now.Add(500*time.Millisecond))
					switch {
					case tt.wantTimeout && !errors.Is(err, ingest.ErrAckTimeout):
						t.Errorf("publish %d: got %v, want ErrAckTimeout", i, err)
					case !tt.wantTimeout && err != nil:
						t.Errorf("publish %d: %v", i, err)
					case err == nil && !st.isCovered(schema.RawMsgID(b)):
						t.Errorf("publish %d succeeded, but no answer covered its message", i)
					}
				}()
			}
			wg.Wait()
			if got := st.resent(); got != tt.wantResent {
				t.Fatalf("a message published in two batches: got %v, want %v", got, tt.wantResent)
			}
		})
	}
}

// TestBatchPublisherRefusedThenCovered: the stream refuses message 2 of a
// batch for itself, then its commit's PubAck covers the whole batch, 1..sent.
// A real stream does that: its store-time error paths (nats-server's
// stream.go, processJetStreamMsgWithBatch: account limits, an invalid TTL, a
// failed store) answer the message with an error and return without
// fastBatchRegisterSequences, so the batch's pending count is not
// decremented and the flow acks and PubAck that follow cover the refused
// sequence. The refused message must fail (Meta gets 503 and retries);
// before, the covering ack resolved it as stored, and Meta got 200 for a
// body never stored.
func TestBatchPublisherRefusedThenCovered(t *testing.T) {
	nc := connectJetStream(t, "refused-covered-test")
	var refusedIn atomic.Int64 // the batch whose message 2 the stream refused
	refusedIn.Store(-1)
	st := newScriptedStream(t, nc, func(n int, seq uint64, commit bool, sent uint64) string {
		switch {
		case commit:
			return pubAck(7, sent)
		case seq == 2 && refusedIn.Load() < 0:
			refusedIn.Store(int64(n))
			return `{"error":{"code":500,"err_code":10077,"description":"insufficient resources"},"stream":"WAHOOK_RAW","seq":0}`
		}
		return ""
	})
	opts := ingest.DefaultBatchOptions()
	// Time for the concurrent publishes to join one batch.
	opts.Linger, opts.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	pub, err := ingest.NewBatchPublisher(nc, 64, 2*time.Second, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// The first publish of a round may go alone, as a batch of one; a
	// round whose publishes all went alone refuses nothing.
	for round := 0; round < 10 && refusedIn.Load() < 0; round++ {
		const n = 8
		errs := make([]error, n)
		ids := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := body(100*round + i)
				ids[i] = schema.RawMsgID(b)
				<-start
				now := time.Now()
				_, errs[i] = pub.Publish(schema.DefaultApp, ids[i], b, now, now.Add(2*time.Second))
			}()
		}
		close(start)
		wg.Wait()
		if refusedIn.Load() < 0 {
			continue
		}
		refused := st.idAt(int(refusedIn.Load()), 2)
		for i, err := range errs {
			switch {
			case ids[i] != refused && err != nil:
				t.Errorf("publish %d, covered and not refused: %v", i, err)
			case ids[i] == refused && err == nil:
				t.Errorf("publish %d, refused by the stream, then covered by the commit's PubAck: answered as stored", i)
			case ids[i] == refused && !strings.Contains(err.Error(), "insufficient resources"):
				t.Errorf("publish %d, refused by the stream: got %v, want the stream's refusal", i, err)
			}
		}
	}
	if refusedIn.Load() < 0 {
		t.Fatal("no batch reached a second message in 10 rounds")
	}
}

// TestBatchPublisherClose: Close answers the messages still awaiting an
// ack, so that no request hangs past a shutdown.
func TestBatchPublisherClose(t *testing.T) {
	nc := connectJetStream(t, "close-test")
	st := newScriptedStream(t, nc, func(int, uint64, bool, uint64) string { return "" })
	pub, err := ingest.NewBatchPublisher(nc, 64, time.Minute, ingest.DefaultBatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		now := time.Now()
		_, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(body(1)), body(1), now, now.Add(time.Minute))
		errc <- err
	}()
	// The message is published and awaits its ack, which never comes.
	testutil.Eventually(t, 5*time.Second, "the stream to receive the message", func() (bool, string) {
		n := st.received()
		return n == 1, fmt.Sprintf("%d messages received", n)
	})
	pub.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ingest.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a publish awaiting its ack did not return after Close")
	}
	now := time.Now()
	if _, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(body(2)), body(2), now, now.Add(time.Second)); !errors.Is(err, ingest.ErrClosed) {
		t.Fatalf("publish after Close: got %v, want ErrClosed", err)
	}
}

// TestBatchPublisherExpiresAfterIdle: the loop that answers ErrAckTimeout
// rests while no publish waits, and a publish after a rest, or after the
// last one timed out, is still answered at its deadline rather than never.
func TestBatchPublisherExpiresAfterIdle(t *testing.T) {
	nc := connectJetStream(t, "idle-test")
	newScriptedStream(t, nc, func(int, uint64, bool, uint64) string { return "" }) // no ack ever
	pub, err := ingest.NewBatchPublisher(nc, 64, time.Minute, ingest.DefaultBatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const wait = 200 * time.Millisecond
	for round := range 3 {
		// Many times the loop's resolution with nothing in flight.
		time.Sleep(100 * time.Millisecond)
		errc := make(chan error, 1)
		start := time.Now()
		go func() {
			b := body(round)
			_, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(b), b, start, start.Add(wait))
			errc <- err
		}()
		select {
		case err := <-errc:
			if !errors.Is(err, ingest.ErrAckTimeout) {
				t.Fatalf("round %d: got %v, want ErrAckTimeout", round, err)
			}
			// The loop answers within its resolution of the deadline;
			// half a second's margin for a loaded machine, less than a
			// rest ended only by the publisher's 1 s sweep would take.
			if took := time.Since(start); took < wait || took > wait+500*time.Millisecond {
				t.Fatalf("round %d: answered after %s, want its deadline (%s) or a little later", round, took, wait)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: a publish whose ack never came was not answered at its deadline", round)
		}
	}
}

// TestBatchPublisherLetsGoOfTimedOutBody: a publish answered ErrAckTimeout
// leaves its message in its batch until the batch is swept, about
// 2*ackTimeout after its last message, while the request, answered 503,
// gives its body memory back (Config.BodyMemory). Before, the message still
// referenced its body all that time, so during a JetStream stall timed-out
// large bodies piled up beyond the body memory; now the body is let go of
// as the request gets its answer.
func TestBatchPublisherLetsGoOfTimedOutBody(t *testing.T) {
	nc := connectJetStream(t, "timedout-body-test")
	newScriptedStream(t, nc, func(int, uint64, bool, uint64) string { return "" }) // no ack ever
	// The batch is swept 2*ackTimeout after its message at the earliest;
	// the request's own deadline is 500 ms, so the check below has 3.5 s
	// after the answer on a slow machine (half a second with an
	// ackTimeout of 500 ms).
	const ackTimeout = 2 * time.Second
	pub, err := ingest.NewBatchPublisher(nc, 64, ackTimeout, ingest.DefaultBatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	big := bytes.Repeat([]byte("x"), 900<<10)
	now := time.Now()
	if _, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(big), big, now, now.Add(500*time.Millisecond)); !errors.Is(err, ingest.ErrAckTimeout) {
		t.Fatalf("got %v, want ErrAckTimeout", err)
	}
	msgs, held := ingest.AnsweredBodies(pub)
	if msgs == 0 {
		t.Fatal("the timed-out message's batch was already swept: nothing to check")
	}
	if held != 0 {
		t.Fatalf("after the timeout, %d answered message(s) still hold %d bytes of body, want 0", msgs, held)
	}
}

func pubAck(streamSeq, count uint64) string {
	return fmt.Sprintf(`{"stream":"WAHOOK_RAW","seq":%d,"batch":"b","count":%d}`, streamSeq, count)
}

// scriptedStream answers fast-batch messages on the RAW subjects as its
// script says, and records which message ids each answer covered.
type scriptedStream struct {
	mu      sync.Mutex
	batches map[string]int      // batch id -> n
	ids     map[string][]string // batch id -> message ids by sequence
	covered map[string]bool
	twice   bool
}

func newScriptedStream(t *testing.T, nc *nats.Conn, answer func(n int, seq uint64, commit bool, sent uint64) string) *scriptedStream {
	st := &scriptedStream{batches: map[string]int{}, ids: map[string][]string{}, covered: map[string]bool{}}
	seenIn := map[string]string{}
	sub, err := nc.Subscribe(schema.SubjectRawAll, func(m *nats.Msg) {
		tok := strings.Split(m.Reply, ".")
		if len(tok) < 6 || tok[len(tok)-1] != "$FI" {
			t.Errorf("reply %q is not a fast-batch reply", m.Reply)
			return
		}
		id, op := tok[len(tok)-6], tok[len(tok)-2]
		seq, _ := strconv.ParseUint(tok[len(tok)-3], 10, 64)
		st.mu.Lock()
		n, ok := st.batches[id]
		if !ok {
			n = len(st.batches)
			st.batches[id] = n
		}
		if op != "3" {
			msgID := m.Header.Get(schema.HeaderMsgID)
			if b, ok := seenIn[msgID]; ok && b != id {
				st.twice = true
			}
			seenIn[msgID] = id
			st.ids[id] = append(st.ids[id], msgID)
		}
		sent := uint64(len(st.ids[id]))
		reply := answer(n, seq, op == "2" || op == "3", sent)
		// Record what the answer covers before the publisher can see it.
		var r struct {
			Type  string `json:"type"`
			Seq   uint64 `json:"seq"`
			Count uint64 `json:"count"`
			Error any    `json:"error"`
		}
		if reply != "" {
			_ = json.Unmarshal([]byte(reply), &r)
			upto := r.Count
			if r.Type == "ack" {
				upto = r.Seq
			}
			if r.Error == nil {
				for i := uint64(0); i < upto && i < sent; i++ {
					st.covered[st.ids[id][i]] = true
				}
			}
		}
		st.mu.Unlock()
		if reply != "" {
			_ = m.Respond([]byte(reply))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return st
}

func (st *scriptedStream) isCovered(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.covered[id]
}

// received is the number of messages (not commits) the stream was sent.
func (st *scriptedStream) received() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, ids := range st.ids {
		n += len(ids)
	}
	return n
}

// idAt returns the message id of message seq (from 1) of the n-th batch.
func (st *scriptedStream) idAt(n int, seq uint64) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, m := range st.batches {
		if m == n && seq >= 1 && seq <= uint64(len(st.ids[id])) {
			return st.ids[id][seq-1]
		}
	}
	return ""
}

func (st *scriptedStream) resent() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.twice
}

// rawStream provisions the RAW stream as sc says and returns a JetStream
// context.
// connectJetStream starts a JetStream server for the test and connects to
// it as name; the connection closes when the test ends.
func connectJetStream(t *testing.T, name string) *nats.Conn {
	t.Helper()
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL(), ingest.NATSOptions(name)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func rawStream(t *testing.T, nc *nats.Conn, sc ingest.StreamConfig) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ingest.EnsureRawStream(ctx, js, sc, true); err != nil {
		t.Fatal(err)
	}
	return js
}

// storedIDs counts the stored messages of the RAW stream by Nats-Msg-Id.
func storedIDs(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.StreamRaw)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get msg %d: %v", seq, err)
		}
		seen[m.Header.Get(schema.HeaderMsgID)]++
	}
	return seen
}

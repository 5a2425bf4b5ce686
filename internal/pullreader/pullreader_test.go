package pullreader_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/pullreader"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// setup starts a server with stream S and consumer C on it, and returns a
// JetStream context over url (the server's, or a proxy's) and the server.
func setup(t *testing.T, via func(server string) string) (jetstream.JetStream, jetstream.JetStream) {
	t.Helper()
	srv := schematest.StartJetStream(t)
	direct := connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := direct.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	reader := direct
	if via != nil {
		reader = connect(t, via(srv.URL()))
	}
	return direct, reader
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func open(t *testing.T, js jetstream.JetStream, onErr func(error)) *pullreader.Reader {
	t.Helper()
	return openSized(t, js, 4, 1<<20, onErr)
}

// openSized reads in pulls of 4 messages, holding up to buffer messages
// of maxBytes together.
func openSized(t *testing.T, js jetstream.JetStream, buffer int, maxBytes int64, onErr func(error)) *pullreader.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "S", "C")
	if err != nil {
		t.Fatal(err)
	}
	r, err := pullreader.Open(cons, buffer, maxBytes, onErr, jetstream.PullMaxMessages(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func publish(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := js.Publish(context.Background(), "s.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// next reads one message within 10 s and acks it.
func next(t *testing.T, r *pullreader.Reader) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := r.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	return string(m.Data())
}

// TestNext: messages come in order, past several pulls, and a Next with
// none to read ends with its context.
func TestNext(t *testing.T) {
	js, _ := setup(t, nil)
	r := open(t, js, nil)
	publish(t, js, 0, 10)
	for i := range 10 {
		if got := next(t, r); got != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if m, err := r.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing to read: %v, %v; want the context's deadline", m, err)
	}
}

// TestStopEndsNext: Stop ends a Next that waits, and the ones after, even
// with messages queued.
func TestStopEndsNext(t *testing.T) {
	js, _ := setup(t, nil)
	r := open(t, js, nil)
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err = r.Next(context.Background())
	}()
	time.Sleep(100 * time.Millisecond)
	r.Stop()
	wg.Wait()
	if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Fatalf("waiting Next after Stop: %v", err)
	}
	if _, err := r.Next(context.Background()); !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Fatalf("Next after Stop: %v", err)
	}
	r.Stop() // twice is fine

	queued := open(t, js, nil)
	publish(t, js, 0, 3)
	testutil.Eventually(t, 10*time.Second, "messages delivered to the reader", func() (bool, string) {
		info, err := js.Consumer(context.Background(), "S", "C")
		if err != nil {
			return false, err.Error()
		}
		return info.CachedInfo().NumAckPending == 3, fmt.Sprint(info.CachedInfo().NumAckPending, " delivered")
	})
	queued.Stop()
	for range 3 {
		if m, err := queued.Next(context.Background()); !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			t.Fatalf("Next after Stop with messages queued: %v, %v", m, err)
		}
	}
}

// TestStopGivesBack: the messages a stopped reader was given and had not
// returned (queued for Next, or held in the client's subscription while the
// queue was full) are delivered again at once to the next reader; they
// waited the consumer's AckWait (30 s by default), and a stage restarted on
// its consumer went without them that long.
func TestStopGivesBack(t *testing.T) {
	js, _ := setup(t, nil)
	first := openSized(t, js, 2, 1<<20, nil) // 2 queued, the rest of a pull of 4 in the subscription
	publish(t, js, 0, 10)
	if got := next(t, first); got != "0" {
		t.Fatalf("first message %q", got)
	}
	// Stopped only once nothing is on its way to it: no pull request
	// waiting and the count delivered the same for 300 ms. A message the
	// server sends after the stop reaches no one and comes back after
	// AckWait, which no reader can help (a CI run stopped the reader with
	// a second pull's two messages in flight).
	last := -1
	testutil.Eventually(t, 10*time.Second, "a pull's messages delivered to the first reader, none on its way", func() (bool, string) {
		time.Sleep(300 * time.Millisecond)
		c, err := js.Consumer(context.Background(), "S", "C")
		if err != nil {
			return false, err.Error()
		}
		n, waiting := c.CachedInfo().NumAckPending, c.CachedInfo().NumWaiting
		steady := n >= 3 && n == last && waiting == 0
		last = n
		return steady, fmt.Sprint(n, " delivered, not acked; ", waiting, " pull requests waiting")
	})
	first.Stop()
	second := open(t, js, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // far below AckWait
	defer cancel()
	got := map[string]bool{}
	for len(got) < 9 {
		m, err := second.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of the 9 messages not acked: %v", len(got), err)
		}
		got[string(m.Data())] = true
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 10; i++ {
		if !got[fmt.Sprint(i)] {
			t.Fatalf("message %d missing: %v", i, got)
		}
	}
}

// TestBytesBound: while the messages queued for Next reach maxBytes, the
// reader takes no more, and the client asks for no more; each message
// still comes once it is read.
func TestBytesBound(t *testing.T) {
	js, _ := setup(t, nil)
	r := openSized(t, js, 100, 30, nil) // 100 messages, or 30 bytes
	const n = 60
	for i := range n {
		if _, err := js.Publish(context.Background(), "s.x", fmt.Appendf(nil, "message-%02d", i)); err != nil { // 10 bytes
			t.Fatal(err)
		}
	}
	// Three queued (30 bytes), one in the callback waiting for room, the
	// rest of the pulls (4 messages each) made before it waited.
	time.Sleep(time.Second)
	info, err := js.Consumer(context.Background(), "S", "C")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().NumAckPending; got > 3+1+4+4 {
		t.Fatalf("%d messages delivered to a reader holding 30 bytes; want at most 12", got)
	}
	// Each read within 30 s: a pull nats.go skips (Heartbeat's comment)
	// costs two heartbeats; on a loaded CI machine one read of this test
	// waited just past 10 s when they were 5 s apart. What is checked here
	// is the bound and the order; TestSkippedPullMadeAgainSoon, the time to
	// the next pull.
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		if got, want := string(m.Data()), fmt.Sprintf("message-%02d", i); got != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
	}
}

// TestConsumerDeleted: once the consumer is deleted, Next says the
// reading ended instead of waiting for ever: deleted while a pull waits
// (the server ends the pull), and deleted before the pull came (no
// consumer answers it).
func TestConsumerDeleted(t *testing.T) {
	js, _ := setup(t, nil)
	r := open(t, js, nil)
	testutil.Eventually(t, 10*time.Second, "a pull waiting", func() (bool, string) {
		c, err := js.Consumer(context.Background(), "S", "C")
		if err != nil {
			return false, err.Error()
		}
		return c.CachedInfo().NumWaiting > 0, fmt.Sprint(c.CachedInfo().NumWaiting, " waiting")
	})
	if err := js.DeleteConsumer(context.Background(), "S", "C"); err != nil {
		t.Fatal(err)
	}
	ended := func(r *pullreader.Reader) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.Next(ctx); !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			t.Fatalf("Next on a deleted consumer: %v", err)
		}
	}
	ended(r)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stale, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "D", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, "S", "D"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []error
	r2, err := pullreader.Open(stale, 4, 1<<20, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	}, jetstream.PullMaxMessages(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Stop)
	ended(r2)
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || !errors.Is(reports[0], nats.ErrNoResponders) {
		t.Fatalf("reports: %v, want no responders", reports)
	}
}

// TestLostPullMadeAgain: a pull request lost on its way is never
// answered. The reader misses two heartbeats, reports it, and pulls
// again; once a pull passes, the messages come.
func TestLostPullMadeAgain(t *testing.T) {
	var proxy *testutil.NATSProxy
	js, readerJS := setup(t, func(url string) string {
		proxy = testutil.StartNATSProxy(t, url)
		proxy.Drop("$JS.API.CONSUMER.MSG.NEXT.S.C")
		return proxy.URL
	})
	var mu sync.Mutex
	var reports []error
	r := open(t, readerJS, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	})
	publish(t, js, 0, 3)
	testutil.Eventually(t, 4*pullreader.Heartbeat, "a missed heartbeat and a pull made again", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		missed := len(reports) > 0 && errors.Is(reports[0], jetstream.ErrNoHeartbeat)
		return missed && proxy.Dropped() >= 2, fmt.Sprintf("reports %v, %d pulls dropped", reports, proxy.Dropped())
	})
	proxy.Drop("")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 4*pullreader.Heartbeat)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("message %d after the pulls pass again: %v", i, err)
		}
		if got := string(m.Data()); got != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, got)
		}
		_ = m.Ack()
	}
}

// TestSkippedPullMadeAgainSoon: when no pull request waits on the server
// (nats.go skipped the next pull, or the last was lost on its way), the
// reader pulls again once it misses two heartbeats. At 5 s apart that was
// a 10 s stall with a backlog; now the message comes within 6 s of the
// reader's start, its first pull dropped. A dropped pull stands in for the
// skipped one: nats.go's race cannot be made to happen on purpose.
func TestSkippedPullMadeAgainSoon(t *testing.T) {
	var proxy *testutil.NATSProxy
	js, readerJS := setup(t, func(url string) string {
		proxy = testutil.StartNATSProxy(t, url)
		proxy.Drop("$JS.API.CONSUMER.MSG.NEXT.S.C")
		return proxy.URL
	})
	publish(t, js, 0, 1)
	start := time.Now()
	r := open(t, readerJS, nil)
	testutil.Eventually(t, 5*time.Second, "the first pull dropped", func() (bool, string) {
		return proxy.Dropped() >= 1, "none dropped"
	})
	proxy.Drop("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := r.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Ack()
	if took := time.Since(start); took > 6*time.Second {
		t.Fatalf("the message came %v after the reader started, its first pull dropped; want within 6 s (two heartbeats and a margin)", took)
	}
}

// fakeConsumer hands Consume's callback to the test.
type fakeConsumer struct {
	jetstream.Consumer
	handler jetstream.MessageHandler
}

func (c *fakeConsumer) Consume(h jetstream.MessageHandler, _ ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	c.handler = h
	return fakeConsumeContext{closed: make(chan struct{})}, nil
}

type fakeConsumeContext struct{ closed chan struct{} }

func (fakeConsumeContext) Stop()                     {}
func (fakeConsumeContext) Drain()                    {}
func (c fakeConsumeContext) Closed() <-chan struct{} { return c.closed }

// fakeMsg counts its naks.
type fakeMsg struct {
	jetstream.Msg
	naks atomic.Int32
}

func (m *fakeMsg) Data() []byte { return []byte("x") }
func (m *fakeMsg) Nak() error   { m.naks.Add(1); return nil }

// TestStopNaksARaceQueued: a message the client hands over while Stop
// runs is nak'ed whichever comes first; queued just as Stop emptied the
// queue, it stayed there, and came back only after AckWait (5 in 20,000
// in review).
func TestStopNaksARaceQueued(t *testing.T) {
	for i := range 20000 {
		c := &fakeConsumer{}
		r, err := pullreader.Open(c, 4, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := &fakeMsg{}
		start, done := make(chan struct{}), make(chan struct{})
		go func() { <-start; c.handler(m); close(done) }()
		go func() { <-start; r.Stop() }()
		close(start)
		<-done
		r.Stop() // returns once the first Stop's work is done
		if n := m.naks.Load(); n != 1 {
			t.Fatalf("run %d: a message handed over as Stop ran was nak'ed %d times, want once", i, n)
		}
	}
}

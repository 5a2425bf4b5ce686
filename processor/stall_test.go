package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// stageVia has the stage 1 instances started from now on reach NATS at
// url, with opts.
func (p *pipeline) stageVia(url string, opts ...nats.Option) {
	p.t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(nc.Close)
	if p.stageJS, err = jetstream.New(nc); err != nil {
		p.t.Fatal(err)
	}
}

// dropPulls has the stage 1 instances started from now on reach NATS
// through a proxy that drops their pull requests on RAW until told
// otherwise.
func (p *pipeline) dropPulls() *testutil.NATSProxy {
	p.t.Helper()
	proxy := testutil.StartNATSProxy(p.t, p.nats.URL())
	proxy.Drop("$JS.API.CONSUMER.MSG.NEXT." + schema.StreamRaw + ".")
	p.stageVia(proxy.URL)
	return proxy
}

// TestStage1StalledConsumer: a pull request lost on its way to the
// consumer (as when the NATS node leading the consumer dies holding it) is
// never answered. Here a proxy between stage 1 and the server drops stage
// 1's pull requests for a while: stage 1 notices that its consumer holds
// bodies while no pull request waits, and reads it again, until a pull
// passes; then every body is stored. Its reader also pulls again by
// itself after two missed heartbeats (4 s, TestStage1ReaderLostItsPull):
// the test waits for the check's own warning, the second line.
func TestStage1StalledConsumer(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxAckPending = 20 // pulls of 10
	p.cfg.StallAfter = 2 * time.Second
	proxy := p.dropPulls()
	p.start()
	const n = 30
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.stall-%d", i), 1781514312+i))
	}
	// Stage 1 reads its consumer again, and that pull is lost too. Each
	// look takes two backlog polls (5 s apart) after the last start.
	testutil.Eventually(t, 60*time.Second, "stage 1 to read its stalled consumer again", func() (bool, string) {
		got := p.metric(0, "wahook_processor_consumer_restarts_total")
		stalls := p.warnings.FilterMessageSnippet("delivered nothing").Len()
		return stalls >= 1 && got >= 1 && proxy.Dropped() >= 2, fmt.Sprintf("%d stalls seen, %v restarts, %d pulls dropped", stalls, got, proxy.Dropped())
	})
	info, err := p.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != n || info.NumWaiting != 0 || proxy.Dropped() < 2 {
		t.Fatalf("while pulls are dropped: %d pending, %d pulls waiting, %d pulls dropped; want %d, 0, at least 2",
			info.NumPending, info.NumWaiting, proxy.Dropped(), n)
	}
	proxy.Drop("")
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != n {
		t.Fatalf("statuses stored: got %d, want %d", got, n)
	}
}

// TestStage1ReaderLostItsPull: of two instances on one consumer, the
// second's pull requests are lost on their way, while the first's waits.
// The consumer then always has a pull request waiting, so nothing on the
// server shows the loss (the stall rule above never holds), and nats.go's
// Messages iterator, which watches the heartbeats only within one Next,
// waited for ever: the second instance took nothing while the first did
// all the work. Read with Consume, the second misses the heartbeats of its
// request, says so, and pulls again; once a pull passes, it shares the
// work, and every body is stored once.
func TestStage1ReaderLostItsPull(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxAckPending = 20 // pulls of 10
	p.start()
	proxy := p.dropPulls()
	p.start()
	n := 0
	publish := func(count int) {
		for range count {
			p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.lost-%d", n), 1781514312+n))
			n++
		}
	}
	publish(200)
	// Two missed heartbeats (2 s each) after its first pull, it pulls
	// again, and that one is lost too.
	testutil.Eventually(t, 60*time.Second, "the second instance to pull again", func() (bool, string) {
		restarts := p.metric(1, "wahook_processor_consumer_restarts_total")
		return restarts >= 1 && proxy.Dropped() >= 2, fmt.Sprintf("%v restarts, %d pulls dropped", restarts, proxy.Dropped())
	})
	if got := p.metric(1, "wahook_processor_bodies_total"); got != 0 {
		t.Fatalf("the second instance stored %v bodies while its pulls were dropped", got)
	}
	if got := p.warnings.FilterMessageSnippet("missed two heartbeats").Len(); got < 1 {
		t.Errorf("no warning of the lost pull request")
	}
	proxy.Drop("")
	testutil.Eventually(t, 60*time.Second, "the second instance to take bodies", func() (bool, string) {
		publish(10)
		got := p.metric(1, "wahook_processor_bodies_total")
		return got > 0, fmt.Sprintf("%v bodies, %d sent", got, n)
	})
	p.drained(60 * time.Second)
	if got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events"); got != uint64(n) {
		t.Fatalf("statuses stored: got %d, want %d", got, n)
	}
	if got := p.count("SELECT count() FROM {db}.status_events FINAL"); got != uint64(n) {
		t.Fatalf("status rows (FINAL): got %d, want %d", got, n)
	}
	t.Logf("%d bodies; per instance %v and %v", n, p.metric(0, "wahook_processor_bodies_total"), p.metric(1, "wahook_processor_bodies_total"))
}

// lateWriter takes its time over every write.
type lateWriter struct {
	processor.Writer
	delay time.Duration
}

func (w lateWriter) Write(ctx context.Context, rows *schema.Rows) error {
	time.Sleep(w.delay)
	return w.Writer.Write(ctx, rows)
}

// TestStage1BusyReaderDropsNothing: while stage 1 waits for its writer,
// what the server sends piles up in the client. nats.go's Messages
// iterator kept it in a channel as long as one pull, which the server's
// status messages share, so once it was full the client dropped bodies as
// a slow consumer's: each came back only after AckWait, and the iterator
// asked for one fewer each time. Read with Consume, nothing is dropped,
// and no body is delivered twice.
func TestStage1BusyReaderDropsNothing(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	p.cfg.MaxAckPending = 20 // pulls of 10
	p.cfg.BatchRows = 5      // a wait for the writer every 5 bodies
	// Bodies wait for the writer in turn: the 20th of a pull about four
	// writes. A redelivery past AckWait (5 s in the shared pipeline) on a
	// loaded machine would count as a second delivery.
	p.cfg.AckWait = 30 * time.Second
	p.faults = func(inner processor.Writer) processor.Writer {
		return lateWriter{Writer: inner, delay: 150 * time.Millisecond}
	}
	var slow atomic.Int64
	p.stageVia(p.nats.URL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slow.Add(1)
		}
	}))
	p.start()
	const n = 300
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.busy-%d", i), 1781514312+i))
	}
	p.drained(120 * time.Second)
	info, err := p.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.count("SELECT count() FROM {db}.status_events FINAL"); got != n {
		t.Fatalf("status rows (FINAL): got %d, want %d", got, n)
	}
	// The consumer's sequence counts every delivery, the first and those
	// after (NumRedelivered forgets a body once it is acked).
	if slow.Load() != 0 || info.Delivered.Consumer != n {
		t.Fatalf("%d slow consumer reports, %d deliveries of %d bodies; want none, and one each", slow.Load(), info.Delivered.Consumer, n)
	}
}

// TestStage1ConsumerDeletedBetweenPulls: stage 1's consumer deleted while
// none of its pull requests waits (here the proxy drops them meanwhile,
// so the deletion ends none). The next pull reaches no consumer, and the
// server answers 503; nats.go takes that for a passing answer and asks
// again without end, and the stall rule does not count a consumer that is
// not found, so stage 1 stopped until restarted. Now the reading ends,
// stage 1 provisions the consumer again, and the bodies are stored.
func TestStage1ConsumerDeletedBetweenPulls(t *testing.T) {
	p := newPipeline(t, schematest.ClickHouse(t))
	proxy := p.dropPulls()
	p.start()
	testutil.Eventually(t, 30*time.Second, "stage 1's first pull dropped", func() (bool, string) {
		return proxy.Dropped() >= 1, fmt.Sprintf("%d pulls dropped", proxy.Dropped())
	})
	info, err := p.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumWaiting != 0 {
		t.Fatalf("%d pulls waiting, want none", info.NumWaiting)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.js.DeleteConsumer(ctx, schema.StreamRaw, p.cfg.Consumer); err != nil {
		t.Fatal(err)
	}
	proxy.Drop("")
	const n = 5
	for i := range n {
		p.publish("default", statusBody("107655290331184", "15557810001", fmt.Sprintf("wamid.deleted-%d", i), 1781514312+i))
	}
	// Two missed heartbeats after its first pull (4 s), stage 1 pulls
	// again, and that pull finds no consumer.
	testutil.Eventually(t, 60*time.Second, "the bodies stored", func() (bool, string) {
		got := p.count("SELECT uniqExact(event_id) FROM {db}.status_events")
		return got == n, fmt.Sprintf("%d of %d stored", got, n)
	})
	if got := p.warnings.FilterMessageSnippet("stopped, reading again").Len(); got < 1 {
		t.Errorf("no warning of the reading ended")
	}
}

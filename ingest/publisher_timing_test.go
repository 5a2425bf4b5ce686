package ingest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
)

// BenchmarkPublisher publishes ~900-byte bodies from 64 goroutines (the
// requests in flight of `make bench`) to an embedded JetStream over an
// in-process connection, each publish waiting for the ack that covers it,
// and reports the process CPU time per publish (server included) beside the
// wall time. Compare the publishers of one run.
func BenchmarkPublisher(b *testing.B) {
	for _, kind := range []string{"async", "batch"} {
		b.Run(kind, func(b *testing.B) {
			nc := inProcessJetStream(b)
			pub, closePub := newPublisher(b, kind, nc, 8192, 5*time.Second)
			defer closePub()
			const workers = 64
			bodies := make([][]byte, 4096)
			for i := range bodies {
				bodies[i] = benchBody(i)
			}
			var seq atomic.Int64
			b.SetBytes(int64(len(bodies[0])))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			start := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := seq.Add(1)
						if i > int64(b.N) {
							return
						}
						// Unique bodies: a repeated one is a duplicate.
						body := append(bodies[i%int64(len(bodies))][:0:0], bodies[i%int64(len(bodies))]...)
						body = append(body, byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
						now := time.Now()
						if _, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(body), body, now, now.Add(5*time.Second)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// publisher is what the tests need of either publisher.
type publisher interface {
	ingest.Publisher
	Drain(ctx context.Context) error
}

// newPublisher returns a publisher of kind ("async" or "batch") on nc, with
// the RAW stream provisioned, and a function that closes it.
func newPublisher(tb testing.TB, kind string, nc *nats.Conn, maxInflight int, ackTimeout time.Duration) (publisher, func()) {
	tb.Helper()
	async, err := ingest.NewJetStreamPublisher(nc, maxInflight, ackTimeout)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ingest.EnsureRawStream(ctx, async.JetStream(), ingest.DefaultStreamConfig(), false); err != nil {
		tb.Fatal(err)
	}
	switch kind {
	case "async":
		return async, func() {}
	case "batch":
		p, err := ingest.NewBatchPublisher(nc, maxInflight, ackTimeout, ingest.DefaultBatchOptions())
		if err != nil {
			tb.Fatal(err)
		}
		return p, p.Close
	}
	tb.Fatalf("unknown publisher %q", kind)
	return nil, nil
}

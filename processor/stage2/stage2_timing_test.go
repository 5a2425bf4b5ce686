package stage2

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// BenchmarkEventToKV measures the time from publishing an EVENTS message to
// the KV entry that reflects it, as a KV watcher sees it, under background
// traffic of sent statuses spread over 100 numbers at a steady rate. Each
// iteration is one probe: a quality update carrying a unique
// messaging_limit, on a busy number (one with background traffic, written
// every Coalesce) or on an idle one (written at once), in turn. Everything
// runs in one process: the server, the load, stage 2 and the watcher.
// ns/op includes a random pause before each probe; read the metrics.
//
//	go test -run '^$' -bench EventToKV -benchtime 100x ./processor/stage2/
func BenchmarkEventToKV(b *testing.B) {
	for _, rate := range []int{2000, 5000} {
		for _, coalesce := range []time.Duration{100 * time.Millisecond, 20 * time.Millisecond} {
			b.Run(fmt.Sprintf("rate=%d/coalesce=%v", rate, coalesce), func(b *testing.B) {
				benchEventToKV(b, rate, coalesce)
			})
		}
	}
}

func benchEventToKV(b *testing.B, rate int, coalesce time.Duration) {
	const numbers = 100
	h := start(b, time.Now(), func(c *Config) {
		c.Now = time.Now
		c.Coalesce = coalesce
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := h.js.KeyValue(ctx, schema.BucketPacing)
	if err != nil {
		b.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var want atomic.Pointer[[]byte] // `"messaging_limit":"<token>"` of the probe in flight
	seen := make(chan time.Time, 1)
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			if p := want.Load(); p != nil && bytes.Contains(e.Value(), *p) {
				want.Store(nil)
				seen <- time.Now()
			}
		}
	}()

	// Background load: rate sent statuses per second over the numbers, in
	// ticks of 10 ms, Meta's time = now; on a connection of its own, so
	// that the probes do not queue behind it.
	loadNC, err := nats.Connect(h.url)
	if err != nil {
		b.Fatal(err)
	}
	defer loadNC.Close()
	loadJS, err := jetstream.New(loadNC, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	var loadWG sync.WaitGroup
	var loaded atomic.Int64
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		per := rate / 100
		var n int
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			for k := 0; k < per; k++ {
				n++
				num := fmt.Sprintf("9%03d", n%numbers)
				id := fmt.Sprintf("load-%d", n)
				h.publishTo(loadJS, schema.KindStatus, num, id, schema.StatusRow{EventID: id, EventTime: now, PhoneNumberID: num, Status: "sent"})
			}
			loaded.Add(int64(per))
		}
	}()
	// Let the numbers become busy: the load's warm-up, part of the benchmark.
	time.Sleep(500 * time.Millisecond)
	applied0, written0 := metricValue(h.s.m.events), metricValue(h.s.m.signals)
	start := time.Now()

	var busy, idle []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		num := fmt.Sprintf("9%03d", i%numbers) // busy
		if i%2 == 1 {
			num = fmt.Sprintf("8%03d", i) // idle: never seen before
		}
		token := fmt.Sprintf("probe-%d", i)
		pat := []byte(`"messaging_limit":"` + token + `"`)
		want.Store(&pat)
		id := "probe-" + token
		// Probes follow each other, so without a pause each would come
		// just after the flush that wrote the one before it.
		time.Sleep(rand.N(coalesce))
		t0 := time.Now()
		h.publish(schema.KindNumber, num, id, schema.ManagementRow{
			EventID: id, Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: t0,
			PhoneNumberID: num, Event: "UNFLAGGED", NewValue: token,
		})
		select {
		case t1 := <-seen:
			if i%2 == 1 {
				idle = append(idle, t1.Sub(t0))
			} else {
				busy = append(busy, t1.Sub(t0))
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("probe %d not in the KV within 10s", i)
		}
	}
	b.StopTimer()
	elapsed := time.Since(start)
	applied := metricValue(h.s.m.events) - applied0
	cancel()
	loadWG.Wait()
	if len(busy) > 0 {
		b.ReportMetric(ms(pct(busy, 0.50)), "busy_p50_ms")
		b.ReportMetric(ms(pct(busy, 0.99)), "busy_p99_ms")
	}
	if len(idle) > 0 {
		b.ReportMetric(ms(pct(idle, 0.50)), "idle_p50_ms")
		b.ReportMetric(ms(pct(idle, 0.99)), "idle_p99_ms")
	}
	b.ReportMetric(applied/elapsed.Seconds(), "events/s")
	b.ReportMetric((metricValue(h.s.m.signals)-written0)/elapsed.Seconds(), "kv_writes/s")
}

// pct is the p-quantile of d (nearest rank); it sorts d.
func pct(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	i := int(p*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package processor_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// statusBatchBody is one POST with k failed-or-delivered statuses, as Meta
// batches them, about 450 bytes a status.
func statusBatchBody(i, k int) []byte {
	var b strings.Builder
	b.WriteString(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[`)
	for j := 0; j < k; j++ {
		if j > 0 {
			b.WriteByte(',')
		}
		n := i*k + j
		if n%10 == 0 {
			fmt.Fprintf(&b, `{"id":"wamid.bench-%d","status":"failed","timestamp":"%d","recipient_id":"49151555%05d","errors":[{"code":131049,"title":"healthy ecosystem","message":"healthy ecosystem","error_data":{"details":"withheld"}}]}`, n, 1781514312+n%3600, n%100000)
		} else {
			fmt.Fprintf(&b, `{"id":"wamid.bench-%d","status":"delivered","timestamp":"%d","recipient_id":"49151555%05d","biz_opaque_callback_data":"campaign-7","pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"marketing"}}`, n, 1781514312+n%3600, n%100000)
		}
	}
	b.WriteString(`]}}]}]}`)
	return []byte(b.String())
}

// BenchmarkStage1Throughput preloads RAW with b.N POSTs of 10 statuses, then
// times stage 1 from start until every body is acked: decode, normalize,
// ClickHouse insert, EVENTS publish, ack. Reports status events per second.
//
//	go test ./processor -run '^$' -bench Stage1Throughput -benchtime 5000x
func BenchmarkStage1Throughput(b *testing.B) {
	for _, events := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			p := newPipeline(b, schematest.ClickHouse(b))
			p.cfg.FlushInterval = 500 * time.Millisecond // the product's default
			p.cfg.PublishEvents = events
			const per = 10
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				body := statusBatchBody(i, per)
				if _, err := p.js.PublishAsync(schema.RawSubject("default"), body); err != nil {
					b.Fatal(err)
				}
			}
			<-p.js.PublishAsyncComplete()
			b.ResetTimer()
			start := time.Now()
			p.start()
			p.drained(10 * time.Minute)
			elapsed := time.Since(start)
			b.StopTimer()
			p.stop()
			var n uint64
			if err := p.db.Conn.QueryRow(ctx, "SELECT uniqExact(event_id) FROM "+p.db.Database+".status_events").Scan(&n); err != nil {
				b.Fatal(err)
			}
			if n != uint64(b.N*per) {
				b.Fatalf("stored %d status events, want %d", n, b.N*per)
			}
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkStage1Latency publishes POSTs at a steady rate while stage 1
// runs, and measures for each the time from its JetStream ack (when ingest
// answers 200) until its rows are queryable in ClickHouse, polling every
// 20 ms. Reports p50 and p99 in milliseconds.
//
//	go test ./processor -run '^$' -bench Stage1Latency -benchtime 4000x
func BenchmarkStage1Latency(b *testing.B) {
	p := newPipeline(b, schematest.ClickHouse(b))
	p.cfg.FlushInterval = 500 * time.Millisecond // the product's default
	p.start()
	ctx := context.Background()
	var mu sync.Mutex
	acked := make([]time.Time, b.N+1) // by RAW sequence
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond) // 1,000 POSTs/s, 10 statuses each
		defer tick.Stop()
		for i := 0; i < b.N; i++ {
			<-tick.C
			ack, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: schema.RawSubject("default"), Data: statusBatchBody(i, 10)})
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			acked[ack.Sequence] = time.Now()
			mu.Unlock()
		}
	}()
	var lat []time.Duration
	seen := uint64(0)
	for seen < uint64(b.N) {
		var maxSeq uint64
		if err := p.db.Conn.QueryRow(ctx, "SELECT max(raw_seq) FROM "+p.db.Database+".status_events").Scan(&maxSeq); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		mu.Lock()
		for ; seen < maxSeq; seen++ {
			if t := acked[seen+1]; !t.IsZero() {
				lat = append(lat, now.Sub(t))
			}
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	<-done
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		b.Fatal("no latencies")
	}
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
}

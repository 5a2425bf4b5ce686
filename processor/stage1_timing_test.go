package processor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/processor"
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
// ClickHouse insert, EVENTS publish, ack. Reports status events per second,
// and the CPU time per event of this process (stage 1 and the embedded
// nats-server) and of the clickhouse-server it started: on a shared
// machine the CPU times vary less than the rate.
//
//	go test ./processor -run '^$' -bench Stage1Throughput -benchtime 30000x
func BenchmarkStage1Throughput(b *testing.B) {
	for _, events := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			p := newPipeline(b, schematest.ClickHouse(b))
			// The product's defaults: the short AckWait of the tests would
			// have slow batches redelivered while they are written.
			p.cfg.FlushInterval = processor.DefaultConfig().FlushInterval
			p.cfg.AckWait = processor.DefaultConfig().AckWait
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
			start, cpu0, chCPU0 := time.Now(), processCPU(), childCPU("clickhouse")
			p.start()
			p.drained(10 * time.Minute)
			elapsed, cpu, chCPU := time.Since(start), processCPU()-cpu0, childCPU("clickhouse")-chCPU0
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
			b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/event")
			b.ReportMetric(float64(chCPU.Microseconds())/float64(n), "ch-cpu-µs/event")
		})
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the CPU time used so far by this process's children whose
// command name contains name, from /proc (0 where there is none).
func childCPU(name string) time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks uint64
	for _, path := range dirs {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || !strings.Contains(s[open+1:end], name) {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
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
		time.Sleep(20 * time.Millisecond) // the measurement's sampling interval, not a wait
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

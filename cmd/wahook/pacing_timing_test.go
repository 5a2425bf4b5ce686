package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// BenchmarkWebhookToKV measures the time from a webhook's 200 to the KV
// entry of wahook_pacing that reflects it, through the whole system in one
// process ("wahook serve": ingest, embedded JetStream, stage 1 writing to a
// real ClickHouse, stage 2), while "wahook loadtest" sends Meta-shaped
// traffic (WAHOOK_BENCH_NUMBERS upgraded numbers, default 20, each sending
// WAHOOK_BENCH_OUTBOUND_MPS messages a second, default 100, with their 3
// statuses and inbound replies). Each iteration is one probe: a signed
// phone_number_quality_update for a number of its own, addressed by display
// number as Meta does, whose current_limit is a token unique to the probe;
// its latency ends when a KV watcher sees the token. Probes come at random
// intervals, so they fall anywhere in stage 1's batching and stage 2's
// coalescing. Load generator, server and ClickHouse share the machine.
//
//	go test ./cmd/wahook -run '^$' -bench WebhookToKV -benchtime 200x
func BenchmarkWebhookToKV(b *testing.B) {
	numbers, outbound := envOr("WAHOOK_BENCH_NUMBERS", "20"), envOr("WAHOOK_BENCH_OUTBOUND_MPS", "100")
	ch := schematest.ClickHouse(b)
	listen, natsListen := freeAddr(b), freeAddr(b)
	const secret = "bench-secret"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	args := []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", b.TempDir(),
		"--app-secret", secret, "--clickhouse-dsn", ch.DSN, "--log-level", "warn"}
	if c := os.Getenv("WAHOOK_BENCH_COALESCE"); c != "" {
		args = append(args, "--pacing-coalesce", c)
	}
	// More flags of serve, e.g. "--funnel-interval 0" for an A/B.
	args = append(args, strings.Fields(os.Getenv("WAHOOK_BENCH_SERVE_ARGS"))...)
	go func() { done <- run(ctx, args, io.Discard, &stderr) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			b.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	}()
	base := "http://" + listen
	waitReady(b, base, &stderr)

	post := func(body string) time.Time {
		resp, err := http.DefaultClient.Do(signedRequest(base+"/webhook", secret, body))
		if err != nil {
			b.Error(err)
			return time.Time{}
		}
		at := time.Now()
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Errorf("post: status %d", resp.StatusCode)
		}
		return at
	}
	nc, err := nats.Connect("nats://" + natsListen)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	// The probe number's display number is learnt from a status first.
	const number, display, waba = "109000000000777", "15550007777", "109000000000900"
	post(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"changes":[{"field":"messages","value":{
 "messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},
 "statuses":[{"id":"wamid.PROBE","status":"delivered","timestamp":"%d","recipient_id":"15551239999"}]}}]}]}`,
		waba, display, number, time.Now().Unix()))
	testutil.Eventually(b, 30*time.Second, "the probe number's status on WAHOOK_EVENTS", func() (bool, string) {
		return onEvents(ctx, js, schema.EventsSubject(number, schema.KindStatus)), "not there"
	})
	var kv jetstream.KeyValue
	testutil.EventuallyErr(b, 30*time.Second, "bucket "+schema.BucketPacing, func() (err error) { kv, err = js.KeyValue(ctx, schema.BucketPacing); return err })
	w, err := kv.Watch(ctx, schema.PacingKey(number), jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var want, wantBus atomic.Pointer[[]byte]
	seen, onBus := make(chan time.Time, 1), make(chan time.Time, 1)
	// The probe's event as stage 1 publishes it to WAHOOK_EVENTS (a core
	// subscription sees the publish), to split the latency between stage
	// 1 and stage 2.
	sub, err := nc.Subscribe(schema.SubjectEventsPrefix+schema.SubjectToken(number)+".>", func(m *nats.Msg) {
		if p := wantBus.Load(); p != nil && bytes.Contains(m.Data, *p) {
			wantBus.Store(nil)
			select {
			case onBus <- time.Now():
			default:
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
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

	// The load, in a goroutine of its own until the probes are done.
	lctx, stopLoad := context.WithCancel(ctx)
	var loadOut syncBuffer
	loadDone := make(chan int, 1)
	go func() {
		loadDone <- run(lctx, []string{"loadtest", "--url", base + "/webhook", "--app-secret", secret, "--numbers", numbers,
			"--upgraded", numbers, "--coexistence", "0", "--outbound-mps", outbound, "--duration", "1h", "--attempts", "1", "--json"}, &loadOut, &loadOut)
	}()
	// The probe number is busy too: 40 messages a second of its own, so
	// that its signal is rewritten all the time and a probe may find it
	// just written (coalescing delays the next write).
	go func() {
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for k := 0; lctx.Err() == nil; k++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			post(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"changes":[{"field":"messages","value":{
 "messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},
 "statuses":[{"id":"wamid.BUSY%d","status":"sent","timestamp":"%d","recipient_id":"15551239999"}]}}]}]}`,
				waba, display, number, k, time.Now().Unix()))
		}
	}()
	// The load reaches its rate: a benchmark's warm-up, a span of steady
	// load rather than an event to wait for.
	time.Sleep(3 * time.Second)

	lat, bus := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	req0, t0 := requestsOK(base), time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(50*time.Millisecond + rand.N(100*time.Millisecond)) // the probes' pace, not a wait
		token := fmt.Sprintf("TIER_PROBE_%d", i)
		pat := []byte(`"messaging_limit":"` + token + `"`)
		select { // a late one of the last probe
		case <-onBus:
		default:
		}
		busPat := []byte(`"new_value":"` + token + `"`)
		wantBus.Store(&busPat)
		want.Store(&pat)
		at := post(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"time":%d,"changes":[{"field":"phone_number_quality_update",
 "value":{"display_phone_number":%q,"event":"UNFLAGGED","current_limit":%q}}]}]}`, waba, time.Now().Unix(), display, token))
		select {
		case t := <-seen:
			// The KV may hold it before the client has read its 200:
			// that counts as no wait.
			lat = append(lat, max(0, t.Sub(at)))
			select {
			case tb := <-onBus:
				bus = append(bus, max(0, tb.Sub(at)))
			case <-time.After(time.Second):
				b.Errorf("probe %d seen in the KV, not on WAHOOK_EVENTS", i)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("probe %d not in the KV within 10s", i)
		}
	}
	b.StopTimer()
	rate := (requestsOK(base) - req0) / time.Since(t0).Seconds()
	stopLoad()
	if code := <-loadDone; code != 0 && code != 1 {
		b.Fatalf("loadtest exited %d: %s", code, loadOut.String())
	}
	q := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(p*float64(len(d))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(lat, 0.50), "p50_ms")
	b.ReportMetric(q(lat, 0.99), "p99_ms")
	b.ReportMetric(q(lat, 1), "max_ms")
	// The part of it until stage 1 published the event to WAHOOK_EVENTS.
	b.ReportMetric(q(bus, 0.50), "events_p50_ms")
	b.ReportMetric(q(bus, 0.99), "events_p99_ms")
	b.ReportMetric(rate, "webhooks/s")
}

// requestsOK reads the webhooks answered 200 from serve's /metrics.
func requestsOK(base string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "wahook_ingest_requests_total{") && strings.Contains(line, `result="ok"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

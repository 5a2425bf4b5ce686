package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
)

// benchBody is a signed status webhook of about 900 bytes, the size the
// speed figures are quoted for.
func benchBody(i int) []byte {
	b := body(i)
	pad := 900 - len(b)
	if pad > 0 {
		b = bytes.Replace(b, []byte(`"recipient_id"`), []byte(fmt.Sprintf(`"pad":"%s","recipient_id"`, bytes.Repeat([]byte("p"), pad-9))), 1)
	}
	return b
}

func BenchmarkVerify(b *testing.B) {
	v := ingest.NewVerifier([]byte(secretA))
	body := benchBody(1)
	sig := []byte(schema.Sign([]byte(secretA), body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := v.Verify(sig, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandler serves over an in-memory listener (no TCP) and reports
// requests per second of: a bare Fiber handler answering 200 (the baseline),
// and wahook's handler publishing to an embedded JetStream over an in-process
// connection, each request waiting for its own ack. Compare the two lines of
// one run; see scripts/bench.sh for the loopback measurement.
func BenchmarkHandler(b *testing.B) {
	b.Run("bare-fiber", func(b *testing.B) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Post("/webhook", func(c *fiber.Ctx) error { return c.SendStatus(200) })
		benchApp(b, app)
	})
	b.Run("wahook-embedded-jetstream", func(b *testing.B) {
		srv, err := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true})
		if err != nil {
			b.Fatal(err)
		}
		srv.Start()
		defer srv.Shutdown()
		if !srv.ReadyForConnections(10 * time.Second) {
			b.Fatal("nats-server not ready")
		}
		nc, err := nats.Connect("", append(ingest.NATSOptions("bench"), nats.InProcessServer(srv))...)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		cfg := defaultTestConfig()
		cfg.AckTimeout = 2 * time.Second
		pub, err := ingest.NewJetStreamPublisher(nc, cfg.MaxInflight, cfg.AckTimeout)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ingest.EnsureRawStream(context.Background(), pub.JetStream(), ingest.DefaultStreamConfig(), false); err != nil {
			b.Fatal(err)
		}
		s, err := ingest.New(cfg, pub, nil, prometheus.NewRegistry(), nil)
		if err != nil {
			b.Fatal(err)
		}
		benchApp(b, s.App())
	})
}

func benchApp(b *testing.B, app *fiber.App) {
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown() //nolint:errcheck
	client := &fasthttp.Client{
		Dial:            func(string) (net.Conn, error) { return ln.Dial() },
		MaxConnsPerHost: 512,
	}
	const bodies = 4096
	payloads := make([][]byte, bodies)
	sigs := make([]string, bodies)
	for i := range payloads {
		payloads[i] = benchBody(i)
		sigs[i] = schema.Sign([]byte(secretA), payloads[i])
	}
	b.SetBytes(int64(len(payloads[0])))
	b.ReportAllocs()
	b.SetParallelism(32) // Meta delivers concurrently; requests share acks.
	b.ResetTimer()
	start := time.Now()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://bench/webhook")
		req.Header.SetMethod("POST")
		for pb.Next() {
			i := int(seq.Add(1) % bodies)
			req.Header.Set(schema.SignatureHeader, sigs[i])
			req.SetBodyRaw(payloads[i])
			if err := client.Do(req, resp); err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode() != 200 {
				b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

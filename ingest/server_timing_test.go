package ingest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
// and wahook's handler with each publisher, publishing to an embedded
// JetStream over an in-process connection and answering once an ack covers
// the body. Every request carries a body not sent before, signed as it is
// sent, as Meta's are: a repeated body would be answered from the duplicate
// index without a publish. Compare the lines of one run; see
// scripts/bench.sh for the loopback measurement.
func BenchmarkHandler(b *testing.B) {
	b.Run("bare-fiber", func(b *testing.B) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Post("/webhook", func(c *fiber.Ctx) error { return c.SendStatus(200) })
		benchApp(b, app)
	})
	for _, name := range []string{ingest.PublisherBatch, ingest.PublisherAsync} {
		b.Run("wahook-embedded-jetstream-"+name, func(b *testing.B) {
			nc := inProcessJetStream(b)
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ingest.EnsureRawStream(context.Background(), js, ingest.DefaultStreamConfig(), false); err != nil {
				b.Fatal(err)
			}
			cfg := defaultTestConfig()
			cfg.Publisher = name
			cfg.AckTimeout = 2 * time.Second
			cfg.QueueWait = ingest.DefaultConfig().QueueWait // the admission, as served
			pub, err := ingest.NewPublisher(nc, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			s, err := ingest.New(cfg, pub, nil, prometheus.NewRegistry(), nil)
			if err != nil {
				b.Fatal(err)
			}
			benchApp(b, s.App())
			// Every body was new, so every request was published: none
			// was answered from the duplicate index.
			info, err := js.Stream(context.Background(), schema.StreamRaw)
			if err != nil {
				b.Fatal(err)
			}
			if got := info.CachedInfo().State.Msgs; got != uint64(b.N) {
				b.Fatalf("stream holds %d messages after %d requests", got, b.N)
			}
		})
	}
}

func benchApp(b *testing.B, app *fiber.App) {
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown() //nolint:errcheck
	client := &fasthttp.Client{
		Dial:            func(string) (net.Conn, error) { return ln.Dial() },
		MaxConnsPerHost: 512,
	}
	// One template: each request writes its own number into the message
	// id, a fixed-width field, so that every body is new and ~900 bytes.
	const digits = 12
	tmpl := benchBody(1e11)
	at := bytes.Index(tmpl, []byte("wamid.test-")) + len("wamid.test-")
	b.SetBytes(int64(len(tmpl)))
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
		payload := bytes.Clone(tmpl)
		mac := hmac.New(sha256.New, []byte(secretA))
		sig := []byte(schema.SignaturePrefix + strings.Repeat("0", 2*sha256.Size))
		var sum [sha256.Size]byte
		for pb.Next() {
			n := seq.Add(1)
			for d := at + digits - 1; d >= at; d-- {
				payload[d] = byte('0' + n%10)
				n /= 10
			}
			mac.Reset()
			mac.Write(payload)
			hex.Encode(sig[len(schema.SignaturePrefix):], mac.Sum(sum[:0]))
			req.Header.SetBytesV(schema.SignatureHeader, sig)
			req.SetBodyRaw(payload)
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

// inProcessJetStream starts an embedded nats-server with JetStream, not
// listening, and returns a connection to it in-process, as wahook serve
// has; both end with b.
func inProcessJetStream(b *testing.B) *nats.Conn {
	b.Helper()
	srv, err := server.NewServer(&server.Options{Port: -1, DontListen: true, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	b.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect("", append(ingest.NATSOptions("bench"), nats.InProcessServer(srv))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

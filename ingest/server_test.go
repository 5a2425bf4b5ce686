package ingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

const (
	secretA      = "app-a-secret"
	secretA2     = "app-a-rotated-secret"
	secretB      = "app-b-secret"
	fixtureKey   = "wahook-fixture-app-secret"
	verifyToken  = "tok-3f9a"
	fixturesPath = "../testdata/webhooks"
)

// harness is an ingest server on a real listener, publishing to a real
// embedded JetStream.
type harness struct {
	t      *testing.T
	nats   *schematest.JetStream
	nc     *nats.Conn
	js     jetstream.JetStream
	pub    ingest.RawPublisher
	srv    *ingest.Server
	reg    *prometheus.Registry
	base   string
	client *http.Client
	logs   *observer.ObservedLogs // the server's warnings and errors
}

// publishers are the publishers every harness test runs with.
var publishers = []string{ingest.PublisherBatch, ingest.PublisherAsync}

// forEachPublisher runs f as a subtest for each publisher, with the test
// configuration using it.
func forEachPublisher(t *testing.T, f func(t *testing.T, cfg ingest.Config)) {
	for _, pub := range publishers {
		t.Run(pub, func(t *testing.T) {
			cfg := defaultTestConfig()
			cfg.Publisher = pub
			f(t, cfg)
		})
	}
}

func defaultTestConfig() ingest.Config {
	cfg := ingest.DefaultConfig()
	cfg.VerifyToken = verifyToken
	cfg.Apps = map[string][][]byte{
		schema.DefaultApp: {[]byte(secretA), []byte(secretA2)},
		"shop":            {[]byte(secretB)},
		"fixtures":        {[]byte(fixtureKey)},
	}
	cfg.AckTimeout = 500 * time.Millisecond
	// No admission: with it, one first ack slower than half the ack
	// timeout (a fresh server, -race, a loaded machine) set the average
	// that sheds the requests after it. The admission's tests set their own.
	cfg.QueueWait = 0
	return cfg
}

func newHarness(t *testing.T, cfg ingest.Config) *harness {
	t.Helper()
	// A stream window longer than the default, so that the tests' copies
	// of one body published at once fall within it however slow the
	// machine; TestStreamConfigDuplicateWindow checks the default.
	sc := ingest.DefaultStreamConfig()
	sc.DuplicateWindow = time.Minute
	return newHarnessStream(t, cfg, sc)
}

// newHarnessStream is newHarness with the RAW stream configured as sc.
func newHarnessStream(t *testing.T, cfg ingest.Config, sc ingest.StreamConfig) *harness {
	t.Helper()
	return newHarnessVia(t, cfg, sc, nil)
}

// newHarnessVia is newHarnessStream with the publisher's connection made
// to via(the server's URL) when via is set (a proxy).
func newHarnessVia(t *testing.T, cfg ingest.Config, sc ingest.StreamConfig, via func(string) string) *harness {
	t.Helper()
	h := &harness{t: t, nats: schematest.StartJetStream(t), reg: prometheus.NewRegistry()}
	url := h.nats.URL()
	if via != nil {
		url = via(url)
	}
	nc, err := nats.Connect(url, ingest.NATSOptions("ingest-test")...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	h.nc = nc
	if h.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ingest.EnsureRawStream(ctx, h.js, sc, false); err != nil {
		t.Fatal(err)
	}
	if h.pub, err = ingest.NewPublisher(nc, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.pub.Close)
	observed, logs := observer.New(zap.WarnLevel)
	h.logs = logs
	log := zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, observed) })))
	h.srv, err = ingest.New(cfg, h.pub, ingest.StreamReady(h.js), h.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = h.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.srv.Shutdown(ctx)
		<-done
	})
	h.base = "http://" + ln.Addr().String()
	h.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	return h
}

type response struct {
	status  int
	body    string
	elapsed time.Duration
	err     error
}

func (h *harness) post(path string, body []byte, signature string) response {
	req, err := http.NewRequest(http.MethodPost, h.base+path, bytes.NewReader(body))
	if err != nil {
		return response{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set(schema.SignatureHeader, signature)
	}
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return response{err: err, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b), elapsed: time.Since(start)}
}

func (h *harness) get(path string) response {
	resp, err := h.client.Get(h.base + path)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b)}
}

// stored returns every message of the RAW stream.
func (h *harness) stored() []*jetstream.RawStreamMsg {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, schema.StreamRaw)
	if err != nil {
		h.t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		h.t.Fatalf("stream info: %v", err)
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			h.t.Fatalf("get msg %d: %v", seq, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// counterWant is a counter's expected value; labels are name, value pairs.
type counterWant struct {
	name   string
	labels []string
	want   float64
}

// wantCounters reports each counter whose value is not the one wanted.
func (h *harness) wantCounters(wants []counterWant) {
	h.t.Helper()
	for _, c := range wants {
		if got := h.counter(c.name, c.labels...); got != c.want {
			h.t.Errorf("%s%v: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func body(n int) []byte {
	return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.test-%d","status":"delivered","timestamp":"1781514312","recipient_id":"4915155500734"}]}}]}]}`, n))
}

func TestHandshake(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		q := func(mode, token, challenge string) string {
			v := url.Values{}
			if mode != "" {
				v.Set("hub.mode", mode)
			}
			if token != "" {
				v.Set("hub.verify_token", token)
			}
			v.Set("hub.challenge", challenge)
			return "?" + v.Encode()
		}
		tests := []struct {
			name, path string
			status     int
			body       string
		}{
			{"right token", "/webhook" + q("subscribe", verifyToken, "8830214467"), 200, "8830214467"},
			{"right token, named app", "/webhook/shop" + q("subscribe", verifyToken, "abc-123"), 200, "abc-123"},
			{"wrong token", "/webhook" + q("subscribe", "nope", "1"), 403, ""},
			{"token prefix", "/webhook" + q("subscribe", verifyToken[:3], "1"), 403, ""},
			{"missing token", "/webhook" + q("subscribe", "", "1"), 403, ""},
			{"wrong mode", "/webhook" + q("unsubscribe", verifyToken, "1"), 403, ""},
			{"missing mode", "/webhook" + q("", verifyToken, "1"), 403, ""},
			{"unknown app", "/webhook/nosuch" + q("subscribe", verifyToken, "1"), 404, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := h.get(tt.path)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.status != tt.status {
					t.Fatalf("status: got %d, want %d (body %q)", r.status, tt.status, r.body)
				}
				if tt.status == 200 && r.body != tt.body {
					t.Fatalf("body: got %q, want %q", r.body, tt.body)
				}
			})
		}
		// The challenge is the caller's text, answered as plain text that a
		// browser must not sniff into something else.
		resp, err := h.client.Get(h.base + "/webhook" + q("subscribe", verifyToken, "<html>"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct, sniff := resp.Header.Get("Content-Type"), resp.Header.Get("X-Content-Type-Options"); !strings.HasPrefix(ct, "text/plain") || sniff != "nosniff" {
			t.Errorf("the challenge's answer: Content-Type %q, X-Content-Type-Options %q; want text/plain, nosniff", ct, sniff)
		}
		if got := len(h.stored()); got != 0 {
			t.Fatalf("handshakes stored %d messages, want 0", got)
		}
	})
}

func TestHandshakeWithoutConfiguredTokenIsRefused(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.VerifyToken = ""
		h := newHarness(t, cfg)
		if r := h.get("/webhook?hub.mode=subscribe&hub.verify_token=&hub.challenge=1"); r.status != 403 {
			t.Fatalf("status: got %d, want 403", r.status)
		}
	})
}

func TestSignature(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		b := body(1)
		tests := []struct {
			name, path, sig string
			status          int
			reason          string // signature failure reason counted, if any
			app             string
		}{
			{"right", "/webhook", schema.Sign([]byte(secretA), b), 200, "", schema.DefaultApp},
			{"rotated secret", "/webhook", schema.Sign([]byte(secretA2), body(2)), 200, "", schema.DefaultApp},
			{"named app", "/webhook/shop", schema.Sign([]byte(secretB), body(3)), 200, "", "shop"},
			{"wrong secret", "/webhook", schema.Sign([]byte("guess"), body(4)), 401, "mismatch", schema.DefaultApp},
			{"other app's secret", "/webhook/shop", schema.Sign([]byte(secretA), body(5)), 401, "mismatch", "shop"},
			{"signature of another body", "/webhook", schema.Sign([]byte(secretA), body(99)), 401, "mismatch", schema.DefaultApp},
			{"missing", "/webhook", "", 401, "missing", schema.DefaultApp},
			{"sha1 prefix", "/webhook", "sha1=" + strings.Repeat("0", 40), 401, "malformed", schema.DefaultApp},
			{"not hex", "/webhook", "sha256=" + strings.Repeat("z", 64), 401, "malformed", schema.DefaultApp},
			{"uppercase prefix", "/webhook", "SHA256=" + schema.Sign([]byte(secretA), b)[7:], 401, "malformed", schema.DefaultApp},
			{"truncated", "/webhook", schema.Sign([]byte(secretA), b)[:40], 401, "malformed", schema.DefaultApp},
		}
		okBodies := 0
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var payload []byte
				switch tt.name {
				case "rotated secret":
					payload = body(2)
				case "named app":
					payload = body(3)
				case "wrong secret":
					payload = body(4)
				case "other app's secret":
					payload = body(5)
				default:
					payload = b
				}
				before := h.counter("wahook_ingest_signature_failures_total", "app", tt.app, "reason", tt.reason)
				r := h.post(tt.path, payload, tt.sig)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.status != tt.status {
					t.Fatalf("status: got %d, want %d (%s)", r.status, tt.status, r.body)
				}
				if tt.status == 200 {
					okBodies++
					return
				}
				after := h.counter("wahook_ingest_signature_failures_total", "app", tt.app, "reason", tt.reason)
				if after != before+1 {
					t.Fatalf("signature failures{app=%s,reason=%s}: got %v, want %v", tt.app, tt.reason, after, before+1)
				}
			})
		}
		msgs := h.stored()
		if len(msgs) != okBodies {
			t.Fatalf("stored %d messages, want %d (only the signed ones)", len(msgs), okBodies)
		}
		m := msgs[0]
		if !bytes.Equal(m.Data, b) {
			t.Fatalf("stored body differs from the posted one")
		}
		if got, want := m.Header.Get(schema.HeaderMsgID), schema.RawMsgID(b); got != want {
			t.Fatalf("Nats-Msg-Id: got %q, want %q", got, want)
		}
		if got := m.Header.Get(schema.HeaderApp); got != schema.DefaultApp {
			t.Fatalf("app header: got %q, want %q", got, schema.DefaultApp)
		}
		if m.Subject != schema.RawSubject(schema.DefaultApp) {
			t.Fatalf("subject: got %q, want %q", m.Subject, schema.RawSubject(schema.DefaultApp))
		}
		at, err := schema.ParseReceivedAt(m.Header.Get(schema.HeaderReceivedAt))
		if err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
			t.Fatalf("received-at header %q: %v", m.Header.Get(schema.HeaderReceivedAt), err)
		}
		if got := msgs[2].Header.Get(schema.HeaderApp); got != "shop" {
			t.Fatalf("app header of /webhook/shop: got %q, want shop", got)
		}
	})
}

// TestFixtures posts every test body of testdata/webhooks as Meta would, with the signature
// recorded in expected.json, and finds each stored byte for byte.
func TestFixtures(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		raw, err := os.ReadFile(filepath.Join(fixturesPath, "expected.json"))
		if err != nil {
			t.Fatalf("test bodies missing (testdata/webhooks): %v", err)
		}
		var expected map[string]json.RawMessage
		if err := json.Unmarshal(raw, &expected); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, cfg)
		posted := map[string][]byte{}
		for name, facts := range expected {
			var f struct {
				Sig string `json:"x_hub_signature_256"`
			}
			if err := json.Unmarshal(facts, &f); err != nil || f.Sig == "" {
				continue // not a fixture entry
			}
			b, err := os.ReadFile(filepath.Join(fixturesPath, name))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := ingest.NewVerifier([]byte(fixtureKey)).Verify([]byte(f.Sig), b); err != nil {
				t.Errorf("%s: verifier refuses Meta's signature: %v", name, err)
			}
			r := h.post("/webhook/fixtures", b, f.Sig)
			if r.err != nil || r.status != 200 {
				t.Errorf("%s: got %d %v (%s), want 200", name, r.status, r.err, r.body)
			}
			posted[schema.RawMsgID(b)] = b
		}
		if len(posted) < 40 {
			t.Fatalf("posted %d fixtures, want the 40 of testdata/webhooks", len(posted))
		}
		msgs := h.stored()
		if len(msgs) != len(posted) {
			t.Fatalf("stored %d, want %d", len(msgs), len(posted))
		}
		for _, m := range msgs {
			want, ok := posted[m.Header.Get(schema.HeaderMsgID)]
			if !ok || !bytes.Equal(m.Data, want) {
				t.Fatalf("stored message %d is not byte-identical to a posted fixture", m.Sequence)
			}
		}
	})
}

func TestOversizeBody(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.BodyLimit = 64 << 10
		h := newHarness(t, cfg)
		big := bytes.Repeat([]byte("x"), cfg.BodyLimit+1)
		r := h.post("/webhook", big, schema.Sign([]byte(secretA), big))
		if r.err == nil && r.status != 413 {
			t.Fatalf("status: got %d, want 413", r.status)
		}
		// fasthttp may close the connection before the client reads the 413; the
		// counter says what the server did either way.
		if got := h.counter("wahook_ingest_requests_total", "result", "too_large"); got != 1 {
			t.Fatalf("too_large count: got %v, want 1", got)
		}
		at := bytes.Repeat([]byte("y"), cfg.BodyLimit)
		if r := h.post("/webhook", at, schema.Sign([]byte(secretA), at)); r.status != 200 {
			t.Fatalf("body at the limit: got %d %v, want 200", r.status, r.err)
		}
		if got := len(h.stored()); got != 1 {
			t.Fatalf("stored %d, want 1", got)
		}
	})
}

// TestContentEncodingRefused: a compressed body is refused before the
// signature check and never inflated (a small gzip body could expand to
// gigabytes) or stored.
func TestContentEncodingRefused(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		zw.Write(bytes.Repeat([]byte("a"), 8<<20))
		zw.Close()
		for _, enc := range []string{"gzip", "deflate", "br", "identity"} {
			req, _ := http.NewRequest(http.MethodPost, h.base+"/webhook", bytes.NewReader(zipped.Bytes()))
			req.Header.Set("Content-Encoding", enc)
			req.Header.Set(schema.SignatureHeader, schema.Sign([]byte(secretA), zipped.Bytes()))
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 415 {
				t.Errorf("Content-Encoding %s: got %d, want 415", enc, resp.StatusCode)
			}
		}
		if got := len(h.stored()); got != 0 {
			t.Fatalf("stored %d, want 0", got)
		}
		if got := h.counter("wahook_ingest_requests_total", "result", "bad_encoding"); got != 4 {
			t.Fatalf("bad_encoding count: got %v, want 4", got)
		}
		if r := h.get("/metrics"); !strings.Contains(r.body, "wahook_ingest_request_duration_seconds_count 4\n") {
			t.Errorf("the 415s are not in wahook_ingest_request_duration_seconds")
		}
	})
}

func TestUnknownAppPost(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		b := body(1)
		if r := h.post("/webhook/nosuch", b, schema.Sign([]byte(secretA), b)); r.status != 404 {
			t.Fatalf("status: got %d, want 404", r.status)
		}
		// Every answered POST is in the latency histogram.
		if r := h.get("/metrics"); !strings.Contains(r.body, "wahook_ingest_request_duration_seconds_count 1\n") {
			t.Errorf("the 404 is not in wahook_ingest_request_duration_seconds")
		}
	})
}

// TestRetriedBodyStoredOnce: Meta's retries of a stored body are answered
// 200 and stored once.
func TestRetriedBodyStoredOnce(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		h.postStoredOnce(body(7), 3)
		// The copies are answered from the endpoint's index, without a
		// publish.
		h.wantCounters([]counterWant{
			{"wahook_ingest_requests_total", []string{"result", "ok"}, 1},
			{"wahook_ingest_requests_total", []string{"result", "duplicate"}, 2},
			{"wahook_ingest_duplicates_total", []string{"source", "index"}, 2},
			{"wahook_ingest_duplicates_total", []string{"source", "stream"}, 0},
		})
		r := h.get("/metrics")
		for _, want := range []string{
			"wahook_ingest_publish_duration_seconds_count 1\n",
			"wahook_ingest_dedupe_entries 1\n",
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// postStoredOnce posts b, signed, n times one after the other: each is
// answered 200, and the stream holds b once.
func (h *harness) postStoredOnce(b []byte, n int) {
	h.t.Helper()
	sig := schema.Sign([]byte(secretA), b)
	for i := 0; i < n; i++ {
		if r := h.post("/webhook", b, sig); r.status != 200 {
			h.t.Fatalf("post %d: got %d %v, want 200", i, r.status, r.err)
		}
	}
	if got := len(h.stored()); got != 1 {
		h.t.Fatalf("stored %d, want 1", got)
	}
}

// TestStreamDuplicateNotCountedAsStored: with the endpoint's index off, a
// retried body reaches the stream, which answers that it holds it already:
// the retry is answered 200 and counted as a duplicate from the stream, and
// its bytes are not counted as stored.
func TestStreamDuplicateNotCountedAsStored(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.DedupeWindow = 0
		h := newHarness(t, cfg)
		b := body(8)
		h.postStoredOnce(b, 3)
		h.wantCounters([]counterWant{
			{"wahook_ingest_requests_total", []string{"result", "ok"}, 1},
			{"wahook_ingest_requests_total", []string{"result", "duplicate"}, 2},
			{"wahook_ingest_duplicates_total", []string{"source", "stream"}, 2},
			{"wahook_ingest_bytes_total", nil, float64(len(b))},
		})
	})
}

// TestConcurrentRequests sends a few thousand signed bodies at once: every
// 200 maps to exactly one stored message.
func TestConcurrentRequests(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.AckTimeout = 5 * time.Second // 2 cores, -race, other packages' tests beside it
		h := newHarness(t, cfg)
		const n, workers = 3000, 200
		statuses := make([]int, n)
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					b := body(i)
					statuses[i] = h.post("/webhook", b, schema.Sign([]byte(secretA), b)).status
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		ok := map[string]bool{}
		for i, s := range statuses {
			if s == 200 {
				ok[schema.RawMsgID(body(i))] = true
			} else if s != 503 {
				t.Fatalf("request %d: status %d, want 200 (or 503)", i, s)
			}
		}
		if len(ok) < n*99/100 {
			t.Fatalf("only %d of %d requests got 200 on an idle machine", len(ok), n)
		}
		seen := map[string]int{}
		for _, m := range h.stored() {
			seen[m.Header.Get(schema.HeaderMsgID)]++
		}
		for id := range ok {
			if seen[id] != 1 {
				t.Fatalf("a body answered 200 is stored %d times, want 1", seen[id])
			}
		}
	})
}

// TestNATSOutage stops the NATS server while requests flow: each request
// during the outage gets 503 within the ack timeout, never a 200; once NATS
// is back, 200s resume without a restart of ingest; every body that got a 200
// is stored exactly once.
func TestNATSOutage(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)

		type result struct {
			id         string
			start, end time.Time
			r          response
		}
		var (
			mu      sync.Mutex
			results []result
			stop    = make(chan struct{})
			wg      sync.WaitGroup
			seq     int
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					seq++
					i := seq
					mu.Unlock()
					b := body(100000 + i)
					start := time.Now()
					r := h.post("/webhook", b, schema.Sign([]byte(secretA), b))
					mu.Lock()
					results = append(results, result{schema.RawMsgID(b), start, time.Now(), r})
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // the senders' pace, not a wait
				}
			}()
		}
		// count is the number of results so far that f accepts.
		count := func(f func(result) bool) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, res := range results {
				if f(res) {
					n++
				}
			}
			return n
		}
		// Each phase lasts until it has the 10 requests the check below
		// wants of it.
		atLeast10 := func(what string, f func(result) bool) {
			t.Helper()
			testutil.Eventually(t, 20*time.Second, what, func() (bool, string) {
				n := count(f)
				return n >= 10, fmt.Sprintf("%d of %d requests", n, count(func(result) bool { return true }))
			})
		}
		atLeast10("10 answers of 200 before the outage", func(res result) bool { return res.r.status == 200 })
		h.nats.Shutdown()
		downAt := time.Now()
		if r := h.get("/readyz"); r.status != 503 {
			t.Errorf("readyz during the outage: got %d, want 503", r.status)
		}
		atLeast10("10 requests made and answered during the outage", func(res result) bool { return res.start.After(downAt) })
		// Down for 3 s: a 503 that waited for NATS to come back would take
		// longer than the bound below.
		time.Sleep(time.Until(downAt.Add(3 * time.Second)))
		upAt := time.Now()
		h.nats.Start()
		// Wait until 200s come back, bounded.
		testutil.Eventually(t, 20*time.Second, "a 200 once NATS is back", func() (bool, string) {
			b := body(-1)
			r := h.post("/webhook", b, schema.Sign([]byte(secretA), b))
			return r.status == 200, fmt.Sprintf("%d %v", r.status, r.err)
		})
		atLeast10("10 answers of 200 after the outage", func(res result) bool { return res.r.status == 200 && res.start.After(upAt) })
		close(stop)
		wg.Wait()

		var during, after200, before200 int
		okIDs := map[string]bool{schema.RawMsgID(body(-1)): true}
		for _, res := range results {
			if res.r.err != nil {
				t.Fatalf("request error: %v", res.r.err)
			}
			if res.r.status != 200 && res.r.status != 503 {
				t.Fatalf("status %d, want 200 or 503", res.r.status)
			}
			// Bounded by the ack timeout (500 ms here), with a second for a
			// busy machine's HTTP round trip: a 503 that waited for NATS to
			// come back would take up to the outage's 3 s.
			if res.r.status == 503 && res.r.elapsed > cfg.AckTimeout+time.Second {
				t.Errorf("503 after %s, want within the ack timeout %s", res.r.elapsed, cfg.AckTimeout)
			}
			if res.start.After(downAt) && res.end.Before(upAt) {
				during++
				if res.r.status == 200 {
					t.Errorf("a request made while NATS was down got 200")
				}
			}
			if res.r.status == 200 {
				okIDs[res.id] = true
				if res.start.After(upAt) {
					after200++
				}
				if res.end.Before(downAt) {
					before200++
				}
			}
		}
		if during < 10 || before200 < 10 || after200 < 10 {
			t.Fatalf("too little traffic to judge: %d requests during the outage, %d 200s before, %d after", during, before200, after200)
		}
		seen := map[string]int{}
		for _, m := range h.stored() {
			seen[m.Header.Get(schema.HeaderMsgID)]++
		}
		for id := range okIDs {
			if seen[id] != 1 {
				t.Fatalf("a body answered 200 is stored %d times, want 1", seen[id])
			}
		}
		if r := h.get("/readyz"); r.status != 200 {
			t.Fatalf("readyz after the outage: got %d (%s), want 200", r.status, r.body)
		}
		t.Logf("%d requests: %d during the outage (all 503), %d 200s before, %d after", len(results), during, before200, after200)
	})
}

func TestHealthReadyMetrics(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		h := newHarness(t, cfg)
		if r := h.get("/healthz"); r.status != 200 {
			t.Fatalf("healthz: got %d", r.status)
		}
		if r := h.get("/readyz"); r.status != 200 {
			t.Fatalf("readyz: got %d (%s)", r.status, r.body)
		}
		b := body(1)
		h.post("/webhook", b, schema.Sign([]byte(secretA), b))
		h.post("/webhook", b, "sha256=00")
		r := h.get("/metrics")
		for _, want := range []string{
			`wahook_ingest_requests_total{app="default",result="ok"} 1`,
			`wahook_ingest_signature_failures_total{app="default",reason="malformed"} 1`,
			`wahook_ingest_request_duration_seconds_count 2`,
			`wahook_ingest_publish_duration_seconds_count 1`,
			`wahook_ingest_bytes_total ` + fmt.Sprint(len(b)),
			`wahook_ingest_inflight_requests 0`,
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// TestShutdownOrder: readiness fails first, requests in flight finish with
// their ack, and every 200 is stored.
func TestShutdownFinishesInflight(t *testing.T) {
	forEachPublisher(t, func(t *testing.T, cfg ingest.Config) {
		cfg.ShutdownDelay = 2 * time.Second // long enough to ask /readyz under -race
		h := newHarness(t, cfg)
		const n = 400
		var wg sync.WaitGroup
		var answered atomic.Int64
		statuses := make([]response, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				b := body(i)
				statuses[i] = h.post("/webhook", b, schema.Sign([]byte(secretA), b))
				answered.Add(1)
			}(i)
		}
		// Requests have reached the server when it begins to shut down.
		testutil.Eventually(t, 10*time.Second, "a request to reach the server", func() (bool, string) {
			in, done := ingest.Inflight(h.srv), answered.Load()
			return in > 0 || done > 0, fmt.Sprintf("%d in flight, %d answered", in, done)
		})
		shutdownErr := make(chan error, 1)
		go func() {
			// The product's bound (cmd/wahook shutdownTimeout): fasthttp waits
			// up to 5 s for a connection accepted but never used (the client's
			// spare dials) before it counts as idle.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			shutdownErr <- h.srv.Shutdown(ctx)
		}()
		testutil.Eventually(t, 10*time.Second, "the shutdown to begin", func() (bool, string) {
			return ingest.ShuttingDown(h.srv), "not shutting down"
		})
		// 400 requests are connecting at this moment; a reset connection is
		// retried, but an answer must be 503.
		var ready response
		testutil.Poll(time.Second, func() bool { ready = h.get("/readyz"); return ready.err == nil })
		if ready.err != nil || ready.status != 503 {
			t.Errorf("readyz during shutdown delay: got %d %v, want 503", ready.status, ready.err)
		}
		wg.Wait()
		if err := <-shutdownErr; err != nil {
			t.Fatal(err)
		}
		ok := map[string]bool{}
		for i, r := range statuses {
			if r.err == nil && r.status == 200 {
				ok[schema.RawMsgID(body(i))] = true
			} else if r.err == nil && r.status != 503 {
				t.Fatalf("status %d during shutdown", r.status)
			}
		}
		if len(ok) == 0 {
			t.Fatal("no request finished")
		}
		stored := map[string]bool{}
		for _, m := range h.stored() {
			stored[m.Header.Get(schema.HeaderMsgID)] = true
		}
		for id := range ok {
			if !stored[id] {
				t.Fatal("a body answered 200 during shutdown is not stored")
			}
		}
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(h.base, "http://"), time.Second); err == nil {
			c.Close()
			t.Fatal("listener still accepts after shutdown")
		}
	})
}

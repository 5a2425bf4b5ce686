package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wahook/wahook/schema"
)

// memPublisher keeps what it is given; err fails every publish.
type memPublisher struct {
	mu   sync.Mutex
	apps []string
	docs [][]byte
	err  error
}

func (p *memPublisher) PublishRaw(_ context.Context, app string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.apps, p.docs = append(p.apps, app), append(p.docs, body)
	return nil
}

const goodResults = `{"results": [
 {"phone_number_id": "1001", "status": "accepted", "message_id": "wamid.A", "recipient": "15551230001", "timestamp": 1773500000},
 {"phone_number_id": "1001", "status": "failed", "error_code": 130429, "recipient": "15551230002", "timestamp": "2026-03-14T15:00:01Z"}]}`

func post(t *testing.T, s *Server, body, ip, token string) (int, http.Header, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/send-results", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.App().Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func intakeServer(t *testing.T, pub Publisher, limits Limits, c *clock) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Tokens = []string{"token-one-0123456789", "token-two-0123456789"}
	cfg.Limits = limits
	cfg.TrustedProxies = []string{"0.0.0.0"}
	cfg.Intake = pub
	s, err := newServer(cfg, nil, nil, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSendResultsIntake(t *testing.T) {
	const tok = "token-one-0123456789"
	pub := &memPublisher{}
	s := intakeServer(t, pub, DefaultLimits(), &clock{t: time.Now()})
	code, _, b := post(t, s, goodResults, "192.0.2.1", tok)
	var a SendResultsAnswer
	if err := json.Unmarshal(b, &a); code != http.StatusAccepted || err != nil || a.Accepted != 2 || a.ID != schema.RawMsgID([]byte(goodResults)) {
		t.Fatalf("%d %s", code, b)
	}
	if len(pub.docs) != 1 || pub.apps[0] != schema.SendResultsApp || string(pub.docs[0]) != goodResults {
		t.Fatalf("published %v %q", pub.apps, pub.docs)
	}
	for _, tc := range []struct{ name, body, param string }{
		{"not json", `{"results": [`, "body"},
		{"no results", `{"results": []}`, "results"},
		{"failed without code", `{"results": [{"phone_number_id": "1", "status": "failed", "timestamp": 1}]}`, "results[0].error_code"},
		{"bad status", `{"results": [{"phone_number_id": "1", "status": "maybe", "timestamp": 1}]}`, "results[0].status"},
		{"bad time", `{"results": [{"phone_number_id": "1", "status": "accepted", "message_id": "m", "timestamp": "yesterday"}]}`, "body"},
		{"second wrong", `{"results": [{"phone_number_id": "1", "status": "accepted", "message_id": "m", "timestamp": 1},
			{"phone_number_id": "1", "status": "accepted", "timestamp": 1}]}`, "results[1].message_id"},
	} {
		code, _, b := post(t, s, tc.body, "192.0.2.1", tok)
		var e struct{ Error Error }
		_ = json.Unmarshal(b, &e)
		if code != 400 || e.Error.Code != CodeBadParameter || e.Error.Parameter != tc.param {
			t.Errorf("%s: %d %s, want parameter %s", tc.name, code, b, tc.param)
		}
	}
	if len(pub.docs) != 1 {
		t.Fatalf("a refused document was stored: %d", len(pub.docs))
	}
	if code, _, _ := post(t, s, goodResults, "192.0.2.1", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	pub.err = errors.New("nats: timeout")
	if code, _, b := post(t, s, goodResults, "192.0.2.1", tok); code != 503 {
		t.Fatalf("publish failed: %d %s", code, b)
	}
	// Counted once (the handler and writeError both counted it).
	if n := metricValue(t, s.metrics.requests.WithLabelValues("send-results", "503")); n != 1 {
		t.Errorf("wahook_api_requests_total{send-results,503} after one 503: %v, want 1", n)
	}
	off := intakeServer(t, nil, DefaultLimits(), &clock{t: time.Now()})
	if code, _, _ := post(t, off, goodResults, "192.0.2.1", tok); code != 503 {
		t.Fatalf("intake off: %d", code)
	}
}

// Send results have their own limits, per IP and per token, apart from
// the reports'.
func TestSendResultsLimits(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	s := intakeServer(t, &memPublisher{}, Limits{SendResultsIP: Limit{3, time.Minute}, SendResultsToken: Limit{4, time.Minute}, ReportsIP: Limit{1, time.Minute}}, c)
	const one, two = "token-one-0123456789", "token-two-0123456789"
	for i := 0; i < 3; i++ {
		if code, _, b := post(t, s, goodResults, "192.0.2.1", one); code != 202 {
			t.Fatalf("post %d: %d %s", i, code, b)
		}
	}
	if code, h, _ := post(t, s, goodResults, "192.0.2.1", one); code != 429 || h.Get("Retry-After") != "60" {
		t.Fatalf("4th from one IP: %d", code)
	}
	if code, _, _ := post(t, s, goodResults, "192.0.2.2", one); code != 202 {
		t.Fatalf("from another IP: %d", code)
	}
	if code, _, _ := post(t, s, goodResults, "192.0.2.3", one); code != 429 {
		t.Fatalf("5th of the token: %d", code)
	}
	if code, _, _ := post(t, s, goodResults, "192.0.2.3", two); code != 202 {
		t.Fatalf("the other token: %d", code)
	}
	// Reports are limited apart: one report still passes.
	if code, _, _ := call(t, s, "/api/v1/error-codes", "192.0.2.1", one); code != 200 {
		t.Fatalf("a report after send results: %d", code)
	}
	c.set(start.Add(time.Minute))
	if code, _, _ := post(t, s, goodResults, "192.0.2.1", one); code != 202 {
		t.Fatalf("next window: %d", code)
	}
}

// A token may bring in a bounded number of phone number ids: 300
// documents of 1,000 hostile ids each made 300k numbers in stage 2.
func TestSendResultsNumbersPerToken(t *testing.T) {
	pub := &memPublisher{}
	s := intakeServer(t, pub, Limits{}, &clock{t: time.Now()})
	s.numbers = newTokenNumbers(3)
	const one, two = "token-one-0123456789", "token-two-0123456789"
	doc := func(ids ...string) string {
		var b bytes.Buffer
		b.WriteString(`{"results":[`)
		for i, id := range ids {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"phone_number_id":"` + id + `","status":"failed","error_code":131048,"timestamp":1773500000}`)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	if code, _, b := post(t, s, doc("1", "2", "2"), "192.0.2.1", one); code != 202 {
		t.Fatalf("two numbers: %d %s", code, b)
	}
	code, _, b := post(t, s, doc("1", "3", "4"), "192.0.2.1", one)
	var e struct{ Error Error }
	_ = json.Unmarshal(b, &e)
	if code != 403 || e.Error.Code != CodeTooManyNumbers {
		t.Fatalf("a fourth and fifth number: %d %s", code, b)
	}
	if len(pub.docs) != 1 {
		t.Fatalf("the refused document was stored: %d documents", len(pub.docs))
	}
	if code, _, b := post(t, s, doc("3", "1"), "192.0.2.1", one); code != 202 {
		t.Fatalf("a third number, refused nothing of the document before: %d %s", code, b)
	}
	if code, _, _ := post(t, s, doc("4"), "192.0.2.1", one); code != 403 {
		t.Fatalf("a fourth number: %d", code)
	}
	if code, _, _ := post(t, s, doc("4", "5", "6"), "192.0.2.1", two); code != 202 {
		t.Fatalf("the other token has its own bound: %d", code)
	}
	if got := metricValue(t, s.metrics.numbersRefused); got != 2 {
		t.Fatalf("refusals counted: %v, want 2", got)
	}
	// A document not stored (JetStream away) does not use up the bound:
	// its new numbers were counted, and then kept for good.
	s.numbers = newTokenNumbers(3)
	pub.err = errors.New("nats: timeout")
	if code, _, _ := post(t, s, doc("1", "2"), "192.0.2.1", one); code != 503 {
		t.Fatalf("JetStream away: %d, want 503", code)
	}
	pub.err = nil
	if code, _, b := post(t, s, doc("3", "4", "5"), "192.0.2.1", one); code != 202 {
		t.Errorf("three numbers after a document of two was not stored: %d %s, want 202", code, b)
	}
}

func metricValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestSendResultsBodyAnnounced: a request that announces the body limit
// and sends part of it is answered as soon as its token is refused, its
// connection closed (the rest of the body would be taken for the next
// request); before, fasthttp waited for the whole announced body, holding
// it allocated, and the request sat until the read timeout. A document
// longer than what comes with the headers, sent in chunks, is read to its
// end and stored as sent; one over the limit gets 413.
func TestSendResultsBodyAnnounced(t *testing.T) {
	const tok = "token-one-0123456789"
	pub := &memPublisher{}
	s := intakeServer(t, pub, DefaultLimits(), &clock{t: time.Now()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.App().Shutdown() })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/v1/send-results HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer wrong-token-0123456789\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", bodyLimit)
	c.Write(bytes.Repeat([]byte(" "), 9<<10))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a refused token while the body is still announced: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("a refused token: %d, close %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
	}

	// A body where none is taken: refused unread, the connection closed.
	g, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fmt.Fprintf(g, "GET /api/v1/openapi.json HTTP/1.1\r\nHost: api\r\nContent-Length: %d\r\n\r\n", 20<<10)
	g.Write(bytes.Repeat([]byte(" "), 20<<10))
	g.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(g), nil); err != nil || resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("a GET with a body: %v %v; want 400 and the connection closed", resp, err)
	}

	var closed bool
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(body []byte) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/api/v1/send-results", io.MultiReader(bytes.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Forwarded-For", "192.0.2.1")
		resp, err := client.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		closed = resp.Close
		return resp.StatusCode, b
	}
	long := []byte(goodResults + strings.Repeat(" ", 100<<10))
	if code, b := send(long); code != http.StatusAccepted || closed {
		t.Fatalf("a chunked document of 100 KiB: %d %s, close %v; want 202 and the connection kept", code, b, closed)
	}
	if len(pub.docs) != 1 || !bytes.Equal(pub.docs[0], long) {
		t.Fatalf("stored %d documents, want the chunked one as sent", len(pub.docs))
	}
	if code, b := send(bytes.Repeat([]byte(" "), bodyLimit+1)); code != http.StatusRequestEntityTooLarge && code != 0 {
		t.Fatalf("a chunked document over the limit: %d %s, want 413", code, b)
	}
	if len(pub.docs) != 1 {
		t.Fatalf("a document over the limit was stored")
	}

	// Chunks not well formed: the client's error (400), not a body cut
	// short (408); nothing stored, the connection closed.
	m, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fmt.Fprintf(m, "POST /api/v1/send-results HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nX-Forwarded-For: 192.0.2.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n%s\r\n0\r\n\r\n", tok, goodResults)
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(m), nil)
	if err != nil {
		t.Fatalf("no answer to a malformed chunked body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !resp.Close || !strings.Contains(string(b), "malformed chunked body") {
		t.Fatalf("a malformed chunked body: %d %s, close %v; want 400 naming it and the connection closed", resp.StatusCode, b, resp.Close)
	}
	if len(pub.docs) != 1 {
		t.Fatalf("a malformed chunked document was stored")
	}
}

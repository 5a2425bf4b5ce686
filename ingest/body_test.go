package ingest_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// announce opens a connection to h and sends the headers of a webhook
// POST whose Content-Length is n, and then the first bytes of its body,
// and nothing more.
func announce(t *testing.T, h *harness, n int, first []byte) net.Conn {
	t.Helper()
	c := postHead(t, h, "", schema.Sign([]byte(secretA), []byte("x")), n)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	return c
}

// postHead opens a connection to h and sends the head of a webhook POST
// with the signature sig, a Content-Length of n and the headers extra
// ("Name: value\r\n" each), closed when the test ends.
func postHead(t *testing.T, h *harness, extra, sig string, n int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(h.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Type: application/json\r\n%s%s: %s\r\nContent-Length: %d\r\n\r\n",
		extra, schema.SignatureHeader, sig, n)
	return c
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestAnnouncedBodyTakesNoMemory: a client that announces a body of the
// limit (4 MiB) on each of many connections and sends 9 KiB of it held
// the whole 4 MiB per connection, allocated from the Content-Length before
// the body was read (256 MiB for these 64 connections; 40 GiB within the
// default connection bounds). The body is now read as it arrives: what it
// holds grows with what it sends.
func TestAnnouncedBodyTakesNoMemory(t *testing.T) {
	cfg := defaultTestConfig()
	h := newHarness(t, cfg)
	before := heapInUse()
	const conns = 64
	for range conns {
		// Past the 8 KiB read with the headers: the handler reads the rest.
		announce(t, h, cfg.BodyLimit, bytes.Repeat([]byte(" "), 9<<10))
	}
	// Until the handlers read the rest, or the heap shows that the
	// announced bodies were allocated whole.
	var held int64
	testutil.Eventually(t, 10*time.Second, "the handlers to read the announced bodies", func() (bool, string) {
		n := ingest.Inflight(h.srv)
		held = int64(heapInUse()) - int64(before)
		return n == conns || held > 64<<20, fmt.Sprintf("%d of %d requests in flight", n, conns)
	})
	if held > 32<<20 {
		t.Errorf("%d connections announcing %d bytes each hold %d MiB of heap, want under 32", conns, cfg.BodyLimit, held>>20)
	}
	t.Logf("%d connections announcing %d bytes each: %+d KiB of heap", conns, cfg.BodyLimit, held>>10)
	b := body(1)
	if r := h.post("/webhook", b, schema.Sign([]byte(secretA), b)); r.status != 200 {
		t.Fatalf("a webhook beside them: %d %v, want 200", r.status, r.err)
	}
}

// TestBodyMemoryBound: bodies longer than what is read with the headers
// share the body memory (--body-memory). While a slow upload holds all of
// it, another long body waits for room, then is answered 503 unread
// (counted as shed, Meta retries); a short one never waits. Once the slow
// upload is cut short (408, the connection closed), its room is given back
// and the long body is stored.
func TestBodyMemoryBound(t *testing.T) {
	cfg := defaultTestConfig()
	cfg.BodyLimit = 64 << 10
	cfg.BodyMemory = 64 << 10
	h := newHarness(t, cfg)
	slow := announce(t, h, cfg.BodyLimit, bytes.Repeat([]byte("a"), 10<<10))
	testutil.Eventually(t, 10*time.Second, "the slow upload's handler", func() (bool, string) {
		n := ingest.Inflight(h.srv)
		return n == 1, fmt.Sprintf("%d requests in flight", n)
	})

	long := append(body(1), bytes.Repeat([]byte(" "), 20<<10)...)
	r := h.post("/webhook", long, schema.Sign([]byte(secretA), long))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "large bodies") {
		t.Fatalf("a long body while the slow upload holds the body memory: %d %q %v, want 503", r.status, r.body, r.err)
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "shed"); got != 1 {
		t.Errorf("shed: %v, want 1", got)
	}
	short := body(2)
	if r := h.post("/webhook", short, schema.Sign([]byte(secretA), short)); r.status != 200 {
		t.Fatalf("a short body meanwhile: %d %v, want 200", r.status, r.err)
	}

	// The slow upload ends without the rest of its body.
	if err := slow.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the slow upload's answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("the slow upload cut short: %d, close %v; want 408 and the connection closed", resp.StatusCode, resp.Close)
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "incomplete"); got != 1 {
		t.Errorf("incomplete: %v, want 1", got)
	}

	if r := h.post("/webhook", long, schema.Sign([]byte(secretA), long)); r.status != 200 {
		t.Fatalf("the long body again: %d %q %v, want 200", r.status, r.body, r.err)
	}
	stored := h.stored()
	if len(stored) != 2 || !bytes.Equal(stored[1].Data, long) {
		t.Fatalf("stored %d bodies, want the short one and the long one as sent", len(stored))
	}
}

// TestUnsignedUploadHoldsNoBodyMemory: a POST whose signature header is
// missing or cannot be a signature is refused 401 as its head arrives,
// its connection closed, before its body is read: a slow unsigned upload
// held its announced size of the body memory until it timed out, and a
// long webhook meanwhile got a 503.
func TestUnsignedUploadHoldsNoBodyMemory(t *testing.T) {
	cfg := defaultTestConfig()
	cfg.BodyLimit = 64 << 10
	cfg.BodyMemory = 64 << 10
	h := newHarness(t, cfg)
	for _, sig := range []string{"", "sha1=" + strings.Repeat("ab", 20), "sha256=nothex"} {
		c := postHead(t, h, "", sig, cfg.BodyLimit)
		if _, err := c.Write(bytes.Repeat([]byte("a"), 10<<10)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("signature %q: no answer before the body: %v", sig, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("signature %q: %d, close %v; want 401 and the connection closed", sig, resp.StatusCode, resp.Close)
		}
		// Meanwhile (the unsigned upload's connection still open), a long
		// webhook finds the body memory free.
		long := append(body(len(sig)+1), bytes.Repeat([]byte(" "), 60<<10)...)
		if r := h.post("/webhook", long, schema.Sign([]byte(secretA), long)); r.status != 200 {
			t.Fatalf("signature %q: a long webhook after it: %d %q %v, want 200", sig, r.status, r.body, r.err)
		}
	}
	if got := h.counter("wahook_ingest_signature_failures_total", "reason", "missing"); got != 1 {
		t.Errorf("missing signatures counted: %v, want 1", got)
	}
}

// TestChunkedBody: a body sent in chunks, of unknown length, is read to
// its end and stored as sent; one past the limit is refused with 413
// without being stored, however it is sent.
func TestChunkedBody(t *testing.T) {
	cfg := defaultTestConfig()
	cfg.BodyLimit = 64 << 10
	h := newHarness(t, cfg)
	post := func(b []byte) response {
		// A reader of unknown length: net/http sends it chunked.
		req, err := http.NewRequest(http.MethodPost, h.base+"/webhook", io.MultiReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(schema.SignatureHeader, schema.Sign([]byte(secretA), b))
		resp, err := h.client.Do(req)
		if err != nil {
			return response{err: err}
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if len(resp.TransferEncoding) > 0 {
			t.Errorf("answer sent chunked: %v", resp.TransferEncoding)
		}
		return response{status: resp.StatusCode, body: string(got)}
	}
	long := append(body(1), bytes.Repeat([]byte(" "), 30<<10)...)
	if r := post(long); r.status != 200 {
		t.Fatalf("a chunked body: %d %q %v, want 200", r.status, r.body, r.err)
	}
	over := bytes.Repeat([]byte(" "), cfg.BodyLimit+1)
	if r := post(over); r.err == nil && r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked body past the limit: %d %q, want 413", r.status, r.body)
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "too_large"); got != 1 {
		t.Errorf("too_large: %v, want 1", got)
	}
	stored := h.stored()
	if len(stored) != 1 || !bytes.Equal(stored[0].Data, long) {
		t.Fatalf("stored %d bodies, want the chunked one as sent", len(stored))
	}
}

// TestMalformedChunkedBody: a chunked body whose chunks are not well formed
// (a chunk size that is not hex, or too long for an int; a chunk not ended
// by CRLF) is answered 400 saying so, counted as bad_encoding, and its
// connection closed. Before, every failed read of a body was answered 408
// "body cut short or not received in time" and counted as incomplete; a
// chunked body cut short still is.
func TestMalformedChunkedBody(t *testing.T) {
	h := newHarness(t, defaultTestConfig())
	head := fmt.Sprintf("POST /webhook HTTP/1.1\r\nHost: wahook\r\n%s: %s\r\nTransfer-Encoding: chunked",
		schema.SignatureHeader, schema.Sign([]byte(secretA), []byte("abc")))
	for _, chunks := range []string{
		"fffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
		"zz\r\nabc\r\n0\r\n\r\n",
		"3\r\nabcXY0\r\n\r\n",
	} {
		resp, _ := rawRequest(t, h, head, []byte(chunks))
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Errorf("chunks %q: %d, close %v; want 400 and the connection closed", chunks, resp.StatusCode, resp.Close)
		}
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "bad_encoding"); got != 3 {
		t.Errorf("bad_encoding: %v, want 3", got)
	}

	// Cut short: the client sends part of a chunk and closes its side.
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(h.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(head + "\r\n\r\n5\r\nab")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a chunked body cut short: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a chunked body cut short: %d, want 408", resp.StatusCode)
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "incomplete"); got != 1 {
		t.Errorf("incomplete: %v, want 1 (the body cut short only)", got)
	}
	if got := len(h.stored()); got != 0 {
		t.Fatalf("stored %d bodies, want none", got)
	}
}

// TestHTTP10WithoutLength: an HTTP/1.0 POST with neither a Content-Length
// nor chunks is answered 411 Length Required, counted as bad_encoding, and
// its connection closed. Before, fasthttp took its body as empty (a request
// without either has none) and it was answered 401, a signature mismatch,
// which tells the sender nothing of what is wrong. An HTTP/1.0 POST with a
// Content-Length is stored.
func TestHTTP10WithoutLength(t *testing.T) {
	h := newHarness(t, defaultTestConfig())
	b := body(1)
	sig := schema.Sign([]byte(secretA), b)
	resp, _ := rawRequest(t, h, fmt.Sprintf("POST /webhook HTTP/1.0\r\nHost: wahook\r\n%s: %s", schema.SignatureHeader, sig), b)
	if resp.StatusCode != http.StatusLengthRequired || !resp.Close {
		t.Errorf("HTTP/1.0 without a length: %d, close %v; want 411 and the connection closed", resp.StatusCode, resp.Close)
	}
	if got := h.counter("wahook_ingest_requests_total", "result", "bad_encoding"); got != 1 {
		t.Errorf("bad_encoding: %v, want 1", got)
	}
	resp, _ = rawRequest(t, h, fmt.Sprintf("POST /webhook HTTP/1.0\r\nHost: wahook\r\n%s: %s\r\nContent-Length: %d", schema.SignatureHeader, sig, len(b)), b)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP/1.0 with a Content-Length: %d, want 200", resp.StatusCode)
	}
	if stored := h.stored(); len(stored) != 1 || !bytes.Equal(stored[0].Data, b) {
		t.Fatalf("stored %d bodies, want the one with a Content-Length", len(stored))
	}
}

// rawRequest sends head (a request's start line and headers, without the
// blank line) and then body on a new connection to h, and reads the answer
// within 5 s.
func rawRequest(t *testing.T, h *harness, head string, body []byte) (*http.Response, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(h.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(append([]byte(head+"\r\n\r\n"), body...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, r
}

// TestBodiesWhereNoneIsTaken: only POST /webhook takes a body. A body on
// another route is refused unread, or answered without being read, and the
// connection is closed either way: kept open, the rest of the body would
// be read as the next request (here a GET /healthz hidden in it), and
// /metrics' adaptor read any body whole, of any length. A multipart body
// is not parsed before the handler: announced at 1 GiB, it is refused 413
// once 9 KiB of it have come.
func TestBodiesWhereNoneIsTaken(t *testing.T) {
	h := newHarness(t, defaultTestConfig())
	hidden := append(bytes.Repeat([]byte(" "), 10<<10), []byte("GET /healthz HTTP/1.1\r\nHost: wahook\r\n\r\n")...)
	for _, tc := range []struct {
		head   string
		status int
	}{
		{fmt.Sprintf("GET /metrics HTTP/1.1\r\nHost: wahook\r\nContent-Length: %d", len(hidden)), http.StatusBadRequest},
		{"GET /metrics HTTP/1.1\r\nHost: wahook\r\nTransfer-Encoding: chunked", http.StatusBadRequest},
		{fmt.Sprintf("PUT /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Length: %d", len(hidden)), http.StatusBadRequest},
		{fmt.Sprintf("POST /nowhere HTTP/1.1\r\nHost: wahook\r\nContent-Length: %d", len(hidden)), http.StatusNotFound},
		{fmt.Sprintf("POST /webhook/nosuch HTTP/1.1\r\nHost: wahook\r\nContent-Length: %d", len(hidden)), http.StatusNotFound},
		// A method Fiber does not know: answered before any middleware.
		{fmt.Sprintf("PROPFIND /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Length: %d", len(hidden)), http.StatusBadRequest},
	} {
		body := hidden
		if strings.Contains(tc.head, "chunked") {
			body = []byte(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hidden), hidden))
		}
		resp, r := rawRequest(t, h, tc.head, body)
		if resp.StatusCode != tc.status || !resp.Close {
			t.Errorf("%s: %d, close %v; want %d and the connection closed", strings.SplitN(tc.head, "\r\n", 2)[0], resp.StatusCode, resp.Close, tc.status)
		}
		if more, err := http.ReadResponse(r, nil); err == nil {
			t.Errorf("%s: a second answer (%d): the request hidden in the body was answered", strings.SplitN(tc.head, "\r\n", 2)[0], more.StatusCode)
		}
	}
	// With a signature (of what, the body decides), or it is refused 401
	// before its body is read.
	resp, _ := rawRequest(t, h, "POST /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Type: multipart/form-data; boundary=x\r\n"+
		schema.SignatureHeader+": "+schema.Sign([]byte(secretA), []byte("x"))+"\r\nContent-Length: 1073741824",
		append([]byte("--x\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n"), bytes.Repeat([]byte("a"), 9<<10)...))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("a multipart body announced at 1 GiB: %d, close %v; want 413 and the connection closed", resp.StatusCode, resp.Close)
	}
	if got := len(h.stored()); got != 0 {
		t.Fatalf("stored %d bodies, want none", got)
	}
}

// TestSlowLongBody: a body read by the handler waits for its ack from when
// it is all here, not from when its headers came: one that took longer than
// the ack timeout to arrive was answered 503 at once, and Meta's retry, as
// slow, the same.
func TestSlowLongBody(t *testing.T) {
	cfg := defaultTestConfig() // an ack timeout of 500 ms
	h := newHarness(t, cfg)
	b := append(body(1), bytes.Repeat([]byte(" "), 100<<10)...)
	c := postHead(t, h, "", schema.Sign([]byte(secretA), b), len(b))
	if _, err := c.Write(b[:9<<10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * cfg.AckTimeout)
	if _, err := c.Write(b[9<<10:]); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a body of 100 KiB that took %s to arrive: %d, want 200", 3*cfg.AckTimeout, resp.StatusCode)
	}
	if stored := h.stored(); len(stored) != 1 || !bytes.Equal(stored[0].Data, b) {
		t.Fatalf("stored %d bodies, want the slow one as sent", len(stored))
	}
}

// TestExpectContinue: a client that asks to continue before its body (as
// curl does for bodies over 1 KiB) gets 100 Continue, sends the body, and
// the body, longer than what comes with the headers, is stored.
func TestExpectContinue(t *testing.T) {
	h := newHarness(t, defaultTestConfig())
	b := append(body(1), bytes.Repeat([]byte(" "), 20<<10)...)
	c := postHead(t, h, "Expect: 100-continue\r\n", schema.Sign([]byte(secretA), b), len(b))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("before the body: %q %v, want 100 Continue", line, err)
	}
	for line != "\r\n" && err == nil { // the rest of the 100's head
		line, err = r.ReadString('\n')
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if stored := h.stored(); len(stored) != 1 || !bytes.Equal(stored[0].Data, b) {
		t.Fatalf("stored %d bodies, want the one sent", len(stored))
	}
}

package httpbody

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/valyala/fasthttp"
)

// TestReadLimited: a body read to its end whatever its size against the
// first allocation; one byte past the limit refused; a reader that fails
// first is an incomplete body.
func TestReadLimited(t *testing.T) {
	for _, size := range []int{0, 1, 100, 4096, 4097, 70_000} {
		want := bytes.Repeat([]byte("x"), size)
		got, err := ReadLimited(iotest.HalfReader(bytes.NewReader(want)), 1000, 70_000)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: got %d bytes, %v", size, len(got), err)
		}
	}
	if _, err := ReadLimited(bytes.NewReader(make([]byte, 70_001)), 1000, 70_000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte past the limit: %v, want ErrTooLarge", err)
	}
	cut := io.MultiReader(bytes.NewReader(make([]byte, 5000)), iotest.ErrReader(io.ErrUnexpectedEOF))
	if _, err := ReadLimited(cut, 1000, 70_000); !errors.Is(err, ErrIncomplete) {
		t.Errorf("a body cut short: %v, want ErrIncomplete", err)
	}
}

// TestUnexpected: a body on a request other than a POST, announced by its
// length or by chunks, is unexpected; a GET without either (no
// Content-Length header: -2 to fasthttp) or with a length of 0 has none.
func TestUnexpected(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"GET /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false},
		{"GET /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", true},
		{"GET /metrics HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", true},
		{"PUT /webhook HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", true},
		{"POST /webhook HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", false},
	} {
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(strings.NewReader(tc.raw))); err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if got := Unexpected(&req); got != tc.want {
			t.Errorf("%q: unexpected %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// TestReadMalformed: a chunked body whose chunks are not well formed (a
// chunk size that is not hex or too long for an int, a chunk not ended by
// CRLF) is ErrMalformed, where every read error was ErrIncomplete before
// (answered 408, "cut short or not received in time"); one cut short,
// within a chunk size too, is still ErrIncomplete. The cases hold
// malformed's reading of fasthttp's errors to the fasthttp in use.
func TestReadMalformed(t *testing.T) {
	for _, tc := range []struct {
		chunks string
		want   error
	}{
		{"3\r\nabc\r\n0\r\n\r\n", nil},
		{"3;ext=1\r\nabc\r\n0\r\n\r\n", nil},
		{"zz\r\nabc\r\n0\r\n\r\n", ErrMalformed},
		{"\r\nabc\r\n0\r\n\r\n", ErrMalformed},
		{"fffffffffffffffffff\r\nabc\r\n0\r\n\r\n", ErrMalformed},
		{"3\r\nabcXY0\r\n\r\n", ErrMalformed},
		{"3\rX\nabc\r\n0\r\n\r\n", ErrMalformed},
		{"3\r\nab", ErrIncomplete},
		{"3", ErrIncomplete},
		{"3\r", ErrIncomplete},
		{"3\r\nabc\r", ErrIncomplete},
		{"3\r\nabc\r\n1", ErrIncomplete},
	} {
		raw := "POST /webhook HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + tc.chunks
		br := bufio.NewReader(strings.NewReader(raw))
		var req fasthttp.Request
		if err := req.Header.Read(br); err != nil {
			t.Fatalf("%q: %v", tc.chunks, err)
		}
		// As a server that streams request bodies reads it.
		if err := req.ContinueReadBodyStream(br, 1<<20); err != nil {
			t.Fatalf("%q: %v", tc.chunks, err)
		}
		body, err := Read(&req, 1<<20)
		if err != tc.want || err == nil && string(body) != "abc" {
			t.Errorf("%q: got %q, %v; want %v", tc.chunks, body, err, tc.want)
		}
	}
}

// TestLengthRequired: an HTTP/1.0 POST with neither a Content-Length nor
// chunks, whose body fasthttp takes as empty, is told apart from one that
// announces a length of 0, and from HTTP/1.1 and other methods.
func TestLengthRequired(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"POST /webhook HTTP/1.0\r\nHost: h\r\n\r\n", true},
		{"POST /webhook HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", true},
		{"POST /webhook HTTP/1.0\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false},
		{"POST /webhook HTTP/1.0\r\nHost: h\r\ncontent-length: 0\r\n\r\n", false},
		{"POST /webhook HTTP/1.0\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", false},
		{"POST /webhook HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"POST /webhook HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"GET /webhook HTTP/1.0\r\nHost: h\r\n\r\n", false},
	} {
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(strings.NewReader(tc.raw))); err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if got := LengthRequired(&req); got != tc.want {
			t.Errorf("%q: length required %v, want %v", tc.raw, got, tc.want)
		}
	}
}

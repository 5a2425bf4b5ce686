// Package httpbody reads request bodies that fasthttp streams
// (StreamRequestBody): into memory that grows with the bytes that arrive,
// never with what a Content-Length announces.
//
// Without streaming, fasthttp allocates a body's whole announced length
// before reading a byte of it, so a client that announces the body limit
// on each of its connections, and sends nothing, holds the limit per
// connection until the read timeout. With streaming, fasthttp reads a body
// of up to Prefetch bytes with the headers and hands a longer one to the
// handler unread.
package httpbody

import (
	"errors"
	"io"
	"strings"

	"github.com/valyala/fasthttp"
)

// Prefetch is how much of a body fasthttp reads with the headers when it
// streams request bodies (fasthttp's readBodyWithStreaming): a body up to
// it is read whole before the handler runs.
const Prefetch = 8 << 10

// chunk is the first allocation for a longer body, which then doubles as
// bytes arrive.
const chunk = 64 << 10

// Why a body was not read.
var (
	ErrTooLarge   = errors.New("body over the limit")
	ErrIncomplete = errors.New("body cut short or too slow")
	// ErrMalformed is a chunked body whose chunks are not well formed: a
	// client's error, not a read cut short.
	ErrMalformed = errors.New("malformed chunked body")
)

// Announced is the body length req announces: its Content-Length, or limit
// for a body of unknown length (chunked).
func Announced(req *fasthttp.Request, limit int) int {
	if n := req.Header.ContentLength(); n >= 0 {
		return n
	}
	return limit
}

// Streamed reports whether req's body is left to the handler to read: one
// of unknown length, or longer than Prefetch. Any other came whole with
// the headers (fasthttp's Body returns it).
func Streamed(req *fasthttp.Request) bool {
	n := req.Header.ContentLength()
	return req.IsBodyStream() && (n < 0 || n > Prefetch)
}

// Read returns req's body, of at most limit bytes, in memory of its own
// (not fasthttp's buffer, which is reused after the handler). A body over
// the limit, announced or sent, is ErrTooLarge; one cut short, or not
// received within the connection's read deadline, ErrIncomplete; chunks
// not well formed, ErrMalformed.
func Read(req *fasthttp.Request, limit int) ([]byte, error) {
	n := req.Header.ContentLength() // -1: chunked
	if n > limit {
		return nil, ErrTooLarge
	}
	if !Streamed(req) {
		return append([]byte(nil), req.Body()...), nil
	}
	// A known length bounds the buffer's growth too: it is never more
	// than one byte past the body.
	max := limit
	if n >= 0 {
		max = n
	}
	body, err := ReadLimited(req.BodyStream(), min(max, chunk), max)
	if err == nil && n >= 0 && len(body) != n {
		err = ErrIncomplete
	}
	if err == nil {
		// Read to its end: nothing of it is left on the connection.
		_ = req.CloseBodyStream()
	}
	return body, err
}

// ReadLimited reads r to its end into a buffer of first bytes that doubles
// as needed, failing with ErrTooLarge past limit bytes, with ErrMalformed
// when r, a fasthttp body stream, finds its chunks not well formed, and
// with ErrIncomplete when r fails otherwise first.
func ReadLimited(r io.Reader, first, limit int) ([]byte, error) {
	buf := make([]byte, 0, min(first, limit+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, ErrTooLarge
			}
			// Up to one byte past the limit: enough to tell a body over it.
			grown := make([]byte, len(buf), min(max(2*cap(buf), 512), limit+1))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			if len(buf) > limit {
				return nil, ErrTooLarge
			}
			return buf, nil
		}
		if err != nil {
			if malformed(err) {
				return nil, ErrMalformed
			}
			return nil, ErrIncomplete
		}
	}
}

// malformed reports whether err, from a fasthttp body stream, refuses the
// chunked encoding itself rather than reporting a read that failed (the
// connection closed, reset, or past its read deadline): a chunk size that
// is not hex, or has more digits than an int holds (readHexInt's "empty
// hex number" and "too large hex number", which fasthttp does not export),
// or a chunk size or chunk not ended by CRLF (ErrBrokenChunk "unexpected
// char"). An ErrBrokenChunk for a byte that could not be read is a body
// cut short. TestReadMalformed holds this to the fasthttp in use.
func malformed(err error) bool {
	switch err.Error() {
	case "empty hex number", "too large hex number":
		return true
	}
	var broken fasthttp.ErrBrokenChunk
	return errors.As(err, &broken) && strings.HasPrefix(broken.Error(), "unexpected char")
}

// Left reports whether bytes of req's body may be left unread on the
// connection: the answer must then close it, as what follows on it is not
// the start of a request. A body read whole (Read, or fasthttp's Body) has
// closed its stream.
func Left(req *fasthttp.Request) bool {
	return req.IsBodyStream() && hasBody(req)
}

// CloseLeft wraps a server's handler so that every answer that leaves
// bytes of the body unread closes its connection, whatever answered it:
// routes, middleware, and Fiber's own answer to a method it does not know,
// given before any middleware runs.
func CloseLeft(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if Left(&ctx.Request) {
			ctx.SetConnectionClose()
		}
	}
}

// Unexpected reports whether req carries a body although only a POST takes
// one: such a request is refused unread (a handler that reads the body
// whole, as /metrics' net/http adaptor does, would read any length).
func Unexpected(req *fasthttp.Request) bool {
	return !req.Header.IsPost() && hasBody(req)
}

// LengthRequired reports whether req is an HTTP/1.0 POST that announces
// its body neither by a Content-Length nor by chunks. fasthttp takes such a
// body as empty (and sets a Content-Length of 0), as a request without
// either has none (RFC 9112 6.3), but an HTTP/1.0 client may mean a body
// that ends when it closes the connection: it is asked for its length
// (411) instead of having an empty body checked against its signature.
func LengthRequired(req *fasthttp.Request) bool {
	if req.Header.IsHTTP11() || !req.Header.IsPost() || req.Header.ContentLength() != 0 {
		return false
	}
	// Zero: sent as such, or set by fasthttp for none. Only the headers as
	// received tell.
	announced := false
	req.Header.VisitAllInOrder(func(key, _ []byte) {
		if strings.EqualFold(string(key), fasthttp.HeaderContentLength) {
			announced = true
		}
	})
	return !announced
}

// hasBody reports whether req announces a body: a Content-Length above 0,
// or chunks (-1). A request without either (-2, as a GET has) has none.
func hasBody(req *fasthttp.Request) bool {
	n := req.Header.ContentLength()
	return n > 0 || n == -1
}

package ingest

import (
	"context"
	"errors"
	"io"

	"github.com/gofiber/fiber/v2"
)

// bodyPrefetch is how much of a body fasthttp reads with the headers when
// it streams request bodies (fasthttp's readBodyWithStreaming): a body up
// to it, as every status webhook, is read whole before the handler runs.
const bodyPrefetch = 8 << 10

// bodyChunk is the first allocation for the rest of a longer body, which
// then grows with what arrives.
const bodyChunk = 64 << 10

// Why a body was not read; the handler answers each with its own status.
var (
	errBodyTooLarge   = errors.New("body over the limit")
	errBodyIncomplete = errors.New("body cut short or too slow")
	errBodyNoRoom     = errors.New("no room for the body")
)

// readBody returns the request's body as received, and a func that gives
// back the body memory it took (nil when it took none).
//
// The server streams request bodies (StreamRequestBody): fasthttp reads a
// body of up to bodyPrefetch bytes with the headers and hands a longer one
// over unread. Without that it allocated the whole Content-Length before
// reading a byte of the body, so a client that announced 4 MiB on each of
// its connections and sent nothing held 4 MiB per connection for the read
// timeout. A longer body is read here instead, into memory that grows with
// the bytes that arrive, within the body memory (cfg.BodyMemory) that every
// body read so at once shares: one that finds no room within the ack
// timeout is not read (503, Meta retries). The read is bounded by the
// connection's read deadline (readTimeout from the request's start).
func (s *Server) readBody(c *fiber.Ctx) ([]byte, func(), error) {
	req := c.Request()
	n := req.Header.ContentLength() // -1: chunked
	if n > s.cfg.BodyLimit {
		return nil, nil, errBodyTooLarge
	}
	if !req.IsBodyStream() || n >= 0 && n <= bodyPrefetch {
		return req.Body(), nil, nil
	}
	want := int64(n)
	if n < 0 {
		want = int64(s.cfg.BodyLimit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
	err := s.bodyMem.Acquire(ctx, want)
	cancel()
	if err != nil {
		return nil, nil, errBodyNoRoom
	}
	release := func() { s.bodyMem.Release(want) }
	body, err := readLimited(req.BodyStream(), min(int(want), bodyChunk), s.cfg.BodyLimit)
	if err == nil && n >= 0 && len(body) != n {
		err = errBodyIncomplete
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	return body, release, nil
}

// readLimited reads r to its end into a buffer of first bytes that grows
// as needed, failing with errBodyTooLarge past limit bytes and with
// errBodyIncomplete when r fails first.
func readLimited(r io.Reader, first, limit int) ([]byte, error) {
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, errBodyTooLarge
			}
			// Doubling, up to one byte past the limit: enough to tell a
			// body over it.
			grown := make([]byte, len(buf), min(2*cap(buf), limit+1))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			if len(buf) > limit {
				return nil, errBodyTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, errBodyIncomplete
		}
	}
}

// bodyLeft reports whether bytes of the request's body may be left unread
// on the connection: then the answer closes it, as what follows on it is
// not the start of a request.
func bodyLeft(c *fiber.Ctx) bool {
	req := c.Request()
	n := req.Header.ContentLength()
	return req.IsBodyStream() && (n < 0 || n > bodyPrefetch)
}

// closeIfBodyLeft makes the answer close the connection when bodyLeft.
func closeIfBodyLeft(c *fiber.Ctx) {
	if bodyLeft(c) {
		c.Context().SetConnectionClose()
	}
}

package ingest

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/wahook/wahook/internal/httpbody"
)

// errBodyNoRoom: a body longer than httpbody.Prefetch found no room in the
// body memory in time.
var errBodyNoRoom = errors.New("no room for the body")

// readBody returns the request's body as received, and a func that gives
// back the body memory it took (nil when it took none).
//
// The server streams request bodies (StreamRequestBody, package httpbody):
// a body of up to 8 KiB, as every status webhook, comes read with the
// headers; a longer one is read here, into memory that grows with the bytes
// that arrive, within the body memory (cfg.BodyMemory) that every body read
// so at once shares: one that finds no room within the ack timeout is not
// read (503, Meta retries). The read is bounded by the connection's read
// deadline (readTimeout from the request's start). Errors are
// httpbody.ErrTooLarge, httpbody.ErrIncomplete, httpbody.ErrMalformed and
// errBodyNoRoom.
func (s *Server) readBody(c *fiber.Ctx) ([]byte, func(), error) {
	req := c.Request()
	n := req.Header.ContentLength() // -1: chunked
	if n > s.cfg.BodyLimit {
		return nil, nil, httpbody.ErrTooLarge
	}
	if !httpbody.Streamed(req) {
		return req.Body(), nil, nil
	}
	want := int64(httpbody.Announced(req, s.cfg.BodyLimit))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
	err := s.bodyMem.Acquire(ctx, want)
	cancel()
	if err != nil {
		return nil, nil, errBodyNoRoom
	}
	body, err := httpbody.Read(req, s.cfg.BodyLimit)
	if err != nil {
		s.bodyMem.Release(want)
		return nil, nil, err
	}
	return body, func() { s.bodyMem.Release(want) }, nil
}

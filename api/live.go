package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/schema"
)

// PacingWatcher watches every key of a KV bucket stage 2 writes
// (wahook_pacing, wahook_accounts): a jetstream.KeyValue is one, and so is
// Bucket, which the command wires.
type PacingWatcher interface {
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// Bucket watches the bucket Name through JS, opening it at each watch:
// stage 2 makes it when it starts, maybe after the API.
type Bucket struct {
	JS   jetstream.JetStream
	Name string
}

func (b Bucket) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv, err := b.JS.KeyValue(ctx, b.Name)
	if err != nil {
		return nil, err
	}
	return kv.WatchAll(ctx, opts...)
}

// errNATSUnanswered is the answer when NATS does not give a bucket's
// values in time.
var errNATSUnanswered = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "NATS did not answer; retry"}

// currentValues gives each current value of the bucket w watches (puts
// only) to each, and returns once they are all given; a bucket that does
// not exist has none. It fails with each's error, or errNATSUnanswered.
func (s *Server) currentValues(ctx context.Context, w PacingWatcher, what string, each func(jetstream.KeyValueEntry) error) error {
	kw, err := w.WatchAll(ctx, jetstream.IgnoreDeletes())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		s.log.Warn(what+" watch", zap.Error(err))
		return errNATSUnanswered
	}
	defer kvbucket.StopWatch(kw) // the watch ends with the request
	for {
		select {
		case <-ctx.Done():
			return errNATSUnanswered
		case e, ok := <-kw.Updates():
			if !ok || e == nil { // nil: the current values are all given
				return nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if err := each(e); err != nil {
				return err
			}
		}
	}
}

// maxStreams bounds the live streams open at once, and maxStreamsPerToken
// those of one token, so that one token (a tenant's) cannot take them all.
// (Variables for tests.)
var (
	maxStreams         = int64(256)
	maxStreamsPerToken = 16
)

// liveHeartbeat is how often an idle stream sends a comment, so that
// proxies keep it open and a closed client is noticed.
var liveHeartbeat = 15 * time.Second // a variable for the tests

// liveWriteTimeout bounds each write of a live stream: a client that takes
// nothing for this long is dropped.
const liveWriteTimeout = 30 * time.Second

// liveHub runs the live streams of pacing signals: each a watch of
// wahook_pacing, ended by close (at shutdown).
type liveHub struct {
	w       PacingWatcher
	log     *zap.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	streams atomic.Int64

	mu      sync.Mutex
	byToken map[string]int // open streams by token id
}

// liveRetryAfter is the Retry-After, in seconds, of a stream refused for
// want of a place.
const liveRetryAfter = 5

// open counts a stream of token, or answers the error that refuses it.
func (h *liveHub) open(token string) *Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byToken[token] >= maxStreamsPerToken {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
			Message: fmt.Sprintf("this token has %d live streams open, the most it may; close one", maxStreamsPerToken)}
	}
	if h.streams.Add(1) > maxStreams {
		h.streams.Add(-1)
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "too many live streams; retry later"}
	}
	h.byToken[token]++
	return nil
}

// closed counts a stream of token gone.
func (h *liveHub) closed(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams.Add(-1)
	if h.byToken[token]--; h.byToken[token] <= 0 {
		delete(h.byToken, token)
	}
}

func newLiveHub(w PacingWatcher, log *zap.Logger) *liveHub {
	ctx, cancel := context.WithCancel(context.Background())
	return &liveHub{w: w, log: log, ctx: ctx, cancel: cancel, byToken: map[string]int{}}
}

func (h *liveHub) close() { h.cancel() }

// severity orders advice from the most urgent.
func severity(a schema.Advice) int {
	switch a {
	case schema.AdviceStop:
		return 0
	case schema.AdvicePause:
		return 1
	case schema.AdviceSlowDown:
		return 2
	}
	return 3
}

// Signals is the answer of /api/v1/pacing: every number's current pacing
// signal, the most urgent advice first.
type Signals struct {
	Signals []schema.PacingSignal `json:"signals"`
}

var errNoPacing = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "pacing signals are off: this API runs without NATS"}

// visible reports whether the tenant t (nil: all) sees the number's
// signal; an error when the tenant's numbers could not be read (ClickHouse
// away, and no list of them read before).
func (s *Server) visible(ctx context.Context, t *tenant, id string) (bool, error) {
	if t == nil {
		return true, nil
	}
	nums, err := s.numbersOf(ctx, t, id)
	if errors.Is(err, errNumbersUnread) {
		return false, nil // not in the last list read: not shown until ClickHouse answers
	}
	return err == nil && nums[id], err
}

// decodeSignal reads a KV entry; ok is false for a delete or a value that
// is not a signal.
func decodeSignal(e jetstream.KeyValueEntry) (schema.PacingSignal, bool) {
	var sig schema.PacingSignal
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return sig, false
	}
	if err := json.Unmarshal(e.Value(), &sig); err != nil || sig.PhoneNumberID == "" {
		return sig, false
	}
	return sig, true
}

// pacingSnapshot answers every current signal the token may see.
func (s *Server) pacingSnapshot(c *fiber.Ctx) error {
	if s.cfg.Pacing == nil {
		return s.writeError(c, errNoPacing)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.QueryTimeout)
	defer cancel()
	out := Signals{Signals: []schema.PacingSignal{}}
	t := tenantOf(c)
	err := s.currentValues(ctx, s.cfg.Pacing, "pacing", func(e jetstream.KeyValueEntry) error {
		sig, ok := decodeSignal(e)
		if !ok {
			return nil
		}
		vis, err := s.visible(ctx, t, sig.PhoneNumberID)
		if err != nil {
			// An empty answer would say the tenant's numbers have no
			// signal.
			s.log.Warn("pacing: the tenant's numbers", zap.Error(err))
			return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "ClickHouse did not answer with the token's numbers; retry"}
		}
		if vis {
			out.Signals = append(out.Signals, sig)
		}
		return nil
	})
	if err != nil {
		return s.writeError(c, err)
	}
	sort.Slice(out.Signals, func(i, j int) bool {
		a, b := out.Signals[i], out.Signals[j]
		if severity(a.Advice) != severity(b.Advice) {
			return severity(a.Advice) < severity(b.Advice)
		}
		return a.PhoneNumberID < b.PhoneNumberID
	})
	return s.sendJSON(c, out)
}

func (s *Server) sendJSON(c *fiber.Ctx, v any) error {
	b, err := Encode(v)
	if err != nil {
		return s.writeError(c, err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(b)
}

// pacingStream pushes the pacing signals the token may see as server-sent
// events: first every current one, then each change as stage 2 writes it
// (event "signal", data the signal's JSON); "ready" once the current ones
// are sent; "delete" (data {"phone_number_id": ...}) when the key of a
// signal the stream sent is deleted or purged (nats kv del, nats kv
// purge), so that the number leaves the page.
func (s *Server) pacingStream(c *fiber.Ctx) error {
	if s.cfg.Pacing == nil {
		return s.writeError(c, errNoPacing)
	}
	h := s.live
	token, _ := c.Locals(localToken).(string)
	if e := h.open(token); e != nil {
		// As every 429 and 503 of the API: when to try again (a stream
		// closed frees its place).
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(liveRetryAfter))
		return s.writeError(c, e)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	w, err := s.cfg.Pacing.WatchAll(ctx)
	if err != nil && errors.Is(err, jetstream.ErrBucketNotFound) {
		err = nil // no signal yet: wait for the bucket below
	}
	if err != nil {
		cancel()
		h.closed(token)
		s.log.Warn("pacing watch", zap.Error(err))
		return s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "NATS did not answer; retry"})
	}
	t := tenantOf(c)
	bearer := bearerToken(c) // checked again at each heartbeat; never logged
	// The server's write timeout is set once, before the answer is
	// written: past it every write of the stream failed, and the stream
	// ended after about 20 s. Each flush sets its own.
	conn := c.Context().Conn()
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Accel-Buffering", "no")
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer h.closed(token)
		defer cancel()
		if w != nil {
			defer kvbucket.StopWatch(w) // the watch ends with the stream
		}
		flush := func() bool {
			_ = conn.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
			return bw.Flush() == nil
		}
		send := func(event string, data []byte) bool {
			bw.WriteString("event: " + event + "\ndata: ")
			bw.Write(data)
			bw.WriteString("\n\n")
			return flush()
		}
		if !send("hello", []byte(`{}`)) {
			return
		}
		beat := time.NewTicker(liveHeartbeat)
		defer beat.Stop()
		retry := time.NewTicker(2 * time.Second)
		defer retry.Stop()
		var updates <-chan jetstream.KeyValueEntry
		if w != nil {
			updates = w.Updates()
		}
		// The numbers of the signals sent, by key: a delete or purge
		// names the key only, and is sent only for a number this stream
		// showed (never another tenant's, and not the markers of keys
		// deleted before it opened).
		sent := map[string]string{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-beat.C:
				// A token removed from the tokens file, or given another
				// scope, ends its streams: the stream would go on with
				// the scope it was opened with for as long as it lasted.
				if !s.sameScope(bearer, t) {
					send("end", []byte(`{"reason":"the token was removed or its scope changed: open the stream again"}`))
					return
				}
				bw.WriteString(": beat\n\n")
				if !flush() {
					return
				}
			case <-retry.C:
				if w == nil { // the bucket did not exist yet
					if nw, err := s.cfg.Pacing.WatchAll(ctx); err == nil {
						w, updates = nw, nw.Updates()
						defer kvbucket.StopWatch(nw) // the watch ends with the stream
					}
				}
			case e, ok := <-updates:
				if !ok {
					return
				}
				if e == nil {
					if !send("ready", []byte(`{}`)) {
						return
					}
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					id, ok := sent[e.Key()]
					if !ok {
						continue
					}
					delete(sent, e.Key())
					b, err := json.Marshal(struct {
						PhoneNumberID string `json:"phone_number_id"`
					}{id})
					if err != nil || !send("delete", b) {
						return
					}
					continue
				}
				sig, ok := decodeSignal(e)
				if !ok {
					continue
				}
				if vis, _ := s.visible(ctx, t, sig.PhoneNumberID); !vis {
					continue // not the tenant's, or its numbers not read yet
				}
				b, err := json.Marshal(sig) // one line, as an event's data must be
				if err != nil || !send("signal", b) {
					return
				}
				sent[e.Key()] = sig.PhoneNumberID
			}
		}
	})
	return nil
}

package ingest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/wahook/wahook/internal/httpbody"
	"github.com/wahook/wahook/internal/jserr"
	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/schema"
)

// ReadyFunc reports whether the store behind the publisher can take bodies:
// JetStream reachable and the RAW stream present.
type ReadyFunc func(ctx context.Context) error

// Server is the webhook endpoint.
type Server struct {
	cfg   Config
	app   *fiber.App
	pub   Publisher
	ready ReadyFunc
	// readyFlight runs one readiness check at a time (handleReady).
	readyFlight singleflight.Group
	log         *zap.Logger
	metrics     *metrics
	apps        map[string]*appRoute

	tokenDigest [sha256.Size]byte

	shuttingDown atomic.Bool
	conns        connSet
	// idle is signalled when the last request in flight ends during a
	// shutdown.
	idle chan struct{}
	// copyBody: the publisher may hold a body after Publish returns, so
	// the handler gives it a copy.
	copyBody bool
	// bodyMem is the body memory of cfg.BodyMemory (readBody).
	bodyMem *semaphore.Weighted
	// dups remembers the bodies stored within cfg.DedupeWindow; nil when
	// off.
	dups *dupIndex
	// evictLog, pubFailLog and shedLog throttle the warnings of the
	// index's early forgetting and of failed and shed publishes.
	evictLog, pubFailLog, shedLog throttle.Throttle
	// storageFull is when JetStream last refused a body for want of
	// storage (UnixNano; 0: never): /readyz fails for storageFullFor
	// after it.
	storageFull atomic.Int64
}

// storageFullFor is how long /readyz fails after JetStream refused a body
// for want of storage: a stream that answers while it refuses every body
// was ready.
const storageFullFor = 5 * time.Second

// storageRefused reports whether err is JetStream refusing a body for want
// of room (jserr.StoreFull: insufficient resources, the account's limits,
// the server's storage spent), as a PubAck error or a batch's refusal.
func storageRefused(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && jserr.StoreFull(int(api.ErrorCode))
}

// appRoute is what the hot path needs of one configured app.
type appRoute struct {
	name     string // owned by the server, safe to keep past a request
	verifier *Verifier
	metrics  *appMetrics
}

// refuseSignature counts a request refused for its signature, by why.
func (r *appRoute) refuseSignature(err error) {
	r.metrics.badSignature.Inc()
	switch {
	case errors.Is(err, ErrSignatureMissing):
		r.metrics.sigMissing.Inc()
	case errors.Is(err, ErrSignatureMalformed):
		r.metrics.sigMalformed.Inc()
	default:
		r.metrics.sigMismatch.Inc()
	}
}

// New builds the endpoint. reg receives the metrics and is served at
// /metrics; log may be nil.
// readTimeout bounds the reading of a webhook, headers and body: a
// client that sends its headers a byte at a time (slowloris) holds its
// connection this long at most. Meta's largest bodies (3 MB) take well
// under a second.
const readTimeout = 10 * time.Second

func New(cfg Config, pub Publisher, ready ReadyFunc, reg *prometheus.Registry, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingest config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{
		cfg:     cfg,
		idle:    make(chan struct{}, 1),
		pub:     pub,
		ready:   ready,
		log:     log,
		metrics: newMetrics(reg),
		apps:    make(map[string]*appRoute, len(cfg.Apps)),
	}
	s.evictLog.Every, s.pubFailLog.Every, s.shedLog.Every = time.Minute, publishFailureLogEvery, publishFailureLogEvery
	_, lends := pub.(BodyLender)
	s.copyBody = !lends
	s.bodyMem = semaphore.NewWeighted(cfg.BodyMemory)
	s.tokenDigest = sha256.Sum256([]byte(cfg.VerifyToken))
	if cfg.DedupeWindow > 0 {
		s.dups = newDupIndex(cfg.DedupeWindow, cfg.DedupeMaxEntries)
		registerDedupe(reg, s.dups)
	}
	for name, secrets := range cfg.Apps {
		s.apps[name] = &appRoute{name: name, verifier: NewVerifier(secrets...), metrics: s.metrics.forApp(name)}
	}
	s.app = fiber.New(fiber.Config{
		DisableStartupMessage: true,
		BodyLimit:             cfg.BodyLimit,
		// Bodies past 8 KiB are read by the handler, as they arrive
		// (readBody), not allocated whole from their Content-Length.
		StreamRequestBody: true,
		// Nor is a multipart body parsed (to its announced length) before
		// the handler: Meta sends JSON.
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  readTimeout,
		WriteTimeout:                 30 * time.Second,
		IdleTimeout:                  2 * time.Minute,
		ErrorHandler:                 s.handleError,
		AppName:                      "wahook",
	})
	// An answer that leaves bytes of a body unread closes the connection
	// (what follows would be taken for the next request); and first, a
	// body where none is taken is refused unread.
	srv := s.app.Server()
	srv.Handler = httpbody.CloseLeft(srv.Handler)
	s.app.Use(func(c *fiber.Ctx) error {
		if httpbody.Unexpected(c.Request()) {
			c.Context().SetConnectionClose()
			return c.Status(fiber.StatusBadRequest).SendString("a body is taken by POST /webhook only")
		}
		return c.Next()
	})
	s.app.Get("/webhook", s.handleHandshake)
	s.app.Get("/webhook/:app", s.handleHandshake)
	s.app.Post("/webhook", s.handleNotification)
	s.app.Post("/webhook/:app", s.handleNotification)
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	s.app.Get("/readyz", s.handleReady)
	if !cfg.NoMetrics {
		s.app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	}
	return s, nil
}

// App returns the Fiber app, for tests (app.Test) and benchmarks.
func (s *Server) App() *fiber.App { return s.app }

// AppNames returns the configured app names, sorted.
func (s *Server) AppNames() []string {
	names := make([]string, 0, len(s.apps))
	for n := range s.apps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.conns.init()
	return s.app.Listener(&trackingListener{Listener: ln, conns: &s.conns})
}

// Shutdown fails readiness, waits ShutdownDelay so that load balancers stop
// sending, then stops accepting connections and waits for the requests in
// flight to finish, each with its ack or its 503.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shuttingDown.Store(true)
	if d := s.cfg.ShutdownDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	// fasthttp closes the listener and waits for every connection to turn
	// idle; a connection a client opened and never used, or one stuck
	// mid-read, could hold that wait indefinitely. So wait for the webhook
	// requests in flight (each answers only after its ack or its 503), give
	// fasthttp a moment to write their answers, then close what is left.
	errc := make(chan error, 1)
	go func() { errc <- s.app.ShutdownWithContext(ctx) }()
wait:
	for s.metrics.inflight.Load() > 0 {
		select {
		case <-s.idle:
		case <-ctx.Done():
			break wait
		}
	}
	grace := time.NewTimer(2 * time.Second)
	defer grace.Stop()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("stop http: %w", err)
		}
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	n := s.conns.closeAll()
	s.log.Info("closed connections left open after the requests in flight", zap.Int("connections", n))
	if err := <-errc; err != nil && ctx.Err() == nil {
		return fmt.Errorf("stop http: %w", err)
	}
	if h := s.metrics.inflight.Load(); h > 0 {
		return fmt.Errorf("stop http: %d requests still in flight: %w", h, ctx.Err())
	}
	return nil
}

// connSet tracks the server's open connections.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (c *connSet) init() {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[net.Conn]struct{}{}
	}
	c.mu.Unlock()
}

func (c *connSet) closeAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.m)
	for conn := range c.m {
		_ = conn.Close()
	}
	return n
}

type trackingListener struct {
	net.Listener
	conns *connSet
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.conns.mu.Lock()
	l.conns.m[c] = struct{}{}
	l.conns.mu.Unlock()
	return &trackedConn{Conn: c, conns: l.conns}, nil
}

type trackedConn struct {
	net.Conn
	conns *connSet
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.conns.mu.Lock()
		delete(c.conns.m, c.Conn)
		c.conns.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *Server) route(c *fiber.Ctx) *appRoute {
	name := c.Params("app")
	if name == "" {
		name = schema.DefaultApp
	}
	return s.apps[name]
}

// handleHandshake answers Meta's verification GET (docs/meta-webhooks.md 1.1): 200 with
// hub.challenge as the plain-text body when hub.mode is subscribe and the
// token matches, 403 otherwise.
func (s *Server) handleHandshake(c *fiber.Ctx) error {
	if s.route(c) == nil {
		return c.Status(fiber.StatusNotFound).SendString("unknown app")
	}
	// Digests of equal length are compared, so the time taken tells
	// nothing of the token's length either.
	got := sha256.Sum256([]byte(c.Query("hub.verify_token")))
	ok := s.cfg.VerifyToken != "" &&
		c.Query("hub.mode") == "subscribe" &&
		subtle.ConstantTimeCompare(got[:], s.tokenDigest[:]) == 1
	if !ok {
		s.metrics.handshakes.WithLabelValues("refused").Inc()
		return c.Status(fiber.StatusForbidden).SendString("verification refused")
	}
	s.metrics.handshakes.WithLabelValues("ok").Inc()
	c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff") // the challenge is the caller's text
	return c.SendString(c.Query("hub.challenge"))
}

// handleNotification verifies, publishes and answers a webhook POST.
func (s *Server) handleNotification(c *fiber.Ctx) error {
	start := time.Now()
	// Counted from the start, so that a shutdown waits for every request
	// it has accepted, and /metrics shows them; every answer, whatever it
	// is, is in the latency histogram.
	s.metrics.inflight.Add(1)
	defer func() {
		s.metrics.latency.Observe(time.Since(start).Seconds())
		if s.metrics.inflight.Add(-1) == 0 && s.shuttingDown.Load() {
			select { // wake Shutdown, which waits for none in flight
			case s.idle <- struct{}{}:
			default:
			}
		}
	}()
	r := s.route(c)
	if r == nil {
		s.metrics.requests.WithLabelValues("", resultUnknownApp).Inc()
		return c.Status(fiber.StatusNotFound).SendString("unknown app")
	}
	// Meta sends plain JSON. A Content-Encoding is refused before anything
	// else: Fiber's c.Body() would inflate it, unbounded, before the
	// signature is checked, and Meta signs the bytes it sends, not an
	// inflated form of them.
	if len(c.Request().Header.ContentEncoding()) > 0 {
		s.metrics.requests.WithLabelValues(r.name, resultBadEncoding).Inc()
		return c.Status(fiber.StatusUnsupportedMediaType).SendString("Content-Encoding is not accepted")
	}
	// An HTTP/1.0 POST without a length: fasthttp takes its body as empty,
	// which would be answered 401 as a signature mismatch.
	if httpbody.LengthRequired(c.Request()) {
		s.metrics.requests.WithLabelValues(r.name, resultBadEncoding).Inc()
		c.Context().SetConnectionClose() // a body may follow, unread
		return c.Status(fiber.StatusLengthRequired).SendString("Content-Length required (HTTP/1.0 without one or chunks)")
	}
	// A request that carries no signature, or one that cannot be one, is
	// refused before its body is read: reading it first held its announced
	// size of the body memory until it came (an unsigned slow upload, a
	// few dozen of which took all of it, and Meta's larger webhooks got
	// 503s meanwhile).
	var sig [sha256.Size]byte
	if err := parseSignature(c.Request().Header.Peek(schema.SignatureHeader), &sig); err != nil {
		r.refuseSignature(err)
		c.Context().SetConnectionClose() // the body may follow, unread
		return c.Status(fiber.StatusUnauthorized).SendString(err.Error())
	}
	// The raw bytes as received: never c.Body(), which decodes.
	body, release, err := s.readBody(c)
	if err != nil {
		switch {
		case errors.Is(err, httpbody.ErrTooLarge):
			s.metrics.requests.WithLabelValues(r.name, resultTooLarge).Inc()
			return c.Status(fiber.StatusRequestEntityTooLarge).SendString(fmt.Sprintf("body over the limit of %d bytes", s.cfg.BodyLimit))
		case errors.Is(err, errBodyNoRoom):
			// As a request past capacity: nothing read, nothing stored.
			r.metrics.shed.Inc()
			s.logShed(r.name, err)
			c.Set(fiber.HeaderRetryAfter, "1")
			return c.Status(fiber.StatusServiceUnavailable).SendString("too many large bodies being received, not stored, retry")
		case errors.Is(err, httpbody.ErrMalformed):
			// The client's error, not a slow or broken read: counted with
			// the other bodies refused for their encoding.
			s.metrics.requests.WithLabelValues(r.name, resultBadEncoding).Inc()
			return c.Status(fiber.StatusBadRequest).SendString("malformed chunked body (Transfer-Encoding: chunked)")
		default:
			s.metrics.requests.WithLabelValues(r.name, resultIncomplete).Inc()
			return c.Status(fiber.StatusRequestTimeout).SendString("body cut short or not received in time")
		}
	}
	// The ack is waited for AckTimeout from when the body is all here: a
	// long body read by the handler (readBody) takes its time to arrive.
	deadline := start.Add(s.cfg.AckTimeout)
	if release != nil {
		defer release()
		deadline = time.Now().Add(s.cfg.AckTimeout)
	}
	// The signature read before the body, checked against it.
	if err := r.verifier.verifySum(&sig, body); err != nil {
		r.refuseSignature(err)
		return c.Status(fiber.StatusUnauthorized).SendString(err.Error())
	}
	// The body's SHA-256: the key of the duplicate index, and in hex its
	// Nats-Msg-Id (schema.RawMsgIDOf).
	sum := sha256.Sum256(body)
	if s.dups != nil && s.dups.seen(&sum) {
		// The stream acknowledged this body within the window: a Meta
		// retry. It is stored; nothing is published.
		r.metrics.duplicate.Inc()
		s.metrics.dupIndex.Inc()
		return c.SendStatus(fiber.StatusOK)
	}
	// fasthttp reuses the request's buffer once the handler returns, and
	// a publish that times out can still hold the body: it gets a copy,
	// unless the publisher lets go of the body when Publish returns.
	data := body
	if s.copyBody {
		data = make([]byte, len(body))
		copy(data, body)
	}

	pubStart := time.Now()
	dup, err := s.pub.Publish(r.name, schema.RawMsgIDOf(&sum), data, start, deadline)
	if errors.Is(err, ErrOverloaded) {
		// Past capacity: nothing was published, so Meta's retry is the
		// only copy; no store work is wasted on an answer of 503.
		r.metrics.shed.Inc()
		s.logShed(r.name, err)
		c.Set(fiber.HeaderRetryAfter, "1")
		return c.Status(fiber.StatusServiceUnavailable).SendString("overloaded, not stored, retry")
	}
	if err != nil {
		// Not remembered: the body may not be stored, so Meta's retry
		// is published again. If this copy was stored after all, the
		// stream's window stores a retry that comes soon once, and
		// downstream deduplicates a later one by event id.
		r.metrics.unavailable.Inc()
		if storageRefused(err) {
			s.storageFull.Store(time.Now().UnixNano())
		}
		s.logPublishFailure(r.name, len(data), err)
		c.Set(fiber.HeaderRetryAfter, "1")
		return c.Status(fiber.StatusServiceUnavailable).SendString("not stored, retry")
	}
	// Only now that an ack covers the body: an id remembered before it
	// would answer a retry 200 for a body that may never be stored.
	if s.dups != nil && s.dups.add(&sum) > 0 {
		s.logEvictions()
	}
	s.metrics.publish.Observe(time.Since(pubStart).Seconds())
	if dup {
		r.metrics.duplicate.Inc()
		s.metrics.dupStream.Inc()
	} else {
		r.metrics.ok.Inc()
		s.metrics.bytes.Add(float64(len(data)))
	}
	return c.SendStatus(fiber.StatusOK)
}

// logEvictions warns, once a minute at most, that the duplicate index
// forgets ids before their window ends (VM lib/logger/throttler.go: never
// flood the logs from the hot path; the counter has every one).
func (s *Server) logEvictions() {
	if _, due := s.evictLog.Note(); !due {
		return
	}
	s.log.Warn("duplicate index full: forgetting the oldest body ids before their window ends; Meta's retries of those bodies will be stored again, and deduplicated downstream by event id",
		zap.Uint64("forgotten_total", s.dups.evictions()), zap.Int("dedupe_max_entries", s.cfg.DedupeMaxEntries),
		zap.Duration("dedupe_window", s.cfg.DedupeWindow))
}

// publishFailureLogEvery is how often at most a failed or shed publish is
// logged.
const publishFailureLogEvery = 10 * time.Second

// logPublishFailure warns of a publish that failed: the first at once, then
// one line every publishFailureLogEvery at most
// (wahook_ingest_requests_total{result="unavailable"} counts every one).
func (s *Server) logPublishFailure(app string, bytes int, err error) {
	n, due := s.pubFailLog.Note()
	if !due {
		return
	}
	if ce := s.log.Check(zap.WarnLevel, "publish failed, answering 503"); ce != nil {
		ce.Write(zap.String("app", app), zap.Int("bytes", bytes), zap.Int64("failures_since_last_line", n), zap.Error(err))
	}
}

// logShed warns of a request shed before publishing, as logPublishFailure
// does of failures (wahook_ingest_requests_total{result="shed"} counts
// every one): without it, an ingest that sheds everything says nothing.
func (s *Server) logShed(app string, err error) {
	n, due := s.shedLog.Note()
	if !due {
		return
	}
	if ce := s.log.Check(zap.WarnLevel, "past capacity, answering 503 with nothing published"); ce != nil {
		ce.Write(zap.String("app", app), zap.Int64("shed_since_last_line", n), zap.Error(err))
	}
}

// handleReady is 200 while the publisher's store can take bodies, and 503
// from the start of a shutdown on, and for storageFullFor after JetStream
// refused a body for want of storage.
func (s *Server) handleReady(c *fiber.Ctx) error {
	if s.shuttingDown.Load() {
		s.metrics.readyFailure.Inc()
		return c.Status(fiber.StatusServiceUnavailable).SendString("shutting down")
	}
	if at := s.storageFull.Load(); at != 0 && time.Since(time.Unix(0, at)) < storageFullFor {
		s.metrics.readyFailure.Inc()
		return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: JetStream refuses bodies for want of storage (the server's storage, or the account's limits): free or add storage, or raise the limit (--jetstream-max-store with the embedded server; the account's JetStream limits on an external NATS)")
	}
	if s.ready != nil {
		// One check at a time, shared by the requests that come during it:
		// /readyz is on the webhook port, and a request to JetStream's API
		// per hit would let anyone fill the server's API queue, which drops
		// its whole backlog (the stages' requests with it) once full.
		v, _, _ := s.readyFlight.Do("", func() (any, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return s.ready(ctx), nil
		})
		if err, _ := v.(error); err != nil {
			s.metrics.readyFailure.Inc()
			return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: " + err.Error())
		}
	}
	return c.SendString("ready")
}

// handleError answers errors raised outside the handlers, such as a body over
// the limit (413), and counts them.
func (s *Server) handleError(c *fiber.Ctx, err error) error {
	code := fiber.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	if code == fiber.StatusRequestEntityTooLarge {
		s.metrics.requests.WithLabelValues("", resultTooLarge).Inc()
		return c.Status(code).SendString(fmt.Sprintf("body over the limit of %d bytes", s.cfg.BodyLimit))
	}
	return c.Status(code).SendString(err.Error())
}

// JetStreamReady returns a ReadyFunc that checks that JetStream answers and
// the RAW stream exists, on the JetStream context of p.
func JetStreamReady(p *JetStreamPublisher) ReadyFunc { return StreamReady(p.js) }

// StreamReady returns a ReadyFunc that checks that JetStream answers and the
// RAW stream exists.
func StreamReady(js jetstream.JetStream) ReadyFunc {
	return func(ctx context.Context) error {
		if _, err := js.Stream(ctx, schema.StreamRaw); err != nil {
			return fmt.Errorf("stream %s: %w", schema.StreamRaw, err)
		}
		return nil
	}
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/wahook/wahook/internal/httpbody"
	"github.com/wahook/wahook/internal/listener"
	"github.com/wahook/wahook/schema"
)

// Config is the query API's configuration.
type Config struct {
	Listen         string        // address of /api/v1 (default :8081)
	Tokens         []string      // bearer tokens accepted, each as ParseToken reads it; several for rotation
	TokensFile     string        // more tokens, one a line, read again when the file changes
	Limits         Limits        // per IP and per token
	TrustedProxies []string      // addresses or CIDRs whose X-Forwarded-For names the client
	QueryTimeout   time.Duration // longest a query may run in ClickHouse
	Metrics        http.Handler  // served at /metrics when set (wahook api alone)
	// Intake stores send-result documents; nil turns POST
	// /api/v1/send-results off (503).
	Intake Publisher
	// MaxNumbersPerToken bounds the distinct phone number ids one token
	// may report send results for (0: no bound).
	MaxNumbersPerToken int
	// Pacing watches the KV bucket wahook_pacing for the live page and
	// /api/v1/pacing; nil turns them off (503).
	Pacing PacingWatcher
	// Accounts watches the KV bucket wahook_accounts for
	// /api/v1/accounts; nil turns it off (503).
	Accounts PacingWatcher
}

// Publisher stores a send-results document durably (JetStream, RAW app
// schema.SendResultsApp) and returns once it is acknowledged.
type Publisher interface {
	PublishRaw(ctx context.Context, app string, body []byte) error
}

// DefaultConfig is the configuration without tokens.
// readTimeout bounds the reading of an API request, headers and body: a
// client that sends its headers a byte at a time (slowloris) holds its
// connection this long at most. Meta's largest bodies (3 MB) take well
// under a second.
const readTimeout = 10 * time.Second

// bodyLimit is the largest request body the API takes (a send-results
// document).
const bodyLimit = 1 << 20

func DefaultConfig() Config {
	return Config{Listen: ":8081", Limits: DefaultLimits(), QueryTimeout: 10 * time.Second, MaxNumbersPerToken: DefaultMaxNumbersPerToken}
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	if len(c.Tokens) == 0 && c.TokensFile == "" {
		return errors.New("no API token: set at least one bearer token")
	}
	for _, t := range c.Tokens {
		if _, err := ParseToken(t); err != nil {
			return err
		}
	}
	if c.TokensFile != "" {
		if _, err := ReadTokensFile(c.TokensFile); err != nil {
			return fmt.Errorf("tokens file: %w", err)
		}
	}
	if c.QueryTimeout <= 0 {
		return errors.New("query timeout must be positive")
	}
	for _, p := range c.TrustedProxies {
		if net.ParseIP(p) == nil {
			if _, _, err := net.ParseCIDR(p); err != nil {
				return fmt.Errorf("trusted proxy %q is neither an address nor a CIDR", p)
			}
		}
	}
	return nil
}

// group names which second layer of limits a route is behind.
type group string

const (
	groupNone        group = ""
	groupReports     group = "reports"
	groupSendResults group = "send_results"
)

// route is one endpoint of /api/v1; the table of routes drives the router,
// the command line and the OpenAPI document.
type route struct {
	Name    string // the report name of the command line
	Path    string
	Summary string
	Params  []param
	Group   group
	Public  bool   // no token needed
	Schema  string // name of the response schema in the OpenAPI document
	run     func(ctx context.Context, s *Store, q Query) (any, error)
}

var routes = []route{
	{
		Name: "errors", Path: "/api/v1/failures", Group: groupReports, Schema: "Failures",
		Summary: "Failure distribution: error occurrences by code, class, number, WABA, template, campaign or origin, with Meta's title, class and verdict, optionally over time",
		Params:  reportParams(inFailures, pGroupBy, pStep, pLimit),
		run:     func(ctx context.Context, s *Store, q Query) (any, error) { return s.Failures(ctx, q) },
	},
	{
		Name: "funnel", Path: "/api/v1/funnel", Group: groupReports, Schema: "Funnel",
		Summary: "Delivery funnel per campaign, template, number or WABA: sent, delivered, read, failed, and p50/p95 seconds from sent to delivered and to read",
		Params:  reportParams(inFunnel, pBy, pRows),
		run:     func(ctx context.Context, s *Store, q Query) (any, error) { return s.Funnel(ctx, q) },
	},
	{
		Name: "throughput", Path: "/api/v1/throughput", Group: groupReports, Schema: "Throughput",
		Summary: "A number's inbound and outbound messages per second or per minute, against its tier",
		Params:  []param{pOne, pFrom, pTo, pTStep},
		run:     func(ctx context.Context, s *Store, q Query) (any, error) { return s.Throughput(ctx, q) },
	},
	{
		Name: "numbers", Path: "/api/v1/numbers", Group: groupReports, Schema: "Numbers",
		Summary: "Business numbers with statuses or number events in the range (or asked for by phone_number_id), as of its end: tier and its source, quality, messaging limit, last throughput upgrade, maintenance window, recent changes; and the display numbers waiting for their id",
		Params:  reportParams(inNumbers, pRecent),
		run: func(ctx context.Context, s *Store, q Query) (any, error) {
			return s.Numbers(ctx, q, limitOr(q.Limit, 20))
		},
	},
	{
		Name: "dead-letters", Path: "/api/v1/dead-letters", Group: groupReports, Schema: "DeadLetters",
		Summary: "Bodies and items that could not be decoded: count, reasons, the most recent (without bodies)",
		Params:  []param{pFrom, pTo, pRecent},
		run: func(ctx context.Context, s *Store, q Query) (any, error) {
			return s.DeadLetters(ctx, q, limitOr(q.Limit, 20))
		},
	},
	{
		Name: "error-codes", Path: "/api/v1/error-codes", Group: groupReports, Schema: "ErrorCodes",
		Summary: "Meta's error codes that wahook knows, with title, class, verdict and whether a retry can succeed",
		run: func(context.Context, *Store, Query) (any, error) {
			return errorCodes{Codes: schema.ErrorCodes()}, nil
		},
	},
}

func limitOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// Reports are the names of the reports, for the command line.
func Reports() []string {
	var out []string
	for _, r := range routes {
		out = append(out, r.Name)
	}
	return out
}

// Run answers the report name for query values, as the API does for the
// same parameters: the command line uses it, so its JSON equals the API's.
func Run(ctx context.Context, s *Store, name string, values url.Values, now time.Time) (any, error) {
	for _, r := range routes {
		if r.Name == name {
			q, err := parseQuery(r.Params, values, now)
			if err != nil {
				return nil, err
			}
			return r.run(ctx, s, q)
		}
	}
	return nil, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no report %q; reports: %s", name, strings.Join(Reports(), ", "))}
}

// Encode is the JSON of an answer, as the API writes it.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Server is the query API.
type Server struct {
	cfg     Config
	store   *Store
	app     *fiber.App
	log     *zap.Logger
	metrics *metrics
	tokens  *tokenSet
	now     func() time.Time

	tenantNumbers *tenantNumbers
	live          *liveHub
	readyFlight   singleflight.Group

	globalIP, globalToken *window
	groups                map[group][2]*window // per IP, per token
	numbers               *tokenNumbers        // send results' numbers per token
	proxies               []netip.Prefix       // cfg.TrustedProxies
}

// New builds the API on store. reg receives its metrics; log may be nil.
func New(cfg Config, store *Store, reg prometheus.Registerer, log *zap.Logger) (*Server, error) {
	return newServer(cfg, store, reg, log, time.Now)
}

func newServer(cfg Config, store *Store, reg prometheus.Registerer, log *zap.Logger, now func() time.Time) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("api config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	tokens := &tokenSet{file: cfg.TokensFile, log: log}
	var tokensFileValid func() float64
	if cfg.TokensFile != "" {
		tokensFileValid = func() float64 { return tokens.validNow(now()) }
	}
	s := &Server{cfg: cfg, store: store, log: log, now: now, metrics: newMetrics(reg, tokensFileValid), numbers: newTokenNumbers(cfg.MaxNumbersPerToken),
		tenantNumbers: &tenantNumbers{entries: map[string]numbersEntry{}}, tokens: tokens}
	for _, t := range cfg.Tokens {
		spec, _ := ParseToken(t) // checked by Validate
		s.tokens.fixed = append(s.tokens.fixed, credentialsOf([]TokenSpec{spec})...)
	}
	s.tokens.current(now()) // the tokens file's first read, and its gauge set
	s.live = newLiveHub(cfg.Pacing, log)
	l := cfg.Limits
	s.globalIP, s.globalToken = newWindow("global_ip", l.GlobalIP, now), newWindow("global_token", l.GlobalToken, now)
	s.groups = map[group][2]*window{
		groupReports:     {newWindow("reports_ip", l.ReportsIP, now), newWindow("reports_token", l.ReportsToken, now)},
		groupSendResults: {newWindow("send_results_ip", l.SendResultsIP, now), newWindow("send_results_token", l.SendResultsToken, now)},
	}
	fc := fiber.Config{
		DisableStartupMessage: true,
		AppName:               "wahook-api",
		ReadTimeout:           readTimeout,
		WriteTimeout:          cfg.QueryTimeout + 10*time.Second,
		IdleTimeout:           2 * time.Minute,
		BodyLimit:             bodyLimit,
		// The request line and headers: 4 KiB by default, which a
		// campaign filter of Meta's 512 characters passes once
		// percent-encoded (up to 9 bytes a character; 431 before any
		// handler). Each connection holds this buffer for its life, idle
		// too: 8 KiB, not more, under --api-max-conns.
		ReadBufferSize: 8 << 10,
		// A body past 8 KiB is read by its handler, as it arrives, after
		// the token is checked (package httpbody): not allocated whole from
		// its Content-Length before anything else.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true, // nor a multipart body parsed before it
		ErrorHandler:                 s.fiberError,
	}
	for _, p := range cfg.TrustedProxies {
		s.proxies = append(s.proxies, parseProxy(p))
	}
	s.app = fiber.New(fc)
	// A body where none is taken is refused unread; an answer given
	// without reading the whole body (a refused token) closes the
	// connection: the rest of the body would be taken for the next request.
	srv := s.app.Server()
	srv.Handler = httpbody.CloseLeft(srv.Handler)
	s.app.Use(func(c *fiber.Ctx) error {
		if httpbody.Unexpected(c.Request()) {
			c.Context().SetConnectionClose()
			return s.writeError(c, &Error{Status: http.StatusBadRequest, Code: CodeBadParameter, Message: "a body is taken by POST /api/v1/send-results only"})
		}
		return c.Next()
	})
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	s.app.Get("/readyz", func(c *fiber.Ctx) error {
		// One check at a time, shared by the requests that come during
		// it: /readyz asks for no token, and a ping per request let
		// anyone take the pool's connections from the reports.
		v, _, _ := s.readyFlight.Do("", func() (any, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return store.Ping(ctx), nil
		})
		if err, _ := v.(error); err != nil {
			return c.Status(http.StatusServiceUnavailable).SendString("clickhouse not reachable")
		}
		return c.SendString("ready")
	})
	if cfg.Metrics != nil {
		s.app.Get("/metrics", adaptor.HTTPHandler(cfg.Metrics))
	}
	v1 := s.app.Group("/api/v1", s.limitGlobal)
	v1.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
		return c.Send(openAPIDocument())
	})
	for i := range routes {
		r := &routes[i]
		v1.Get(strings.TrimPrefix(r.Path, "/api/v1"), s.authorize, s.limitGroup(r.Group), s.handle(r))
	}
	v1.Post("/send-results", s.authorize, s.limitGroup(groupSendResults), s.sendResults)
	v1.Get("/pacing", s.authorize, s.limitGroup(groupReports), s.pacingSnapshot)
	v1.Get("/accounts", s.authorize, s.limitGroup(groupReports), s.accounts)
	v1.Get("/pacing/stream", s.authorize, s.pacingStream)
	v1.Use(func(c *fiber.Ctx) error {
		return s.writeError(c, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such route; see /api/v1/openapi.json"})
	})
	s.mountUI()
	return s, nil
}

// App is the Fiber app, for tests and for serving on a listener.
func (s *Server) App() *fiber.App { return s.app }

// Serve answers on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(ln) }

// Shutdown stops accepting and waits for running requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.live.close() // the live streams end, or they would hold the shutdown
	return s.app.ShutdownWithContext(ctx)
}

// handle runs a route's query with the parameters of the request.
func (s *Server) handle(r *route) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		values := url.Values{}
		c.Context().QueryArgs().VisitAll(func(k, v []byte) { values.Add(string(k), string(v)) })
		q, err := parseQuery(r.Params, values, s.now())
		if err != nil {
			return s.writeError(c, err)
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.QueryTimeout)
		defer cancel()
		if t := tenantOf(c); t != nil && r.Name != "error-codes" {
			if err := s.scope(ctx, t, &q); err != nil {
				return s.writeError(c, err)
			}
		}
		res, err := runRoute(ctx, r, s.store, q)
		s.metrics.duration.WithLabelValues(r.Name).Observe(time.Since(start).Seconds())
		if err != nil {
			e := asError(err)
			if e.Status >= 500 {
				s.log.Warn("query failed", zap.String("report", r.Name), zap.Error(err))
			}
			return s.writeError(c, e)
		}
		b, err := Encode(res)
		if err != nil {
			return s.writeError(c, err)
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
		c.Set(fiber.HeaderCacheControl, "no-store")
		s.metrics.requests.WithLabelValues(r.Name, "200").Inc()
		return c.Send(b)
	}
}

// authorize accepts a configured bearer token, compared in constant time
// (as digests, so that the length of a token does not show either).
func (s *Server) authorize(c *fiber.Ctx) error {
	if token := bearerToken(c); token != "" {
		id, cred := match(s.credentials(), token)
		if cred != nil {
			c.Locals(localToken, id)
			if cred.tenant != nil {
				c.Locals(localTenant, cred.tenant)
			}
			if v := s.take(c, s.globalToken, id); !v.ok {
				return s.refuse(c, v)
			}
			return c.Next()
		}
	}
	s.metrics.unauthorized.Inc()
	c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="wahook"`)
	return s.writeError(c, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
		Message: "send a configured token as Authorization: Bearer <token>"})
}

// bearerToken is the request's bearer token, "" without one.
func bearerToken(c *fiber.Ctx) string {
	scheme, token, ok := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// credentials is the tokens accepted now (the tokens file read again
// when it changed).
func (s *Server) credentials() []credential {
	return s.tokens.current(s.now())
}

// sameScope reports whether token is still accepted, with the scope t it
// had (nil: every WABA).
func (s *Server) sameScope(token string, t *tenant) bool {
	_, cred := match(s.credentials(), token)
	if cred == nil {
		return false
	}
	if cred.tenant == nil || t == nil {
		return cred.tenant == t
	}
	return cred.tenant.key() == t.key()
}

// localToken is the Locals key of the request's token id (a digest prefix,
// never the token).
const localToken = "wahook-token"

// localTenant is the Locals key of a scoped token's tenant.
const localTenant = "wahook-tenant"

// tenantOf is the request's tenant, nil for a token that sees every WABA.
func tenantOf(c *fiber.Ctx) *tenant {
	t, _ := c.Locals(localTenant).(*tenant)
	return t
}

// limitGlobal applies the global limit per client IP, before the token is
// checked, so that guessing tokens is limited too.
func (s *Server) limitGlobal(c *fiber.Ctx) error {
	if v := s.take(c, s.globalIP, s.clientIP(c)); !v.ok {
		return s.refuse(c, v)
	}
	return c.Next()
}

// limitGroup applies the limits of a route's group, per IP and per token.
func (s *Server) limitGroup(g group) fiber.Handler {
	w := s.groups[g]
	return func(c *fiber.Ctx) error {
		if v := s.take(c, w[0], s.clientIP(c)); !v.ok {
			return s.refuse(c, v)
		}
		tok, _ := c.Locals(localToken).(string)
		if v := s.take(c, w[1], tok); !v.ok {
			return s.refuse(c, v)
		}
		return c.Next()
	}
}

// take counts the request against w (nil: no limit) and sets the
// X-RateLimit headers to the tightest limit applied so far.
func (s *Server) take(c *fiber.Ctx, w *window, key string) verdict {
	if w == nil {
		return verdict{ok: true}
	}
	v := w.take(key)
	prev, _ := c.Locals(localRemaining).(int)
	if _, set := c.Locals(localRemaining).(int); !set || v.remaining <= prev {
		c.Locals(localRemaining, v.remaining)
		c.Set("X-RateLimit-Limit", strconv.Itoa(v.limit))
		c.Set("X-RateLimit-Remaining", strconv.Itoa(v.remaining))
		c.Set("X-RateLimit-Reset", strconv.Itoa(ceilSeconds(v.reset)))
	}
	return v
}

const localRemaining = "wahook-remaining"

// refuse answers 429 with Retry-After: the seconds until the window ends.
func (s *Server) refuse(c *fiber.Ctx, v verdict) error {
	s.metrics.limited.WithLabelValues(v.name).Inc()
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ceilSeconds(v.reset)))
	return s.writeError(c, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
		Message: fmt.Sprintf("limit %s of %d requests per window used up; retry after %d s", v.name, v.limit, ceilSeconds(v.reset))})
}

func ceilSeconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// writeError answers err as the API's JSON error.
func (s *Server) writeError(c *fiber.Ctx, err error) error {
	e := asError(err)
	b, _ := json.Marshal(errorBody{Error: e})
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	s.metrics.requests.WithLabelValues(routeName(c), strconv.Itoa(e.Status)).Inc()
	return c.Status(e.Status).Send(append(b, '\n'))
}

// fiberError answers the errors Fiber raises itself (bad requests, bodies
// too large, no route) in the API's JSON.
func (s *Server) fiberError(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code := CodeInternal
		switch fe.Code {
		case http.StatusNotFound, http.StatusMethodNotAllowed:
			code = CodeNotFound
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
			http.StatusRequestHeaderFieldsTooLarge:
			// The request itself is wrong (too large a body, URL or
			// headers): the client's to fix, not a bug.
			code = CodeBadParameter
		}
		return s.writeError(c, &Error{Status: fe.Code, Code: code, Message: fe.Message})
	}
	s.log.Error("api handler", zap.Error(err))
	return s.writeError(c, err)
}

func routeName(c *fiber.Ctx) string {
	p := c.Path()
	for _, r := range routes {
		if r.Path == p {
			return r.Name
		}
	}
	switch p {
	case "/api/v1/openapi.json":
		return "openapi"
	case "/api/v1/send-results":
		return "send-results"
	case "/api/v1/pacing", "/api/v1/pacing/stream":
		return "pacing"
	case "/api/v1/accounts":
		return "accounts"
	}
	return "other"
}

// clientIP is the request's client address (an IPv6 client's /64:
// listener.ClientKey), a string of its own (the windows keep their keys).
// From a trusted proxy it is the address that proxy's X-Forwarded-For names
// last, past any other trusted proxy: the list's leftmost entries are the
// client's to write, so the one a trusted proxy added is the rightmost that
// is not itself a trusted proxy.
func (s *Server) clientIP(c *fiber.Ctx) string {
	remote, ok := netip.AddrFromSlice(c.Context().RemoteIP())
	if !ok {
		return strings.Clone(c.IP())
	}
	return s.clientOf(remote, c.Request().Header.PeekAll(fiber.HeaderXForwardedFor))
}

// clientOf is clientIP of a request from remote with the X-Forwarded-For
// headers xff.
func (s *Server) clientOf(remote netip.Addr, xff [][]byte) string {
	remote = remote.Unmap()
	if !s.trusted(remote) {
		return listener.ClientKey(remote)
	}
	var hops []string
	for _, v := range xff {
		hops = append(hops, strings.Split(string(v), ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := hopAddr(strings.TrimSpace(hops[i]))
		if !ok {
			break // not an address: nothing before it can be trusted
		}
		if a = a.Unmap(); !s.trusted(a) {
			return listener.ClientKey(a)
		}
		remote = a
	}
	return listener.ClientKey(remote)
}

// hopAddr reads an entry of X-Forwarded-For: an address, or an address
// and port as some proxies write it (198.51.100.7:5555, [2001:db8::1]:443).
func hopAddr(h string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr(), true
	}
	return netip.Addr{}, false
}

// trusted is whether a is one of cfg.TrustedProxies.
func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseProxy reads an address or a CIDR that Validate accepted.
func parseProxy(p string) netip.Prefix {
	if a, err := netip.ParseAddr(p); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen())
	}
	pr, _ := netip.ParsePrefix(p)
	if a := pr.Addr(); a.Is4In6() && pr.Bits() >= 96 {
		// IPv4-mapped, as addresses are compared: unmapped.
		pr = netip.PrefixFrom(a.Unmap(), pr.Bits()-96)
	}
	return pr.Masked()
}

func errField(err error) zap.Field { return zap.Error(err) }

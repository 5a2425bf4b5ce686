package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/schema"
)

// apiOptions are the flags of the query API.
type apiOptions struct {
	cfg     api.Config
	tokens  stringList
	proxies stringList
	tiers   *stringList // --number-tier, shared with the pacing options
	levels  *tierLevels // --tier-default, --tier-upgraded, --tier-coexistence, shared too
	limits  map[string]*string
	conns   connFlags
}

// apiLimitFlags are the limit flags and where each goes.
var apiLimitFlags = []struct {
	name, usage string
	field       func(*api.Limits) *api.Limit
}{
	{"api-limit-global", "requests per window per client IP, all of /api/v1", func(l *api.Limits) *api.Limit { return &l.GlobalIP }},
	{"api-limit-global-token", "requests per window per token, all of /api/v1", func(l *api.Limits) *api.Limit { return &l.GlobalToken }},
	{"api-limit-reports", "report requests per window per client IP", func(l *api.Limits) *api.Limit { return &l.ReportsIP }},
	{"api-limit-reports-token", "report requests per window per token", func(l *api.Limits) *api.Limit { return &l.ReportsToken }},
	{"api-limit-send-results", "send-result requests per window per client IP", func(l *api.Limits) *api.Limit { return &l.SendResultsIP }},
	{"api-limit-send-results-token", "send-result requests per window per token", func(l *api.Limits) *api.Limit { return &l.SendResultsToken }},
}

func (o *apiOptions) register(f *flags) {
	f.Section("query API", func() {
		o.cfg = api.DefaultConfig()
		f.StringVar(&o.cfg.Listen, "api-listen", o.cfg.Listen, "address of the query API (/api/v1/...)")
		f.ListVar(&o.tokens, "api-token", "bearer token of the query API; repeat for several clients or to rotate (secret; at least 16 characters)")
		f.JoinList("api-token", joinScopedTokens)
		f.Secret("api-token")
		f.StringVar(&o.cfg.TokensFile, "api-tokens-file", "", "file of bearer tokens, one a line (TOKEN, NAME:TOKEN or NAME:TOKEN:waba=ID,ID), read again when it changes")
		o.limits = map[string]*string{}
		for _, l := range apiLimitFlags {
			def := l.field(&o.cfg.Limits).String()
			o.limits[l.name] = f.String(l.name, def, l.usage+": REQUESTS/WINDOW (e.g. 600/60s) or off")
		}
		f.ListVar(&o.proxies, "api-trusted-proxy", "address or CIDR of a proxy whose X-Forwarded-For names the client (its rightmost address that is not a trusted proxy), for the per-IP limits; repeat")
		f.DurationVar(&o.cfg.QueryTimeout, "api-query-timeout", o.cfg.QueryTimeout, "longest a report may run in ClickHouse")
		o.conns.register(f, "api-", "the query API")
		f.IntVar(&o.cfg.MaxNumbersPerToken, "api-max-numbers-per-token", o.cfg.MaxNumbersPerToken, "distinct phone number ids one token may report send results for, per API process (0: no bound); past it a document is refused 403 too_many_numbers")
		registerNumberTier(f, &o.tiers)
		registerTierLevels(f, &o.levels)
	})
}

// enabled reports whether any token is configured: without one the API
// would refuse everything, so serve leaves it off.
func (o *apiOptions) enabled() bool { return len(o.tokens) > 0 || o.cfg.TokensFile != "" }

// joinScopedTokens puts together, among the pieces of one
// comma-separated value (WAHOOK_API_TOKEN, or a line of its _FILE), a
// scoped token cut at the commas of its waba=ID,ID: a piece of WABA ids
// (digits, '+' and spaces) after a piece whose third part, as ParseToken
// reads it, begins with waba= is more of its ids. Taken apart, each
// further WABA id was a token of its own, unscoped: whoever knew a
// tenant's WABA id saw every WABA.
func joinScopedTokens(pieces []string) []string {
	var out []string
	for _, p := range pieces {
		if n := len(out); n > 0 && strings.Trim(p, "0123456789+ ") == "" && strings.ContainsAny(p, "0123456789") && scoped(out[n-1]) {
			out[n-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}

// scoped reports whether token t is written NAME:TOKEN:waba=...
func scoped(t string) bool {
	parts := strings.Split(t, ":")
	return len(parts) == 3 && strings.HasPrefix(strings.TrimSpace(parts[2]), "waba=")
}

// build validates the flags into o.cfg.
func (o *apiOptions) build() error {
	o.cfg.Tokens = nil
	for _, t := range o.tokens {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if strings.Trim(t, "0123456789+ ") == "" {
			// What a scoped token's WABA ids would be, cut from it: a
			// token of every WABA.
			return fmt.Errorf("%w: --api-token (%s): a token of digits only looks like WABA ids cut from a scoped token's waba=ID,ID; refused", errUsage, EnvName("api-token"))
		}
		o.cfg.Tokens = append(o.cfg.Tokens, t)
	}
	for _, l := range apiLimitFlags {
		v, err := api.ParseLimit(*o.limits[l.name])
		if err != nil {
			return fmt.Errorf("%w: --%s: %v", errUsage, l.name, err)
		}
		*l.field(&o.cfg.Limits) = v
	}
	o.cfg.TrustedProxies = o.proxies
	if o.cfg.Listen == "" {
		// An empty address would listen on every interface.
		return fmt.Errorf("%w: --api-listen (%s) must not be empty", errUsage, EnvName("api-listen"))
	}
	if err := o.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v (--api-token, %s)", errUsage, err, EnvName("api-token"))
	}
	_, err := o.tierOverrides()
	return err
}

func (o *apiOptions) tierOverrides() (api.Tiers, error) {
	t := api.DefaultTiers()
	if l := o.levels; l != nil {
		t.Default, t.Upgraded, t.Coexistence = l.Default, l.Upgraded, l.Coexistence
	}
	ov, err := parseTierOverrides(*o.tiers)
	t.Overrides = ov
	return t, err
}

// openStore connects to the ClickHouse of dsn for queries. It does not
// migrate: the processors do.
func openStore(ctx context.Context, dsn string, tiers api.Tiers) (*api.Store, func(), error) {
	opts, db, err := parseClickHouseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("clickhouse: %w", err)
	}
	return api.NewStore(conn, db, tiers), func() { conn.Close() }, nil
}

// rawPublisher stores send-results documents in RAW as ingest stores
// webhook bodies: Nats-Msg-Id = the body's hash, the receive time and the
// app in headers, returning once JetStream has acknowledged.
type rawPublisher struct{ js jetstream.JetStream }

func (p rawPublisher) PublishRaw(ctx context.Context, app string, body []byte) error {
	_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: schema.RawSubject(app), Data: body, Header: nats.Header{
		schema.HeaderMsgID:      []string{schema.RawMsgID(body)},
		schema.HeaderReceivedAt: []string{schema.FormatReceivedAt(time.Now())},
		schema.HeaderApp:        []string{app},
	}})
	return err
}

// onNATS gives the API its parts on nc: the pacing readers, and the
// send-result intake unless sendResults is false.
func (o *apiOptions) onNATS(nc *nats.Conn, sendResults bool) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	o.cfg.Pacing = api.Bucket{JS: js, Name: schema.BucketPacing}
	o.cfg.Accounts = api.Bucket{JS: js, Name: schema.BucketAccounts}
	if sendResults {
		o.cfg.Intake = rawPublisher{js}
	}
	return nil
}

// apiServer is a running query API.
type apiServer struct {
	srv   *api.Server
	close func()
	serve *task // Serve, until Shutdown
}

// startAPI serves the query API on o's listen address.
func startAPI(ctx context.Context, log *zap.Logger, o *apiOptions, dsn string, reg prometheus.Registerer) (*apiServer, error) {
	tiers, err := o.tierOverrides()
	if err != nil {
		return nil, err
	}
	store, closeStore, err := openStore(ctx, dsn, tiers)
	if err != nil {
		return nil, err
	}
	srv, err := api.New(o.cfg, store, reg, log.Named("api"))
	if err != nil {
		closeStore()
		return nil, err
	}
	ln, err := o.conns.listen(o.cfg.Listen, "api", reg, log)
	if err != nil {
		closeStore()
		return nil, fmt.Errorf("api listen %s: %w", o.cfg.Listen, err)
	}
	a := &apiServer{srv: srv, close: closeStore}
	a.serve = goTask(func() error { return srv.Serve(ln) })
	log.Info("query API listening", zap.String("addr", ln.Addr().String()), zap.Int("tokens", len(o.cfg.Tokens)))
	return a, nil
}

// stop lets running reports finish (bounded), then closes ClickHouse.
func (a *apiServer) part() part {
	return part{name: "query API stopped", done: a.serve.done, err: a.serve.wait,
		stop: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := a.srv.Shutdown(ctx)
			a.close()
			return err
		}}
}

// runAPI runs the query API alone against ClickHouse.
func runAPI(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("api", stderr)
	var (
		ao          apiOptions
		no          natsOptions
		logo        logOptions
		dsn         string
		sendResults bool
	)
	ao.register(f)
	no.register(f, "NATS server URLs, comma-separated, for POST /api/v1/send-results, the pacing signals (/api/v1/pacing, /api/v1/pacing/stream) and the WABA states (/api/v1/accounts) (empty: those answer 503)")
	f.Section("query API", func() {
		f.BoolVar(&sendResults, "send-results", true, "store send results of POST /api/v1/send-results in NATS (false: that route answers 503; the pacing signals are still read from --nats-url)")
	})
	f.StringVar(&dsn, "clickhouse-dsn", "clickhouse://127.0.0.1:9000/wahook", "ClickHouse, native protocol: clickhouse://user:password@host:9000/database (secret)")
	f.Secret("clickhouse-dsn")
	logo.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if err := ao.build(); err != nil {
		return err
	}
	if _, _, err := parseClickHouseDSN(dsn); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	p := &parts{log: log}
	defer p.stopInto(&err)
	if no.urls != "" {
		if err := no.validate(); err != nil {
			return err
		}
		nc, err := connectExternal(no, "wahook-api", log)
		if err != nil {
			return err
		}
		p.add(part{name: "nats connection drained", stop: func() error { return drainNATS(nc) }})
		if err := ao.onNATS(nc, sendResults); err != nil {
			return err
		}
		if !sendResults {
			log.Info("send-result intake off (--send-results=false): POST /api/v1/send-results answers 503")
		}
	}
	reg := newRegistry()
	ao.cfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	a, err := startAPI(ctx, log, &ao, dsn, reg)
	if err != nil {
		return err
	}
	p.add(a.part())
	return p.wait(ctx)
}

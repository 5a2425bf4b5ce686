package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/pacer/pacerhttp"
)

// runPace is "wahook pace": the pacer as an HTTP sidecar (pacerhttp), for
// sending services in any language, against the NATS of a running wahook.
func runPace(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("pace", stderr)
	var (
		no               natsOptions
		logo             logOptions
		listen, token    string
		metricsListen    string
		hashKey, dataDir string
		hcfg             = pacerhttp.DefaultConfig()
		cfg              = pacer.DefaultConfig()
	)
	no.register(f, "NATS of the running wahook, comma-separated URLs: the pacer reads wahook_pacing, wahook_pair_cooldown and wahook_accounts and reports send results on wahook.raw._send_results (required)")
	f.Section("pacer", func() {
		f.StringVar(&listen, "pace-listen", "127.0.0.1:8095", "address of the pacer's HTTP routes (POST /v1/wait, POST /v1/outcome, GET /v1/rate, GET /v1/stats, GET /healthz)")
		f.StringVar(&token, "pace-token", "", "token every route but /healthz asks for as \"Authorization: Bearer <token>\"; required when --pace-listen is not a loopback address (secret)")
		f.Secret("pace-token")
		f.StringVar(&hashKey, "phone-hash-key", "", "wahook's phone hash key, so that the pacer finds wahook's pair cool-downs (secret; empty: <data-dir>/phone-hash-key, else the pacer keeps its own pair rule only)")
		f.Secret("phone-hash-key")
		f.StringVar(&dataDir, "data-dir", "./data", "serve's data directory, read for the phone hash key when --phone-hash-key is not set")
		f.Float64Var(&cfg.Share, "pace-share", cfg.Share, "the part of each number's rate this sidecar sends at: 1/n when n sidecars (or services) send from the same numbers")
		f.BoolVar(&cfg.CooldownNoWait, "pace-cooldown-no-wait", false, "answer a wait for a recipient in a cool-down at once (result cooldown, with its until) instead of holding it")
		f.BoolVar(&cfg.Replies, "pace-replies", false, "the senders send only replies to customers who wrote first: a restriction Meta puts on a WABA's business-initiated messages does not stop its numbers, one on customer-initiated messages does (a ban stops them either way)")
		f.DurationVar(&hcfg.DefaultWait, "pace-default-wait", hcfg.DefaultWait, "how long a wait is held when it gives no timeout_ms")
		f.DurationVar(&hcfg.MaxWait, "pace-max-wait", hcfg.MaxWait, "the longest timeout_ms a wait may ask for")
		f.BoolVar(&cfg.NoReport, "pace-no-report", false, "report no send results to wahook (the decisions are made all the same)")
		f.StringVar(&metricsListen, "metrics-listen", "", "serve /metrics (Prometheus: wahook_pace_*) on this address, apart from the routes so that it can listen beyond loopback without exposing them (empty: no metrics)")
	})
	logo.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if no.urls == "" {
		return fmt.Errorf("%w: --nats-url is required: the pacer reads wahook's signal from NATS", errUsage)
	}
	if err := no.validate(); err != nil {
		return err
	}
	if err := checkPaceListen(listen, token); err != nil {
		return err
	}
	if hcfg.DefaultWait <= 0 || hcfg.MaxWait <= 0 || hcfg.DefaultWait > hcfg.MaxWait {
		return fmt.Errorf("%w: --pace-default-wait and --pace-max-wait must be positive, the default no longer than the most", errUsage)
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		return fmt.Errorf("%w: --pace-share must be more than 0 and at most 1", errUsage)
	}
	key, kerr := phoneHashKey(hashKey, dataDir, false)
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	if kerr != nil {
		log.Warn("no phone hash key: the pacer keeps its own pair rule but cannot match wahook's pair cool-downs", zap.Error(kerr))
	} else {
		cfg.PhoneHashKey = key
	}
	cfg.Logger = slog.New(zapslog.NewHandler(log.Core(), zapslog.WithName("pacer")))

	nc, err := connectExternal(no, "wahook-pace", log)
	if err != nil {
		return err
	}
	p := &parts{log: log}
	defer p.stopInto(&err)
	p.add(part{name: "nats connection drained", stop: func() error { return drainNATS(nc) }})
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on --pace-listen: %w", err)
	}
	// Checked again on the address bound: a name such as localhost may
	// resolve to one beyond loopback.
	if a, ok := ln.Addr().(*net.TCPAddr); token == "" && (!ok || !a.IP.IsLoopback()) {
		ln.Close()
		return fmt.Errorf("%w: --pace-listen %s is bound to %s, not a loopback address: give --pace-token", errUsage, listen, ln.Addr())
	}
	hcfg.Token = token
	if metricsListen != "" {
		reg := newRegistry()
		if err := startMetrics(ctx, metricsListen, reg, log); err != nil {
			ln.Close()
			return err
		}
		hcfg.Registerer = reg
	}
	pc, err := pacer.New(ctx, js, cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("start the pacer: %w", err)
	}
	h := pacerhttp.New(pc, hcfg)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          zap.NewStdLog(log.With(zap.String("part", "pace http"))),
	}
	served := goTask(func() error { return srv.Serve(ln) })
	// The waits held are answered first (503), so that the server's
	// shutdown does not wait for their turns; the server then answers the
	// outcomes under way, and only then is the pacer closed, reporting
	// every result it was given.
	p.add(part{name: "pace http server stopped, the pacer closed and its results reported", done: served.done, err: served.wait, stop: func() error {
		h.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		serr := srv.Shutdown(sctx)
		cancel()
		if serr != nil {
			// A request still under way (a slow body) is cut: an outcome
			// must not reach the pacer once it is closed.
			_ = srv.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(serr, pc.Close(cctx))
	}})
	log.Info("pacer listening", zap.String("addr", ln.Addr().String()), zap.Float64("share", cfg.Share), zap.Bool("report", !cfg.NoReport))
	return p.wait(ctx)
}

// checkPaceListen refuses a --pace-listen beyond loopback without a
// --pace-token: anyone who reaches it could hold a number's turns or
// report results in its name.
func checkPaceListen(listen, token string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%w: --pace-listen: %v", errUsage, err)
	}
	if token != "" {
		if len(token) < 16 {
			return fmt.Errorf("%w: --pace-token is shorter than 16 characters", errUsage)
		}
		return nil
	}
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: --pace-listen %s is not a loopback address: give --pace-token", errUsage, listen)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/schema"
)

// shutdownTimeout bounds each ordered shutdown.
var shutdownTimeout = 30 * time.Second // a variable for the tests

// newRegistry returns a metrics registry with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// provisionRaw creates or updates the RAW stream, retrying until JetStream
// answers or ctx ends: an external NATS may come up after wahook.
func provisionRaw(ctx context.Context, log *zap.Logger, js jetstream.JetStream, sc ingest.StreamConfig) (*jetstream.StreamInfo, error) {
	wait := 250 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := ingest.EnsureRawStream(cctx, js, sc, false)
		cancel()
		if err == nil {
			log.Info("stream ready", zap.String("stream", info.Config.Name), zap.Uint64("msgs", info.State.Msgs),
				zap.Int("replicas", info.Config.Replicas), zap.Duration("max_age", info.Config.MaxAge),
				zap.Duration("duplicate_window", info.Config.Duplicates), zap.Bool("allow_batched", info.Config.AllowBatchPublish))
			return info, nil
		}
		log.Warn("provisioning the raw stream, retrying", zap.Error(err), zap.Duration("in", wait))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("provision: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// registerPublisher registers the flags of the publisher that sends bodies
// to JetStream; ingestOptions.register calls it after setting o.cfg to the
// defaults.
func (o *ingestOptions) registerPublisher(f *flags) {
	f.StringVar(&o.cfg.Publisher, "publisher", o.cfg.Publisher,
		"how bodies go to JetStream: batch (fast-ingest batches, one ack covers several bodies; nats-server 2.14+) or async (a PubAck per body)")
	f.IntVar(&o.cfg.Batch.Flow, "batch-flow", o.cfg.Batch.Flow, "batch publisher: most bodies one flow ack covers")
	f.DurationVar(&o.cfg.Batch.Linger, "batch-linger", o.cfg.Batch.Linger, "batch publisher: how long a batch waits for another body before it ends")
	f.DurationVar(&o.cfg.Batch.MaxDelay, "batch-max-delay", o.cfg.Batch.MaxDelay, "batch publisher: a batch ends when a body has waited this long for its ack")
}

// checkMaxPayload reports a --body-limit that the connected NATS servers'
// max_payload cannot carry (a body and its headers); nil while not
// connected.
func checkMaxPayload(nc *nats.Conn, bodyLimit int) error {
	return payloadFits(bodyLimit, nc.MaxPayload(), "raise max_payload on the servers or lower --body-limit")
}

// payloadFits reports a --body-limit that a max_payload of mp (0: not
// known) cannot carry with its headers.
func payloadFits(bodyLimit int, mp int64, fix string) error {
	if mp > 0 && int64(bodyLimit)+4096 > mp {
		return fmt.Errorf("--body-limit %d does not fit the NATS max_payload of %d bytes: %s", bodyLimit, mp, fix)
	}
	return nil
}

// checkRawWindow warns of a RAW stream whose duplicate window is shorter
// than the ack timeout. An existing stream keeps its window until wahook
// migrate; one shorter than the ack timeout may store a resent body twice.
func checkRawWindow(log *zap.Logger, info *jetstream.StreamInfo, ackTimeout time.Duration) {
	if err := ingest.CheckRawStream(info, ackTimeout); err != nil {
		log.Warn("the raw stream's duplicate window is too short; run wahook migrate with --raw-duplicate-window of at least --ack-timeout",
			zap.String("stream", schema.StreamRaw), zap.Error(err))
	}
}

// checkLater makes the checks of startEndpoint that need NATS and RAW, for
// an endpoint started before it could read RAW (--provision=false, NATS
// away or RAW not made yet): once connected, a --body-limit that NATS's
// max_payload cannot carry is logged as an error (the endpoint runs on,
// and bodies over the limit get 503); once RAW can be read, a duplicate
// window too short is warned of, and a stream that allows fast batches is
// noted (this process keeps its PubAck per body until restarted). While
// NATS answers and RAW cannot be read, it says so once a minute.
func checkLater(ctx context.Context, log *zap.Logger, nc *nats.Conn, js jetstream.JetStream, cfg ingest.Config) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	payloadChecked := false
	unread := throttle.Throttle{Every: time.Minute}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !nc.IsConnected() {
			continue
		}
		if !payloadChecked {
			payloadChecked = true
			if err := checkMaxPayload(nc, cfg.BodyLimit); err != nil {
				log.Error("NATS answers now, and bodies over its max_payload are answered 503 until this is fixed", zap.Error(err))
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(cctx, schema.StreamRaw)
		cancel()
		if err != nil {
			if _, due := unread.Note(); due && ctx.Err() == nil {
				log.Warn("NATS answers, and the raw stream cannot be read: bodies get 503 until it can (wahook migrate makes it)",
					zap.String("stream", schema.StreamRaw), zap.Error(err))
			}
			continue
		}
		info := s.CachedInfo()
		checkRawWindow(log, info, cfg.AckTimeout)
		if cfg.Publisher == ingest.PublisherBatch && info.Config.AllowBatchPublish {
			log.Info("the raw stream can be read now, and allows fast batches: this process publishes with a PubAck per body until it is restarted",
				zap.String("stream", schema.StreamRaw))
		}
		return
	}
}

// endpoint is a running webhook endpoint.
type endpoint struct {
	srv *ingest.Server
	pub ingest.RawPublisher
	// delay is --shutdown-delay, spent before the requests in flight are
	// waited for: the http stop's time is it and shutdownTimeout.
	delay time.Duration
	serve *task // Serve, until Shutdown
	addr  net.Addr
	// stopChecks ends the checks made once NATS answers (checkLater), if
	// they run.
	stopChecks func() error
}

// startEndpoint provisions the RAW stream (unless told not to) and starts
// answering webhooks on o.cfg.Listen.
func startEndpoint(ctx context.Context, log *zap.Logger, nc *nats.Conn, o *ingestOptions, reg *prometheus.Registry) (*endpoint, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	info := o.provisioned
	switch {
	case info != nil:
	case o.provision:
		if info, err = provisionRaw(ctx, log, js, o.stream); err != nil {
			return nil, err
		}
	default:
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(cctx, schema.StreamRaw)
		cancel()
		if err == nil {
			info = s.CachedInfo()
			break
		}
		why := "it did not answer"
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			why = "not found: run wahook migrate"
		case !nc.IsConnected():
			why = "NATS away"
		}
		log.Warn("the raw stream could not be read at start ("+why+"): bodies get 503 until it can; the check of max_payload is made once NATS answers, the stream's once it can be read",
			zap.String("stream", schema.StreamRaw), zap.Error(err))
	}
	// A body NATS cannot carry would get 503 until Meta gives up: refuse
	// to start instead (nats-server's default max_payload is 1 MB).
	if err := checkMaxPayload(nc, o.cfg.BodyLimit); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	checkRawWindow(log, info, o.cfg.AckTimeout)
	cfg := o.cfg
	if o.metricsListen != "" {
		cfg.NoMetrics = true
		if err := startMetrics(ctx, o.metricsListen, reg, log); err != nil {
			return nil, err
		}
	}
	// Fast batches need a stream that allows them (nats-server 2.14+, the
	// stream provisioned by this version or switched on by wahook migrate);
	// a stream not known to allow them gets a PubAck per body.
	switch {
	case cfg.Publisher != ingest.PublisherBatch:
	case info == nil:
		log.Warn("the raw stream's settings are not known: publishing with a PubAck per body", zap.String("stream", schema.StreamRaw))
		cfg.Publisher = ingest.PublisherAsync
	case !info.Config.AllowBatchPublish:
		log.Warn("the raw stream does not allow fast batches (allow_batched, nats-server 2.14+): publishing with a PubAck per body",
			zap.String("stream", schema.StreamRaw))
		cfg.Publisher = ingest.PublisherAsync
	}
	pub, err := ingest.NewPublisher(nc, cfg)
	if err != nil {
		return nil, err
	}
	srv, err := ingest.New(cfg, pub, ingest.StreamReady(js), reg, log.Named("ingest"))
	if err != nil {
		pub.Close()
		return nil, err
	}
	ln, err := o.conns.listen(cfg.Listen, "ingest", reg, log)
	if err != nil {
		pub.Close()
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	e := &endpoint{srv: srv, pub: pub, addr: ln.Addr(), delay: o.cfg.ShutdownDelay}
	if info == nil {
		cctx, cancel := context.WithCancel(ctx)
		t := goTask(func() error { checkLater(cctx, log, nc, js, o.cfg); return nil })
		e.stopChecks = func() error { cancel(); return t.wait() }
	}
	e.serve = goTask(func() error { return srv.Serve(ln) })
	log.Info("webhook endpoint listening", zap.String("addr", ln.Addr().String()), zap.Strings("apps", srv.AppNames()),
		zap.String("publisher", cfg.Publisher))
	return e, nil
}

// stop shuts the endpoint down in order: readiness fails, HTTP stops
// accepting, requests in flight finish with their acks.
func (e *endpoint) parts() []part {
	var parts []part
	if e.stopChecks != nil {
		parts = append(parts, part{name: "checks of NATS ended", stop: e.stopChecks})
	}
	return append(parts, []part{
		{name: "pending publishes acknowledged", stop: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			defer e.pub.Close()
			return e.pub.Drain(ctx)
		}},
		{name: "http stopped, in-flight requests answered", done: e.serve.done, err: e.serve.wait, stop: func() error {
			// The delay first, then the requests in flight: with one
			// timeout for both, a delay near it left them no time, and
			// one past it left the connections open.
			ctx, cancel := context.WithTimeout(context.Background(), e.delay+shutdownTimeout)
			defer cancel()
			return e.srv.Shutdown(ctx)
		}},
	}...)
}

// drainNATS drains a connection: pending messages go out, subscriptions end.
func drainNATS(nc *nats.Conn) error {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return err
	}
	select {
	case <-closed:
		return nil
	case <-time.After(shutdownTimeout):
		nc.Close()
		return fmt.Errorf("drain did not finish in %s", shutdownTimeout)
	}
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"go.uber.org/zap"
)

// runServe runs the whole system in one process: an embedded nats-server
// with JetStream (unless --nats-url names external servers), the webhook
// endpoint, stage 1, stage 2 and, with an API token, the query API.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("serve", stderr)
	var (
		io_  ingestOptions
		no   natsOptions
		eo   embeddedOptions
		po   processOptions
		ao   apiOptions
		pco  pacingOptions
		logo logOptions
		kvr  kvReplicas
		rto  runtimeOptions
	)
	io_.register(f)
	ao.register(f)
	po.register(f, true)
	pco.register(f)
	no.register(f, "external NATS server URLs, comma-separated (empty: the embedded server)")
	eo.register(f)
	kvr.register(f, "as --raw-replicas")
	logo.register(f)
	rto.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if err := io_.build(); err != nil {
		return err
	}
	if err := no.validate(); err != nil {
		return err
	}
	if err := eo.validate(f, no); err != nil {
		return err
	}
	if err := po.validate(); err != nil {
		return err
	}
	if err := pco.build(); err != nil {
		return err
	}
	if ao.enabled() {
		if err := ao.build(); err != nil {
			return err
		}
	}
	if err := rto.validate(); err != nil {
		return err
	}
	rto.embedded = no.urls == ""
	if rto.embedded {
		if err := payloadFits(io_.cfg.BodyLimit, embeddedMaxPayload, "the embedded server carries no more; lower --body-limit, or run NATS servers with a larger max_payload (--nats-url)"); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		// One embedded server holds one copy: a stream or bucket of more
		// replicas is refused by it at every try, and serve never listened
		// (its start-up retried for ever).
		for _, r := range []struct {
			flag string
			n    int
		}{{"--raw-replicas", io_.stream.Replicas}, {"--events-replicas", po.events.Replicas}, {"--kv-replicas", kvr.or(io_.stream.Replicas)}} {
			if r.n > 1 {
				return fmt.Errorf("%w: %s %d: the embedded NATS server keeps one copy; more replicas need a NATS cluster (--nats-url)", errUsage, r.flag, r.n)
			}
		}
	}
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit

	// The parts start in this order and stop in the reverse: the bus
	// first and last; the processors before the endpoint, so that the
	// endpoint stops taking webhooks first and stage 2 counts stage 1's
	// last batch.
	p := &parts{log: log}
	defer p.stopInto(&err)
	if pp, err := rto.start(log); err != nil {
		return err
	} else if pp != nil {
		p.add(*pp)
	}
	nc, srv, err := openNATS(ctx, no, &eo, log, "wahook-serve")
	if err != nil {
		return err
	}
	if srv != nil {
		log.Info("embedded nats-server ready", zap.String("store", eo.dataDir), zap.String("client_url", srv.ClientURL()))
		p.add(part{name: "embedded nats-server stopped", stop: func() error { srv.Stop(); return nil }})
	}
	p.add(part{name: "nats connection drained", stop: func() error { return drainNATS(nc) }})
	if io_.provision {
		// Before stage 1, whose consumer needs the stream.
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if io_.provisioned, err = provisionRaw(ctx, log, js, io_.stream); err != nil {
			return err
		}
	}
	reg := newRegistry()
	if pco.enabled(&po, log) {
		p.add(stageTask("stage 2 stopped, last signals written", func(ctx context.Context, done chan<- error) {
			runStage2(ctx, log, nc, &pco, po.events, kvr.or(io_.stream.Replicas), reg, done)
		}))
	}
	if !po.disabled {
		p.add(stageTask("stage 1 stopped, last batch written", func(ctx context.Context, done chan<- error) {
			runStage1(ctx, log, nc, &po, eo.dataDir, kvr.or(io_.stream.Replicas), true, reg, done)
		}))
	}
	if ao.enabled() {
		if err := ao.onNATS(nc, true); err != nil {
			return err
		}
		queryAPI, err := startAPI(ctx, log, &ao, po.dsn, reg)
		if err != nil {
			return err
		}
		p.add(queryAPI.part())
	} else {
		log.Info("query API off: no --api-token")
	}
	e, err := startEndpoint(ctx, log, nc, &io_, reg)
	if err != nil {
		return err
	}
	for _, pt := range e.parts() {
		p.add(pt)
	}
	return p.wait(ctx)
}

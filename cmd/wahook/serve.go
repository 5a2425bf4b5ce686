package main

import (
	"context"
	"io"

	"go.uber.org/zap"
)

// runServe runs the whole system in one process: an embedded nats-server
// with JetStream (unless --nats-url names external servers), the webhook
// endpoint, stage 1, stage 2 and, with an API token, the query API.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("serve", stderr)
	var (
		io_  ingestOptions
		no   natsOptions
		eo   embeddedOptions
		po   processOptions
		ao   apiOptions
		pco  pacingOptions
		logo logOptions
	)
	io_.register(f)
	ao.register(f)
	po.register(f, true)
	pco.register(f)
	no.register(f, "external NATS server URLs, comma-separated (empty: the embedded server)")
	eo.register(f)
	logo.register(f)
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
	if _, _, err := durationOrAlways(eo.sync); err != nil {
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
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit

	nc, srv, err := openNATS(no, &eo, log, "wahook-serve")
	if err != nil {
		return err
	}
	stopEmbedded := func() {}
	if srv != nil {
		stopEmbedded = func() {
			step(log, "embedded nats-server stopped", func() error { srv.Stop(); return nil })
		}
		log.Info("embedded nats-server ready", zap.String("store", eo.dataDir), zap.String("client_url", srv.ClientURL()))
	}

	reg := newRegistry()
	e, err := startEndpoint(ctx, log, nc, &io_, reg)
	if err != nil {
		nc.Close()
		stopEmbedded()
		return err
	}
	var queryAPI *apiServer
	apiErrc := make(chan error) // never ready when the API is off
	if ao.enabled() {
		ao.cfg.Intake, err = intake(nc)
		if err == nil {
			queryAPI, err = startAPI(ctx, log, &ao, po.dsn, reg)
		}
		if err != nil {
			e.stop(log)
			drainNATS(log, nc)
			stopEmbedded()
			return err
		}
		apiErrc = queryAPI.errc
	} else {
		log.Info("query API off: no --api-token")
	}
	pctx, stopProcessing := context.WithCancel(context.Background())
	defer stopProcessing()
	processing := make(chan error, 1)
	if !po.disabled {
		go runStage1(pctx, log, nc, &po, eo.dataDir, io_.stream.Replicas, true, reg, processing)
	}
	// Stage 2 stops after stage 1, whose last batch it may still count.
	sctx, stopPacing := context.WithCancel(context.Background())
	defer stopPacing()
	pacing := make(chan error, 1)
	runPacing := pco.enabled(&po, log)
	if runPacing {
		go runStage2(sctx, log, nc, &pco, po.events, io_.stream.Replicas, reg, pacing)
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-e.errc:
		log.Error("http server stopped", zap.Error(err))
	case err = <-processing:
		log.Error("stage 1 stopped", zap.Error(err))
		processing <- nil
	case err = <-apiErrc:
		log.Error("query API stopped", zap.Error(err))
	case err = <-pacing:
		log.Error("stage 2 stopped", zap.Error(err))
		pacing <- nil
	}
	e.stop(log)
	if queryAPI != nil {
		queryAPI.stop(log)
	}
	if !po.disabled {
		stopProcessing()
		step(log, "stage 1 stopped, last batch written", func() error { return <-processing })
	}
	if runPacing {
		stopPacing()
		step(log, "stage 2 stopped, last signals written", func() error { return <-pacing })
	}
	drainNATS(log, nc)
	stopEmbedded()
	return err
}

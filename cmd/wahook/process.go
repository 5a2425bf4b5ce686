package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// runProcess runs the processor alone, against external NATS: stage 1
// (several instances share the work through one durable consumer) and
// stage 2 (unless --no-pacing).
func runProcess(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("process", stderr)
	var (
		no      natsOptions
		po      processOptions
		pco     pacingOptions
		logo    logOptions
		kvr     kvReplicas
		rto     runtimeOptions
		dataDir string
	)
	no.register(f, "NATS server URLs, comma-separated (required)")
	po.register(f, false)
	pco.register(f)
	kvr.register(f, "as --replicas")
	logo.register(f)
	rto.register(f)
	f.StringVar(&dataDir, "data-dir", "./data", "where serve keeps the phone hash key, read when --phone-hash-key is not set")
	listen := f.String("listen", ":8082", "address of /healthz, /readyz and /metrics")
	replicas := f.Int("replicas", 1, "replicas of the KV buckets the stages create (numbers, leases, pacing, cool-downs); WAHOOK_EVENTS takes --events-replicas")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if no.urls == "" {
		return fmt.Errorf("%w: --nats-url is required (wahook serve runs stage 1 on its embedded server)", errUsage)
	}
	if *listen == "" {
		// An empty address would listen on every interface.
		return fmt.Errorf("%w: --listen (%s) must not be empty", errUsage, EnvName("listen"))
	}
	if err := no.validate(); err != nil {
		return err
	}
	if err := po.validate(); err != nil {
		return err
	}
	if err := pco.build(); err != nil {
		return err
	}
	if err := rto.validate(); err != nil {
		return err
	}
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	p := &parts{log: log}
	defer p.stopInto(&err)
	if pp, err := rto.start(log); err != nil {
		return err
	} else if pp != nil {
		p.add(*pp)
	}
	nc, err := connectExternal(no, "wahook-process", log)
	if err != nil {
		return err
	}
	p.add(part{name: "nats connection drained", stop: func() error { return drainNATS(nc) }})
	reg := newRegistry()
	health, err := startHealth(*listen, reg, log)
	if err != nil {
		return err
	}
	p.add(part{name: "health and metrics stopped", stop: func() error { health.stop(); return nil }})
	// Ready while NATS is connected and ClickHouse answers, asked at each
	// /readyz: either away, stage 1 waits (nothing is lost) and the
	// process says so.
	chPing, closePing, err := clickHousePinger(po.dsn)
	if err != nil {
		return err
	}
	health.setCheck(func(ctx context.Context) error {
		if !nc.IsConnected() {
			return errors.New("NATS not connected")
		}
		if err := chPing(ctx); err != nil {
			return fmt.Errorf("ClickHouse: %w", err)
		}
		return nil
	})
	if pco.enabled(&po, log) {
		p.add(stageTask("stage 2 stopped, last signals written", func(ctx context.Context, done chan<- error) {
			runStage2(ctx, log, nc, &pco, po.events, kvr.or(*replicas), reg, done)
		}))
	}
	p.add(stageTask("stage 1 stopped, last batch written", func(ctx context.Context, done chan<- error) {
		runStage1(ctx, log, nc, &po, dataDir, kvr.or(*replicas), false, reg, done)
	}))
	// Last, so that it stops first: /readyz fails from the shutdown on.
	p.add(part{name: "readiness failing", stop: func() error { health.stopping.Store(true); closePing(); return nil }})
	return p.wait(ctx)
}

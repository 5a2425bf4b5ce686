package main

import (
	"context"
	"fmt"
	"io"
)

// runIngest runs only the webhook endpoint, against external NATS.
func runIngest(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("ingest", stderr)
	var (
		io_  ingestOptions
		no   natsOptions
		logo logOptions
		rto  runtimeOptions
	)
	io_.register(f)
	no.register(f, "NATS server URLs, comma-separated (required)")
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
	if no.urls == "" {
		return fmt.Errorf("%w: --nats-url is required (wahook serve runs an embedded server)", errUsage)
	}
	if err := no.validate(); err != nil {
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
	nc, err := connectExternal(no, "wahook-ingest", log)
	if err != nil {
		return err
	}
	p.add(part{name: "nats connection drained", stop: func() error { return drainNATS(nc) }})
	e, err := startEndpoint(ctx, log, nc, &io_, newRegistry())
	if err != nil {
		return err
	}
	for _, pt := range e.parts() {
		p.add(pt)
	}
	return p.wait(ctx)
}

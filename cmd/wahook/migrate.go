package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/wahook/wahook/ingest"
)

// runMigrate creates or updates everything the product needs, then exits:
// the RAW stream on NATS (the embedded store under --data-dir when
// --nats-url is empty).
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("migrate", stderr)
	var (
		io_  ingestOptions
		no   natsOptions
		eo   embeddedOptions
		logo logOptions
	)
	io_.register(f)
	no.register(f, "external NATS server URLs, comma-separated (empty: the embedded store under --data-dir)")
	eo.register(f)
	logo.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if err := io_.stream.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	log, err := newLogger(logo, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	var nc *nats.Conn
	if no.urls == "" {
		eo.listen = "" // migrate needs no clients of its own
		srv, err := startEmbedded(eo, log)
		if err != nil {
			return err
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		if nc, err = connectEmbedded(srv, "wahook-migrate"); err != nil {
			return err
		}
	} else if nc, err = connectExternal(no, "wahook-migrate"); err != nil {
		return err
	}
	defer nc.Close()
	pub, err := ingest.NewJetStreamPublisher(nc, 1, io_.cfg.AckTimeout)
	if err != nil {
		return err
	}
	info, err := ingest.EnsureRawStream(ctx, pub.JetStream(), io_.stream)
	if err != nil {
		return err
	}
	log.Info("migrated", zap.String("stream", info.Config.Name))
	fmt.Fprintf(stdout, "stream %s: %d messages, max age %s, replicas %d, duplicate window %s\n",
		info.Config.Name, info.State.Msgs, info.Config.MaxAge, info.Config.Replicas, info.Config.Duplicates)
	return nil
}

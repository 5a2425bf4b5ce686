package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/stage2"
	"github.com/wahook/wahook/schema"
)

// runMigrate creates or updates everything the product needs, then exits:
// the RAW and EVENTS streams and the numbers bucket on NATS (the embedded
// store under --data-dir when --nats-url is empty), and the ClickHouse
// schema (skipped with an empty --clickhouse-dsn).
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("migrate", stderr)
	var (
		io_  ingestOptions
		no   natsOptions
		eo   embeddedOptions
		po   processOptions
		logo logOptions
	)
	io_.registerStream(f, true)
	no.register(f, "external NATS server URLs, comma-separated (empty: the embedded store under --data-dir)")
	eo.register(f)
	po.registerMigrate(f)
	var kvr kvReplicas
	kvr.register(f, "as --raw-replicas")
	logo.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if err := no.validate(); err != nil {
		return err
	}
	if err := eo.validate(f, no); err != nil {
		return err
	}
	if err := io_.stream.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := io_.stream.CheckAckTimeout(io_.cfg.AckTimeout); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if po.dsn != "" {
		if err := po.validate(); err != nil {
			return err
		}
	} else if !givenOnCommandLine(f, "clickhouse-dsn") {
		// Skipping ClickHouse is asked for on the command line: an empty
		// variable (compose's ${X:-}, a Secret's empty key) skipped the
		// schema and exited 0, and the upgrade's "migrate first" was not
		// done.
		return fmt.Errorf("%w: %s is set but empty: give the DSN, or --clickhouse-dsn '' to migrate JetStream alone", errUsage, EnvName("clickhouse-dsn"))
	}
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	nc, closeNATS, err := openNATSForTask(ctx, no, eo, log, "wahook-migrate")
	if err != nil {
		return err
	}
	defer closeNATS()
	pub, err := ingest.NewJetStreamPublisher(nc, 1, io_.cfg.AckTimeout)
	if err != nil {
		return err
	}
	// The streams and buckets: tried again while the cluster cannot place
	// them yet (a node still joining or restarting), within natsTimeout.
	cctx, cancel := context.WithTimeout(ctx, natsTimeout)
	defer cancel()
	js := pub.JetStream()
	kv := kvr.or(io_.stream.Replicas)
	var info *jetstream.StreamInfo
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		actx, acancel := context.WithTimeout(cctx, natsAttemptTimeout)
		info, err = provisionForMigrate(actx, js, io_.stream, po.events, kv)
		acancel()
		if err == nil {
			break
		}
		if !transientOrMoving(err) || !sleepCtx(cctx, wait) {
			return err
		}
		log.Warn("provisioning the streams and buckets, retrying", zap.Error(err), zap.Duration("in", wait))
	}
	fmt.Fprintf(stdout, "stream %s: %d messages, max age %s, replicas %d, duplicate window %s\n",
		info.Config.Name, info.State.Msgs, info.Config.MaxAge, info.Config.Replicas, info.Config.Duplicates)
	fmt.Fprintf(stdout, "stream WAHOOK_EVENTS and buckets %s, %s, %s, %s, %s ready (%d replicas)\n", schema.BucketNumbers, schema.BucketNumbersPending,
		schema.BucketPacing, schema.BucketPairCooldown, schema.BucketAccounts, kv)
	if po.dsn == "" {
		fmt.Fprintln(stdout, "clickhouse skipped (empty --clickhouse-dsn)")
		return nil
	}
	po.migrate = true
	// The migrations get a budget of their own: on a cluster each
	// statement waits for every replica, and another process may hold the
	// lock while it applies them.
	// ClickHouse may still be starting (compose starts migrate with it, and
	// nothing starts migrate again): the connection is tried again within
	// the same budget. A migration that fails is not: the server answered.
	mctx, mcancel := context.WithTimeout(ctx, migrateTimeout)
	defer mcancel()
	conn, db, err := waitForClickHouse(mctx, &po, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := migrateClickHouse(mctx, conn, db, &po, migrationLock(pub.JetStream(), kv, log), log); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "clickhouse database %s migrated\n", db)
	return nil
}

// waitForClickHouse connects to the ClickHouse of o.dsn, trying again with a
// growing wait while it cannot be reached (refused, reset, no answer in
// time), until ctx ends. A server that answers with an error (a wrong
// password, an unknown user) is not tried again, nor is a DSN that cannot
// be parsed. Each failure is logged naming the servers by host and port,
// never the DSN, which may hold a password.
func waitForClickHouse(ctx context.Context, o *processOptions, log *zap.Logger) (driver.Conn, string, error) {
	if _, _, err := parseClickHouseDSN(o.dsn); err != nil {
		return nil, "", err
	}
	start := time.Now()
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		actx, acancel := context.WithTimeout(ctx, clickHouseAttemptTimeout)
		conn, db, err := connectClickHouse(actx, o)
		acancel()
		if err == nil {
			return conn, db, nil
		}
		if errors.As(err, new(*clickhouse.Exception)) {
			return nil, "", err
		}
		if ctx.Err() == nil {
			log.Warn("clickhouse not reachable, retrying", zap.Error(err), zap.Duration("in", wait))
		}
		if ctx.Err() != nil || !sleepCtx(ctx, wait) {
			return nil, "", fmt.Errorf("clickhouse not reachable, tried for %v: %w", time.Since(start).Round(time.Second), err)
		}
	}
}

// clickHouseAttemptTimeout bounds one attempt of waitForClickHouse to
// connect and ping.
const clickHouseAttemptTimeout = 20 * time.Second

// natsTimeout bounds wahook migrate's streams and buckets, retries
// included; natsAttemptTimeout one attempt.
const (
	natsTimeout        = 2 * time.Minute
	natsAttemptTimeout = 20 * time.Second
)

// provisionForMigrate creates or updates RAW and EVENTS, the numbers map
// and stage 2's buckets, and gives every bucket kv replicas. Each step
// leaves what is already right as it is, so a retry after a failed step
// does again only what is left.
func provisionForMigrate(ctx context.Context, js jetstream.JetStream, raw ingest.StreamConfig, events processor.EventsConfig, kv int) (*jetstream.StreamInfo, error) {
	info, err := ingest.EnsureRawStream(ctx, js, raw, true)
	if err != nil {
		return nil, err
	}
	if err := processor.EnsureEventsStream(ctx, js, events, true); err != nil {
		return nil, err
	}
	if _, err := processor.NewNumberMap(ctx, js, kv); err != nil {
		return nil, err
	}
	if err := stage2.EnsureBuckets(ctx, js, kv, stage2.DefaultConfig().SignalTTL); err != nil {
		return nil, err
	}
	// The buckets are kept as they are when they exist: a changed replica
	// count is applied here, as EnsureRawStream does for RAW. The lease
	// bucket is made by the first process; if it exists, it follows too.
	for _, b := range []string{schema.BucketNumbers, schema.BucketNumbersPending, schema.BucketPacing, schema.BucketPairCooldown, schema.BucketAccounts, schema.BucketLeases} {
		if b == schema.BucketLeases {
			if _, err := js.Stream(ctx, "KV_"+b); err != nil {
				continue
			}
		}
		if err := ensureStreamReplicas(ctx, js, "KV_"+b, kv); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// transientJetStream reports whether err is one a JetStream cluster gives
// while it forms or recovers (no peers to place replicas on, the system
// unavailable, no answer in time), which the same request may not get
// later; a refused configuration is not.
func transientJetStream(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jsErrClusterNoPeers, jsErrClusterNotAvailable:
			return true
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return false
		}
		return api.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// JetStream's error codes for a cluster that cannot place a stream's
// replicas ("no suitable peers for placement") and for a system
// temporarily unavailable (nats-server's JSClusterNoPeersErrF and
// JSClusterNotAvailErr).
const (
	jsErrClusterNoPeers      jetstream.ErrorCode = 10005
	jsErrClusterNotAvailable jetstream.ErrorCode = 10008
)

// migrateTimeout bounds wahook migrate's ClickHouse step: taking the lock
// (after another process's migrations) and applying what is missing.
const migrateTimeout = 10 * time.Minute

// ensureStreamReplicas gives the stream name (a KV bucket's is KV_bucket)
// replicas copies if it has another count.
func ensureStreamReplicas(ctx context.Context, js jetstream.JetStream, name string, replicas int) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	if info.Config.Replicas == replicas {
		return nil
	}
	cfg := info.Config
	cfg.Replicas = replicas
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: %d replicas: %w", name, replicas, err)
	}
	return nil
}

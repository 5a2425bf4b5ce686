package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
)

// processOptions are the flags of stage 1 and its ClickHouse.
type processOptions struct {
	dsn       string
	chCluster string // --clickhouse-cluster: create the schema ON CLUSTER with replicated tables
	hashKey   string
	// hashKeyChange makes hashKey the database's (--phone-hash-key-change).
	hashKeyChange bool
	cfg           processor.Config
	events        processor.EventsConfig
	migrate       bool
	disabled      bool
	// storeContent switches content storage on: the text of inbound
	// messages goes into inbound_messages.content and their EVENTS.
	storeContent bool
	// oneShot is a command that ends (replay): a ClickHouse that answers
	// with a refusal (a wrong password, a failed migration) ends it with
	// that error, where a service waits for the server to be put right.
	oneShot bool
	// funnel is the funnel resolver's configuration; Interval 0 runs none.
	funnel funnel.Config
}

func (o *processOptions) register(f *flags, withSwitch bool) {
	o.registerStage1(f, withSwitch, false)
	f.Section("funnel resolver", func() {
		f.DurationVar(&o.funnel.Interval, "funnel-interval", o.funnel.Interval, "how often the funnel resolver brings the delivery funnel up to date (one instance at a time resolves, under a lease in "+schema.BucketLeases+"; 0: this instance never does)")
		f.DurationVar(&o.funnel.MaxWait, "funnel-max-wait", o.funnel.MaxWait, "longest wait after a pass before the next, or --funnel-interval if longer (0: 1m): passes are otherwise spaced by nine times their length, so that under a burst the funnel lags rather than stage 1's inserts; this bounds the funnel's lag and a pass's size under a sustained load")
		f.IntVar(&o.funnel.MemoryMessages, "funnel-memory", o.funnel.MemoryMessages, "messages whose funnel rows the resolver remembers while it holds the lease, so that it does not read them back from ClickHouse (about 75 bytes each: their keys and strings are kept hashed)")
	})
}

// registerReplay defines what wahook replay takes of the processor's flags:
// those of stage 1's writes, without the consumer's (--flush-interval,
// --stall-after) and the funnel's, which a replay does not use (it took them
// and ignored them).
func (o *processOptions) registerReplay(f *flags) { o.registerStage1(f, false, true) }

// registerStage1 defines ClickHouse, stage 1 and EVENTS flags: with
// withSwitch --no-process, and without the consumer's flags for a replay.
func (o *processOptions) registerStage1(f *flags, withSwitch, replay bool) {
	o.cfg = processor.DefaultConfig()
	o.funnel = funnel.DefaultConfig()
	o.registerClickHouse(f)
	f.Section("ClickHouse", func() {
		f.BoolVar(&o.migrate, "migrate", true, "apply ClickHouse migrations at start-up")
	})
	f.Section("stage 1: bodies to rows and events", func() {
		if withSwitch {
			f.BoolVar(&o.disabled, "no-process", false, "run without stage 1 (webhooks are stored; nothing is written to ClickHouse)")
		}
		f.StringVar(&o.hashKey, "phone-hash-key", "", "key of the keyed hash that stands for end users' numbers; the same on every instance (secret; empty: <data-dir>/phone-hash-key, which serve makes on first start); a key other than the one the database recorded is refused, and a database takes one of at least 16 bytes as its own")
		f.Secret("phone-hash-key")
		f.BoolVar(&o.hashKeyChange, "phone-hash-key-change", false, "make --phone-hash-key the database's key, replacing the one it recorded (hashes made before stay as they were: statuses stored before may count twice)")
		f.IntVar(&o.cfg.BatchRows, "batch-rows", o.cfg.BatchRows, "rows per ClickHouse insert at most")
		if !replay {
			f.DurationVar(&o.cfg.FlushInterval, "flush-interval", o.cfg.FlushInterval, "how long a batch gathers rows before it is written (longer while the previous write runs)")
		}
		f.DurationVar(&o.cfg.AckWait, "ack-wait", o.cfg.AckWait, "how long JetStream waits for stage 1's ack before redelivering; a batch's ClickHouse write gets half of it (a replay's too), a failed batch's parts written again a quarter")
		if !replay {
			f.DurationVar(&o.cfg.StallAfter, "stall-after", o.cfg.StallAfter, "how long stage 1 waits for a body while its consumer holds bodies and no pull request waits for them before it reads the consumer again (a pull request lost with a NATS node is never answered)")
		}
		f.IntVar(&o.cfg.MaxDeliver, "max-deliver", o.cfg.MaxDeliver, "failures of a RAW body on its own while ClickHouse and NATS answer before it becomes a dead letter (retries_exhausted) and is acked; failures during an outage, and the deliveries they cost, never count")
		f.BoolVar(&o.storeContent, "store-content", false, "store the text of inbound messages (text, captions, reply titles, reactions, locations) in inbound_messages.content and their WAHOOK_EVENTS; off: the text is kept nowhere")
		f.BoolVar(&o.cfg.PublishEvents, "publish-events", o.cfg.PublishEvents, "publish every normalized event on WAHOOK_EVENTS")
	})
	o.registerEvents(f)
}

// registerMigrate defines what wahook migrate takes of the processor's
// flags: ClickHouse and the EVENTS stream; the rest keep their defaults.
func (o *processOptions) registerMigrate(f *flags) {
	o.cfg = processor.DefaultConfig()
	o.funnel = funnel.DefaultConfig()
	o.registerClickHouse(f)
	o.registerEvents(f)
}

func (o *processOptions) registerClickHouse(f *flags) {
	f.Section("ClickHouse", func() {
		f.StringVar(&o.dsn, "clickhouse-dsn", "clickhouse://127.0.0.1:9000/wahook", "ClickHouse, native protocol: clickhouse://user:password@host:9000/database (secret)")
		f.Secret("clickhouse-dsn")
		f.StringVar(&o.chCluster, "clickhouse-cluster", "", "ClickHouse cluster (remote_servers) to create the schema on: every table ON CLUSTER with a Replicated engine, so that each replica holds all rows (empty: one server, plain tables)")
	})
}

func (o *processOptions) registerEvents(f *flags) {
	o.events = processor.DefaultEventsConfig()
	f.Section("EVENTS stream", func() {
		f.DurationVar(&o.events.MaxAge, "events-max-age", o.events.MaxAge, "how long WAHOOK_EVENTS keeps events (it can be rebuilt from RAW)")
		f.DurationVar(&o.events.DuplicateWindow, "events-duplicate-window", o.events.DuplicateWindow, "an event republished within it is stored once; consumers dedupe by event id beyond it (each id costs server memory)")
		f.IntVar(&o.events.Replicas, "events-replicas", o.events.Replicas, "replicas of WAHOOK_EVENTS")
	})
}

func (o *processOptions) validate() error {
	if err := o.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if o.funnel.Interval < 0 {
		return fmt.Errorf("%w: --funnel-interval must not be negative", errUsage)
	}
	if o.funnel.Interval > 0 {
		if err := o.funnel.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if _, _, err := parseClickHouseDSN(o.dsn); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// parseClickHouseDSN returns the driver options, connecting to the server's
// default database, and the database that wahook's tables live in (the
// DSN's path, "wahook" when empty): migrations create it if absent.
func parseClickHouseDSN(dsn string) (*clickhouse.Options, string, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("--clickhouse-dsn: %w", err)
	}
	db := opts.Auth.Database
	if db == "" {
		db = "wahook"
	}
	opts.Auth.Database = "default"
	opts.DialTimeout = 5 * time.Second
	opts.ReadTimeout = 60 * time.Second
	return opts, db, nil
}

// phoneHashKey returns the configured key, or the one kept under dataDir.
// Event ids contain the hashes, so every instance must hash with the same
// key: only serve (create true) makes a key, once, for a one-machine setup;
// process and replay use the configured key or serve's.
func phoneHashKey(configured, dataDir string, create bool) ([]byte, error) {
	if configured != "" {
		return []byte(configured), nil
	}
	path := filepath.Join(dataDir, "phone-hash-key")
	if b, err := os.ReadFile(path); err == nil {
		if k := strings.TrimSpace(string(b)); k != "" {
			return []byte(k), nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("phone hash key: %w", err)
	}
	if !create {
		return nil, fmt.Errorf("%w: --phone-hash-key is required (or %s): every instance must hash end users' numbers with the same key, or events count twice", errUsage, path)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("phone hash key: %w", err)
	}
	k := hex.EncodeToString(raw[:])
	// O_EXCL: if another process made one meanwhile, use that one.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return phoneHashKey("", dataDir, false)
	}
	if err != nil {
		return nil, fmt.Errorf("phone hash key: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(k + "\n"); err != nil {
		return nil, fmt.Errorf("phone hash key: %w", err)
	}
	return []byte(k), nil
}

// migrationsLeaseKey is the key of the lease in schema.BucketLeases under
// which one process at a time applies the ClickHouse migrations.
const migrationsLeaseKey = "migrations"

// transientOrMoving reports whether err, from a step that makes its stream
// or bucket when it is missing (NewLease, migrate's provisioning), is worth
// another try: transientJetStream's errors, and a stream not found, which
// then comes from one in the middle of a change (another wahook migrate
// moving the leases bucket to more replicas; the pair cool-down bucket's
// status read right after it was made, while a NATS node rejoined: CI runs'
// TestClusterMigrate failed on both).
func transientOrMoving(err error) bool {
	return transientJetStream(err) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// migrationLock is the lock migrations.Apply holds: the lease
// migrationsLeaseKey, taken by an atomic create, renewed while held, and
// given up by its holder or TTL after its last renewal (a holder that died).
// A renewal that finds the lease lost ends the context it returns, which
// stops Apply before its next statement.
func migrationLock(js jetstream.JetStream, replicas int, log *zap.Logger) migrations.Lock {
	return func(ctx context.Context) (context.Context, func(), error) {
		host, _ := os.Hostname()
		// Each request to JetStream gets leaseRequestTimeout and, when it
		// fails as a forming or recovering cluster makes it fail, is tried
		// again until ctx ends: a request lost while the cluster elects a
		// leader is never answered, and would otherwise hold the whole
		// budget.
		var lease *funnel.Lease
		var last error
		for lease == nil {
			rctx, cancel := context.WithTimeout(ctx, leaseRequestTimeout)
			lease, last = funnel.NewLease(rctx, js, migrationsLeaseKey, fmt.Sprintf("%s/%d", host, os.Getpid()), funnel.DefaultConfig().LeaseTTL, replicas)
			cancel()
			if lease != nil {
				break
			}
			if !transientOrMoving(last) || jetStreamOff(ctx, js, last) {
				return nil, nil, last
			}
			if !sleepCtx(ctx, 250*time.Millisecond) {
				return nil, nil, fmt.Errorf("%w (last: %w)", ctx.Err(), last)
			}
		}
		waited := time.Now()
		for logged := false; ; {
			rctx, cancel := context.WithTimeout(ctx, leaseRequestTimeout)
			held, err := lease.Hold(rctx)
			cancel()
			if held {
				break
			}
			if err != nil {
				if !transientJetStream(err) {
					return nil, nil, err
				}
				// Tried again: a take that landed but whose answer was
				// lost shows as taken, and lapses after the lease's TTL.
				last = err
				log.Debug("migrations lease", zap.Error(err))
			}
			if !logged && time.Since(waited) > 2*time.Second {
				log.Info("waiting for another process to finish migrating clickhouse", zap.String("lease", schema.BucketLeases+"/"+migrationsLeaseKey))
				logged = true
			}
			if !sleepCtx(ctx, 250*time.Millisecond) {
				if last != nil {
					return nil, nil, fmt.Errorf("%w (last: %w)", ctx.Err(), last)
				}
				return nil, nil, fmt.Errorf("%w: %w", errMigratingElsewhere, ctx.Err())
			}
		}
		// Held from this tenure on: a renewal that finds the lease gone
		// (lapsed, while this process was stalled) and takes it anew has
		// lost it all the same, as another may have migrated meanwhile.
		tenure := lease.Tenure()
		held, lost := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(lease.TTL() / 4)
			defer t.Stop()
			for {
				select {
				case <-held.Done():
					return
				case <-t.C:
					// A renewal not answered in time counts as lost, before
					// the lease could lapse and be taken by another.
					rctx, cancel := context.WithTimeout(held, min(leaseRequestTimeout, lease.TTL()/4))
					ok, err := lease.Hold(rctx)
					cancel()
					if ok && lease.Tenure() != tenure {
						ok, err = false, errors.New("the lease lapsed and was taken anew: another process may have migrated meanwhile")
					}
					if !ok && held.Err() == nil {
						log.Warn("lost the migrations lease while migrating: stopping", zap.Error(err))
						lost()
						return
					}
				}
			}
		}()
		return held, func() {
			lost()
			<-done
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			lease.Release(cctx)
		}, nil
	}
}

// errMigratingElsewhere is a wait for the migrations lease that ended
// while another process held it, NATS answering throughout.
var errMigratingElsewhere = errors.New("another process is migrating clickhouse (it holds the migrations lease " + schema.BucketLeases + "/" + migrationsLeaseKey + ")")

// natsError marks an error of NATS met on the way to ClickHouse (the
// migrations lease), for the log to name NATS, not ClickHouse.
type natsError struct{ error }

func (e natsError) Unwrap() error { return e.error }

// natsLock is lock with its errors marked as natsError.
func natsLock(lock migrations.Lock) migrations.Lock {
	return func(ctx context.Context) (context.Context, func(), error) {
		held, release, err := lock(ctx)
		if err != nil && !errors.Is(err, errMigratingElsewhere) {
			err = natsError{err}
		}
		return held, release, err
	}
}

// natsAway reports whether err, from a JetStream request on nc, comes from
// NATS being away or not ready: the connection is down (a client that
// keeps trying fails a request at once, "outbound buffer limit
// exceeded"), or the request failed as transientJetStream's do.
//
// Not away, but refusing for good, so that the process ends naming it: a
// connection closed (the client gave up, after the same authorization
// error twice), or a server that answers with JetStream off (its requests
// find no responder, as they briefly do while a cluster elects a leader:
// told apart by asking for the account).
func natsAway(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, err error) bool {
	if nc.IsClosed() {
		return false
	}
	if !nc.IsConnected() {
		return true
	}
	if jetStreamOff(ctx, js, err) {
		return false
	}
	return errors.Is(err, nats.ErrReconnectBufExceeded) || transientJetStream(err)
}

// jetStreamOff reports whether err, a request that found no responder,
// came from a server with JetStream off (asked for the account), not from
// a cluster electing a leader.
func jetStreamOff(ctx context.Context, js jetstream.JetStream, err error) bool {
	if !errors.Is(err, nats.ErrNoResponders) {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, aerr := js.AccountInfo(actx)
	cancel()
	return errors.Is(aerr, jetstream.ErrJetStreamNotEnabled) || errors.Is(aerr, jetstream.ErrJetStreamNotEnabledForAccount)
}

// leaseRequestTimeout bounds one request of the migrations lock to
// JetStream.
const leaseRequestTimeout = 5 * time.Second

// openClickHouse connects and, unless told not to, applies the migrations
// under lock (nil: none).
func openClickHouse(ctx context.Context, o *processOptions, lock migrations.Lock, log *zap.Logger) (driver.Conn, string, error) {
	conn, db, err := connectClickHouse(ctx, o)
	if err != nil {
		return nil, "", err
	}
	if o.migrate {
		if err := migrateClickHouse(ctx, conn, db, o, lock, log); err != nil {
			conn.Close()
			return nil, "", err
		}
	}
	return conn, db, nil
}

// connectClickHouse opens a connection to the ClickHouse of o.dsn and pings
// it; it returns the database wahook's tables are in too. Its errors name
// the servers by host and port, never the DSN (it may hold a password).
func connectClickHouse(ctx context.Context, o *processOptions) (driver.Conn, string, error) {
	opts, db, err := parseClickHouseDSN(o.dsn)
	if err != nil {
		return nil, "", err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, "", fmt.Errorf("clickhouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("clickhouse %v: %w", opts.Addr, err)
	}
	return conn, db, nil
}

// migrateClickHouse applies the migrations to db on conn under lock (nil:
// none).
func migrateClickHouse(ctx context.Context, conn driver.Conn, db string, o *processOptions, lock migrations.Lock, log *zap.Logger) error {
	res, err := migrations.Apply(ctx, conn, db, migrations.WithCluster(o.chCluster), migrations.WithLock(lock))
	if err != nil {
		return fmt.Errorf("migrate clickhouse: %w", err)
	}
	log.Info("clickhouse migrated", zap.String("database", db), zap.String("server", res.ServerVersion.String()),
		zap.Strings("applied", res.Applied))
	return nil
}

// stage1Deps are what stage 1 and replay need, set up in order.
type stage1Deps struct {
	js      jetstream.JetStream
	conn    driver.Conn
	writer  *chwriter.Writer
	norm    *processor.Normalizer
	numbers *processor.NumberMap
}

// setupStage1 connects to ClickHouse (retrying until it answers or ctx
// ends: an outage delays work, it loses none, since RAW keeps every body),
// migrates, and provisions EVENTS and the numbers bucket (retrying while
// NATS is away).
func setupStage1(ctx context.Context, log *zap.Logger, nc *nats.Conn, o *processOptions, dataDir string, replicas int, createKey bool) (*stage1Deps, error) {
	key, err := phoneHashKey(o.hashKey, dataDir, createKey)
	if err != nil {
		return nil, err
	}
	keyFrom := "the key given by --phone-hash-key or WAHOOK_PHONE_HASH_KEY"
	if o.hashKey == "" {
		keyFrom = "the key of " + filepath.Join(dataDir, "phone-hash-key")
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second), jetstream.WithPublishAsyncMaxPending(20000))
	if err != nil {
		return nil, err
	}
	var conn driver.Conn
	var db string
	err = untilDone(ctx, func(cctx context.Context) (err error) {
		conn, db, err = openClickHouse(cctx, o, natsLock(migrationLock(js, replicas, log)), log)
		return err
	}, func(err error, wait time.Duration) bool {
		switch {
		case errors.Is(err, errMigratingElsewhere):
			log.Info("stage 1 waits for another process to finish migrating clickhouse; webhooks are kept in RAW meanwhile", zap.Error(err))
		case o.oneShot && errors.As(err, new(*clickhouse.Exception)) && !chwriter.Unavailable(err):
			return false // the server answered: trying again answers the same
		case errors.As(err, new(natsError)):
			if !natsAway(ctx, nc, js, err) {
				// Not away: refusing for good (JetStream off, the
				// connection closed), so that the process ends naming it.
				return false
			}
			log.Warn("nats not ready: stage 1 waits for the migrations lease", zap.Error(err), zap.Duration("retry_in", wait))
		default:
			log.Warn("clickhouse not ready; webhooks are kept in RAW meanwhile", zap.Error(err), zap.Duration("retry_in", wait))
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if o.storeContent {
		log.Warn("content storage is on: the text of inbound messages is stored in ClickHouse (inbound_messages.content) and published on " +
			schema.StreamEvents)
	}
	// EVENTS and the numbers bucket, tried again while NATS is away, as
	// stage 2 does: a process started before its NATS waits for it.
	// Another error (JetStream off, a stream that cannot take the
	// configuration) ends it, as before.
	var numbers *processor.NumberMap
	err = untilDone(ctx, func(ectx context.Context) error {
		if err := processor.EnsureEventsStream(ectx, js, o.events, false); err != nil {
			return err
		}
		var err error
		numbers, err = processor.NewNumberMap(ectx, js, replicas)
		return err
	}, func(err error, wait time.Duration) bool {
		if !natsAway(ctx, nc, js, err) {
			return false
		}
		log.Warn("nats not ready: stage 1 waits to provision "+schema.StreamEvents+" and its numbers bucket", zap.Error(err), zap.Duration("retry_in", wait))
		return true
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	// The phone hash key against the database's, once NATS (its lease)
	// answers: a key of another, or one too short to record, ends the
	// process; a wait for the lease or a failed question is tried again.
	err = untilDone(ctx, func(kctx context.Context) error {
		return checkHashKey(kctx, conn, db, key, keyFrom, o.hashKeyChange, natsLock(migrationLock(js, replicas, log)), log)
	}, func(err error, wait time.Duration) bool {
		if errors.Is(err, errUsage) || errors.As(err, new(natsError)) && !natsAway(ctx, nc, js, err) {
			return false
		}
		log.Warn("stage 1 waits to check the phone hash key against the database's", zap.Error(err), zap.Duration("retry_in", wait))
		return true
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &stage1Deps{
		js:      js,
		conn:    conn,
		writer:  chwriter.New(conn, db),
		norm:    processor.NewNormalizer(schema.NewHasher(key), processor.WithContent(o.storeContent)),
		numbers: numbers,
	}, nil
}

// untilDone runs step, each try within 30 s, until it succeeds or ctx ends
// (then ctx's error). After a failure, retry gives up (false: the error is
// returned) or logs why it waits and tries again, after 1 s doubling up to
// 30 s, or 1 s again while another process migrates (everything answers:
// no backoff).
func untilDone(ctx context.Context, step func(context.Context) error, retry func(err error, wait time.Duration) bool) error {
	wait := time.Second
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := step(sctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errMigratingElsewhere) {
			wait = time.Second
		}
		if !retry(err, wait) {
			return err
		}
		if !sleepCtx(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// runStage1 sets stage 1 up and runs it until ctx ends; it reports on done.
func runStage1(ctx context.Context, log *zap.Logger, nc *nats.Conn, o *processOptions, dataDir string, replicas int, createKey bool, reg prometheus.Registerer, done chan<- error) {
	deps, err := setupStage1(ctx, log, nc, o, dataDir, replicas, createKey)
	if err != nil {
		done <- err
		return
	}
	defer deps.conn.Close()
	s1, err := processor.NewStage1(o.cfg, deps.js, deps.writer, deps.norm, deps.numbers, reg, log.Named("stage1"))
	if err != nil {
		done <- err
		return
	}
	if o.funnel.Interval > 0 {
		stopFunnel := startFunnel(ctx, log, deps.js, o, replicas, reg)
		defer stopFunnel()
	}
	log.Info("stage 1 consuming", zap.String("stream", schema.StreamRaw), zap.String("consumer", o.cfg.Consumer))
	done <- s1.Run(ctx)
}

// startFunnel runs the funnel resolver beside stage 1 until ctx ends or the
// returned function is called. It has a connection of its own, with no read
// timeout to speak of: its first pass on a large database resolves every
// message in one query. A resolver that cannot start is logged and retried:
// the funnel falls behind, and nothing else stops.
func startFunnel(ctx context.Context, log *zap.Logger, js jetstream.JetStream, o *processOptions, replicas int, reg prometheus.Registerer) func() {
	log = log.Named("funnel")
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m := funnel.NewMetrics(reg)
	go func() {
		defer close(done)
		wait := time.Second
		for ctx.Err() == nil {
			err := runFunnel(ctx, log, js, o, replicas, m)
			if ctx.Err() != nil {
				return
			}
			log.Warn("funnel resolver stopped; starting again", zap.Error(err), zap.Duration("retry_in", wait))
			sleepCtx(ctx, wait)
			wait = min(2*wait, 30*time.Second)
		}
	}()
	return func() { cancel(); <-done }
}

func runFunnel(ctx context.Context, log *zap.Logger, js jetstream.JetStream, o *processOptions, replicas int, m *funnel.Metrics) error {
	opts, db, err := parseClickHouseDSN(o.dsn)
	if err != nil {
		return err
	}
	opts.ReadTimeout = time.Hour
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	host, _ := os.Hostname()
	lease, err := funnel.NewLease(ctx, js, funnel.LeaseKey, fmt.Sprintf("%s/%d", host, os.Getpid()), o.funnel.LeaseTTL, replicas)
	if err != nil {
		return err
	}
	return funnel.New(o.funnel, conn, db, m, log).Run(ctx, lease)
}

// sleepCtx waits d, and reports false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// clickHousePinger opens a connection of its own to the ClickHouse of dsn
// for health checks (the writer's may be busy with a long insert) and
// returns a ping of it. The connection is made at the first ping.
func clickHousePinger(dsn string) (ping func(context.Context) error, closeFn func(), err error) {
	opts, _, err := parseClickHouseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	opts.MaxOpenConns, opts.MaxIdleConns = 1, 1
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("clickhouse: %w", err)
	}
	return conn.Ping, func() { conn.Close() }, nil
}

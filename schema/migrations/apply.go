package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Config tunes Apply. The zero value is not valid: start from DefaultConfig.
type Config struct {
	// Files holds the NNNN_name.sql files; default: the embedded ones.
	Files fs.FS
	// Features, when not nil, replaces the features derived from the server's
	// version, for example to keep a mixed-version cluster on the older set.
	Features *Features
	// RetentionDays is how long tables that use {{.Retention}} keep rows,
	// where the server has TTL; 0 (the default) keeps them forever.
	RetentionDays int
	// Cluster, when set, creates the database, every table (with Replicated
	// engines) and every view ON CLUSTER Cluster; see OnCluster.
	Cluster string
	// Now stamps applied_at; default time.Now.
	Now func() time.Time
	// Lock, when set, is held while Apply reads the log and applies what it
	// lacks, so that no two processes apply files at once; see Lock.
	Lock Lock
}

// Lock takes a lock shared by every process that applies migrations to the
// database, waiting until it holds it or ctx ends. It returns a context that
// ends when the lock is lost (Apply then stops before its next statement) and
// the function that releases it. A migration that drops or renames what an
// earlier one creates needs it: without it, a second process still applying
// the earlier file could create the object again after the later file has run.
type Lock func(ctx context.Context) (held context.Context, release func(), err error)

// DefaultConfig returns the configuration that applies the embedded migrations
// with the server's features and no retention limit.
func DefaultConfig() Config {
	return Config{Files: Files(), Now: time.Now}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Files == nil:
		return errors.New("migrations: files must be set")
	case c.RetentionDays < 0:
		return errors.New("migrations: retention days must not be negative")
	case c.Now == nil:
		return errors.New("migrations: now must be set")
	}
	return nil
}

// Option changes the Config of one Apply call.
type Option func(*Config)

// WithConfig replaces the whole configuration.
func WithConfig(c Config) Option { return func(dst *Config) { *dst = c } }

// WithFiles applies the migrations in fsys instead of the embedded ones.
func WithFiles(fsys fs.FS) Option { return func(c *Config) { c.Files = fsys } }

// WithFeatures renders the migrations with f instead of the features that the
// server's version allows.
func WithFeatures(f Features) Option { return func(c *Config) { c.Features = &f } }

// WithRetentionDays sets the retention of tables that use {{.Retention}}.
func WithRetentionDays(days int) Option { return func(c *Config) { c.RetentionDays = days } }

// WithLock makes Apply hold lock while it reads the log and applies.
func WithLock(lock Lock) Option { return func(c *Config) { c.Lock = lock } }

// WithCluster creates the schema ON CLUSTER cluster with replicated tables.
func WithCluster(cluster string) Option { return func(c *Config) { c.Cluster = cluster } }

// Result tells what one Apply call found and did.
type Result struct {
	ServerVersion Version
	Features      Features
	Applied       []string // migrations applied by this call, in order
	Skipped       []string // migrations recorded as applied before
	Unknown       []string // recorded migrations without a file here (applied by a newer build)
}

// Apply brings database on the server behind conn up to date: it creates the
// database and the schema_migrations table if absent, refuses to go on if an
// applied migration was edited (ErrChecksumChanged), then applies each pending
// migration in version order and records it. It can be run again at any
// time, and by several processes at once.
func Apply(ctx context.Context, conn driver.Conn, database string, opts ...Option) (*Result, error) {
	cfg := DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !identifier.MatchString(database) {
		return nil, fmt.Errorf("migrations: database %q: %w", database, ErrBadDatabase)
	}
	all, err := Load(cfg.Files)
	if err != nil {
		return nil, err
	}

	var raw string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&raw); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	version, err := ParseVersion(raw)
	if err != nil {
		return nil, err
	}
	res := &Result{ServerVersion: version, Features: FeaturesFor(version)}
	if cfg.Features != nil {
		res.Features = *cfg.Features
	}
	data := Data{Database: database, Features: res.Features, RetentionDays: cfg.RetentionDays, Cluster: cfg.Cluster}

	// Render everything first: a template error stops before any change.
	stmts := make([][]string, len(all))
	for i, m := range all {
		if stmts[i], err = m.Statements(data); err != nil {
			return nil, err
		}
	}

	createDB, createLog := "CREATE DATABASE IF NOT EXISTS "+database, createLogTable(database)
	if cfg.Cluster != "" {
		if !identifier.MatchString(cfg.Cluster) {
			return nil, fmt.Errorf("migrations: cluster %q: %w", cfg.Cluster, ErrBadDatabase)
		}
		// The log is replicated too: a migration recorded through one
		// replica is seen as applied through the other.
		createDB, createLog = OnCluster(createDB, cfg.Cluster), OnCluster(createLog, cfg.Cluster)
	}
	// On a cluster, DDL ON CLUSTER waits for every replica (up to the
	// server's distributed_ddl_task_timeout, 180 s, then fails): with one
	// replica down, a run with nothing to apply failed, and so did the
	// start of every process. The database and the log are made only when
	// this replica lacks them; a pending migration still waits for all.
	haveLog := false
	if cfg.Cluster != "" {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", database, logTable).Scan(&n); err != nil {
			return nil, fmt.Errorf("migrations: look for %s.%s: %w", database, logTable, err)
		}
		haveLog = n > 0
	}
	if !haveLog {
		if err := execIdempotent(ctx, conn, createDB); err != nil {
			return nil, fmt.Errorf("create database %s: %w", database, err)
		}
		if err := execIdempotent(ctx, conn, createLog); err != nil {
			return nil, fmt.Errorf("create %s.%s: %w", database, logTable, err)
		}
	}
	if cfg.Lock != nil {
		held, release, err := cfg.Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrations: lock: %w", err)
		}
		defer release()
		ctx = held
	}
	if cfg.Cluster != "" {
		// The log this replica holds may lag what another process recorded
		// through another replica just before it gave the lock up.
		if err := conn.Exec(ctx, "SYSTEM SYNC REPLICA "+database+"."+logTable); err != nil {
			return nil, fmt.Errorf("migrations: sync %s.%s: %w", database, logTable, err)
		}
	}
	applied, err := readLog(ctx, conn, database)
	if err != nil {
		return nil, err
	}

	files := make(map[int]bool, len(all))
	for _, m := range all {
		files[m.Version] = true
		rec, ok := applied[m.Version]
		if !ok {
			continue
		}
		for _, sum := range rec.checksums {
			if sum != m.Checksum {
				return nil, fmt.Errorf("migration %s: applied with checksum %.12s, file now has %.12s: "+
					"restore the file and put the change in a new migration: %w", m.File, sum, m.Checksum, ErrChecksumChanged)
			}
		}
	}
	for v, rec := range applied {
		if !files[v] {
			res.Unknown = append(res.Unknown, rec.name)
		}
	}

	for i, m := range all {
		if _, ok := applied[m.Version]; ok {
			res.Skipped = append(res.Skipped, m.Name)
			continue
		}
		for _, stmt := range stmts[i] {
			if err := execIdempotent(ctx, conn, stmt); err != nil {
				return res, fmt.Errorf("migration %s: %w", m.File, err)
			}
		}
		if err := record(ctx, conn, database, m, cfg.Now(), version); err != nil {
			return res, fmt.Errorf("migration %s: %w", m.File, err)
		}
		res.Applied = append(res.Applied, m.Name)
	}
	return res, nil
}

// execIdempotent runs one statement; an answer that its object exists already
// counts as success, since the statement may race with another Apply or run
// again after a crash (for a rename: its target exists). A file that relies on
// a rename checks its outcome in a later statement.
func execIdempotent(ctx context.Context, conn driver.Conn, stmt string) error {
	if err := conn.Exec(ctx, stmt); err != nil && !alreadyDone(err) {
		return err
	}
	return nil
}

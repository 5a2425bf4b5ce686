package chwriter

import (
	"errors"
	"fmt"
	"regexp"
)

// Config tunes a Writer. Start from DefaultConfig.
type Config struct {
	// BlockRows is the most rows of one table that are sent in one block. A
	// table with more rows in one Write is sent in several blocks of the same
	// INSERT; the driver reuses its buffers from block to block, so they stay
	// bounded however large the batch. The server squashes the blocks of one
	// INSERT into parts of up to min_insert_block_size_rows (about a
	// million), so small blocks cost no extra parts. For 50,000 statuses,
	// blocks of 10,000 rows took a quarter of the memory and half the CPU of
	// one block of 100,000 (chwriter_timing_test.go).
	BlockRows int
}

// DefaultConfig returns blocks of up to 10,000 rows.
func DefaultConfig() Config {
	return Config{BlockRows: 10_000}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.BlockRows < 1 {
		return errors.New("chwriter: block rows must be positive")
	}
	return nil
}

// Option changes the Config of New.
type Option func(*Config)

// WithConfig replaces the whole configuration.
func WithConfig(c Config) Option { return func(dst *Config) { *dst = c } }

// WithBlockRows sets Config.BlockRows.
func WithBlockRows(n int) Option { return func(c *Config) { c.BlockRows = n } }

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrBadDatabase means that the database name given to New is not a plain
// identifier.
var ErrBadDatabase = errors.New("bad database name")

func checkDatabase(database string) error {
	if !identifier.MatchString(database) {
		return fmt.Errorf("chwriter: database %q: %w", database, ErrBadDatabase)
	}
	return nil
}

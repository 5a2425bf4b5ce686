package stage2

import (
	"errors"
	"time"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// Config configures stage 2.
type Config struct {
	// Tiers are the throughput tiers and per-number overrides.
	Tiers pacing.Tiers
	// Coalesce is the least time between two writes of one number's signal:
	// the first change after a quiet spell is written at once, later ones
	// at most once per Coalesce.
	Coalesce time.Duration
	// Refresh is how often a number's signal is written again while its
	// rates change without events: during the minute after its last
	// traffic (so the observed rates decay to 0 in the KV), and while an
	// error, maintenance window or stop still shapes its advice.
	Refresh time.Duration
	// Durable is the durable consumer's name on WAHOOK_EVENTS. Instances
	// that own different numbers use different names.
	Durable string
	// FilterSubjects are the EVENTS subjects this instance consumes: every
	// number by default; a partition of the numbers once several instances
	// share the work.
	FilterSubjects []string
	// MaxAckPending bounds the events fetched and not yet acked.
	MaxAckPending int
	// AckWait is how long JetStream waits for an ack before redelivering.
	AckWait time.Duration
	// Replicas are the replicas of the KV buckets when stage 2 creates them
	// (1 on one machine, 3 on a cluster).
	Replicas int
	// Now is the clock of the signals (updated_at, the end of the windows,
	// the expiry of cool-downs); time.Now unless a test sets it. Timers
	// (coalescing, refreshes) use the real clock.
	Now func() time.Time
}

// DefaultConfig returns the one-machine defaults.
func DefaultConfig() Config {
	return Config{
		Tiers:          pacing.DefaultTiers(),
		Coalesce:       100 * time.Millisecond,
		Refresh:        time.Second,
		Durable:        "wahook_stage2",
		FilterSubjects: []string{schema.SubjectEventsAll},
		MaxAckPending:  10_000,
		AckWait:        30 * time.Second,
		Replicas:       1,
		Now:            time.Now,
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.Durable == "":
		return errors.New("durable consumer name must not be empty")
	case len(c.FilterSubjects) == 0:
		return errors.New("filter subjects must not be empty")
	case c.Coalesce <= 0:
		return errors.New("coalesce interval must be positive")
	case c.Refresh < c.Coalesce:
		return errors.New("refresh interval must not be shorter than the coalesce interval")
	case c.MaxAckPending < 1:
		return errors.New("max ack pending must be positive")
	case c.AckWait < time.Second:
		return errors.New("ack wait must be at least 1s")
	case c.Replicas < 1:
		return errors.New("replicas must be positive")
	case c.Tiers.Default < 1 || c.Tiers.Upgraded < 1 || c.Tiers.Coexistence < 1:
		return errors.New("tiers must be positive")
	}
	return nil
}

package processor

import (
	"errors"
	"fmt"
	"time"
)

// Config configures stage 1.
type Config struct {
	// Consumer is the durable consumer's name on WAHOOK_RAW; instances with
	// the same name share the work.
	Consumer string
	// BatchRows, BatchBytes and FlushInterval bound a batch: it is written
	// when any is reached. ClickHouse wants few large inserts (at least 10k
	// rows or 1 s each), so the defaults are large.
	BatchRows     int
	BatchBytes    int
	FlushInterval time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering; a
	// batch is flushed well inside it.
	AckWait time.Duration
	// MaxAckPending bounds the RAW messages fetched and not yet acked.
	MaxAckPending int
	// PublishEvents publishes every event on the EVENTS stream.
	PublishEvents bool
	// BackoffMin and BackoffMax bound the delay of a nak after a failed
	// write; it doubles on each failure in a row.
	BackoffMin, BackoffMax time.Duration
	// MaxDeliver is how many times a body fails on its own while
	// ClickHouse and NATS answer before it becomes a dead letter. Failures
	// during an outage never count toward it, nor do the deliveries they
	// cost (stage 1 counts the failures itself; a restart begins the
	// count again): JetStream's own MaxDeliver stays unlimited, since it
	// cannot tell an outage from a bad body and would drop bodies that
	// only waited one out.
	MaxDeliver int
	// StallAfter is how long stage 1 waits for a message while its
	// consumer holds messages and no pull request waits for them (two
	// backlog polls in a row saw it, not paused) before it reads the
	// consumer again. A pull request lost with a consumer's leader is
	// never answered; the reader (internal/pullreader) pulls again once it
	// misses two of the server's heartbeats on it (4 s), and this rule
	// is the second line.
	StallAfter time.Duration
}

// DefaultConfig returns the defaults documented in docs/operations.md.
func DefaultConfig() Config {
	return Config{
		Consumer:      "wahook_stage1",
		BatchRows:     50_000,
		BatchBytes:    64 << 20,
		FlushInterval: 500 * time.Millisecond,
		AckWait:       60 * time.Second,
		MaxAckPending: 100_000,
		PublishEvents: true,
		BackoffMin:    250 * time.Millisecond,
		BackoffMax:    30 * time.Second,
		MaxDeliver:    5,
		StallAfter:    30 * time.Second,
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.Consumer == "":
		return errors.New("consumer name must not be empty")
	case c.BatchRows < 1 || c.BatchBytes < 1:
		return errors.New("batch rows and bytes must be positive")
	case c.FlushInterval <= 0:
		return errors.New("flush interval must be positive")
	case c.AckWait < 4*c.FlushInterval:
		return fmt.Errorf("ack wait %s must be at least four flush intervals (%s)", c.AckWait, 4*c.FlushInterval)
	case c.MaxAckPending < 1:
		return errors.New("max ack pending must be positive")
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return errors.New("backoff must be positive, min not above max")
	case c.MaxDeliver < 1:
		return errors.New("max deliver must be at least 1")
	case c.StallAfter < time.Second:
		return fmt.Errorf("stall after %s: use at least 1s", c.StallAfter)
	}
	return nil
}

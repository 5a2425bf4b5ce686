package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/wahook/wahook/schema"
)

// Config configures the webhook endpoint.
type Config struct {
	// Listen is the address of the webhook, health and metrics routes.
	Listen string
	// VerifyToken is the token Meta's verification handshake must present.
	// Empty refuses every handshake.
	VerifyToken string
	// Apps maps an app name to its accepted app secrets. schema.DefaultApp is
	// served at /webhook, any other name at /webhook/<name>. Two secrets for
	// one app are both accepted, for rotation.
	Apps map[string][][]byte
	// BodyLimit is the largest body accepted; larger ones get 413. Meta sends
	// up to 3 MB (docs/meta-webhooks.md 1.3).
	BodyLimit int
	// BodyMemory bounds the bytes of the bodies longer than 8 KiB being
	// read at once (a body of unknown length counts as BodyLimit): one
	// that finds no room within AckTimeout gets 503 unread. Status
	// webhooks, of a few KB, are read with their headers and never wait.
	BodyMemory int64
	// AckTimeout is how long a request waits for JetStream's ack before it is
	// answered 503, which Meta retries.
	AckTimeout time.Duration
	// MaxInflight bounds the publishes awaiting an ack. A request that finds
	// the window full waits for a slot within AckTimeout.
	MaxInflight int
	// QueueWait is the longest a request waits for an in-flight slot; past
	// it, or when the acks of the moment would come after its deadline, it
	// is answered 503 with nothing published (0: wait until AckTimeout).
	QueueWait time.Duration
	// NoMetrics leaves /metrics off the webhook listener, for a process
	// that serves it on an address of its own (--metrics-listen): the
	// webhook port faces the internet, and its metrics tell anyone about
	// the process.
	NoMetrics bool
	// ShutdownDelay is how long /readyz fails before the listener closes, so
	// that a load balancer stops sending first.
	ShutdownDelay time.Duration
	// Publisher is how NewPublisher sends bodies to JetStream: PublisherBatch
	// (fast-ingest batches, one ack for several bodies) or PublisherAsync
	// (a PubAck per body).
	Publisher string
	// Batch tunes the batch publisher.
	Batch BatchOptions
	// DedupeWindow is how long the endpoint remembers the id of a body the
	// RAW stream acknowledged, so that the same body posted again within
	// it (a Meta retry) is answered 200 at once, without a publish, and
	// stored once. An id is remembered at least the window and at most a
	// quarter longer. 0 turns the index off; the stream's duplicate window
	// (StreamConfig.DuplicateWindow) then alone decides what is stored
	// once.
	DedupeWindow time.Duration
	// DedupeMaxEntries caps the ids remembered, at 16 bytes each plus the
	// tables' free slots (about 27 bytes an id in all). Beyond it the
	// oldest ids are forgotten early (counted and logged): retries of those
	// bodies are stored again, as they are after the window, and the
	// processor's deduplication by event id absorbs them.
	DedupeMaxEntries int
}

// The publishers NewPublisher builds.
const (
	PublisherBatch = "batch"
	PublisherAsync = "async"
)

// DefaultConfig returns the defaults documented in docs/operations.md.
func DefaultConfig() Config {
	return Config{
		Listen:      ":8080",
		BodyLimit:   4 << 20,
		BodyMemory:  256 << 20,
		AckTimeout:  2 * time.Second,
		MaxInflight: 8192,
		QueueWait:   100 * time.Millisecond,
		Publisher:   PublisherBatch,
		Batch:       DefaultBatchOptions(),
		// The product's documented duplicate window. Meta retries at once,
		// then with decreasing frequency (docs/meta-webhooks.md 1.4), so the retries
		// that come soonest, and most, fall within it.
		DedupeWindow: 2 * time.Minute,
		// A full 2-minute window (and a quarter, see dupIndex) at 26k
		// bodies/s; about 110 MiB of tables at 4 million ids.
		DedupeMaxEntries: 4_000_000,
	}
}

// Validate reports the first problem of c in plain words.
func (c Config) Validate() error {
	if c.Listen == "" {
		return errors.New("listen address must not be empty")
	}
	if len(c.Apps) == 0 {
		return errors.New("at least one app secret is required (--app-secret)")
	}
	for name, secrets := range c.Apps {
		if !schema.ValidAppName(name) {
			return fmt.Errorf("app name %q: use 1 to 64 letters, digits, '-' or '_'", name)
		}
		if len(secrets) == 0 {
			return fmt.Errorf("app %q has no secret", name)
		}
		for _, s := range secrets {
			if len(s) == 0 {
				return fmt.Errorf("app %q has an empty secret", name)
			}
		}
	}
	if c.BodyLimit < 1024 {
		return fmt.Errorf("body limit %d is too small: Meta sends up to 3 MB", c.BodyLimit)
	}
	if c.BodyMemory < int64(c.BodyLimit) {
		return fmt.Errorf("body memory %d must be at least the body limit (%d)", c.BodyMemory, c.BodyLimit)
	}
	if c.AckTimeout <= 0 {
		return errors.New("ack timeout must be positive")
	}
	if c.AckTimeout >= 30*time.Second {
		return fmt.Errorf("ack timeout %s is too long: Meta expects an answer within seconds", c.AckTimeout)
	}
	if c.QueueWait < 0 || c.QueueWait > c.AckTimeout {
		return fmt.Errorf("queue wait %s must be between 0 and the ack timeout (%s)", c.QueueWait, c.AckTimeout)
	}
	if c.MaxInflight < 1 {
		return errors.New("max in-flight publishes must be at least 1")
	}
	if c.ShutdownDelay < 0 {
		return errors.New("shutdown delay must not be negative")
	}
	if c.DedupeWindow != 0 {
		if c.DedupeWindow < time.Second || c.DedupeWindow > 24*time.Hour {
			return fmt.Errorf("dedupe window %s: use 0 (off) or 1s to 24h", c.DedupeWindow)
		}
		if c.DedupeMaxEntries < 10_000 {
			return fmt.Errorf("dedupe max entries %d: use at least 10000", c.DedupeMaxEntries)
		}
	}
	switch c.Publisher {
	case PublisherBatch:
		if err := c.Batch.Validate(); err != nil {
			return err
		}
	case PublisherAsync:
	default:
		return fmt.Errorf("publisher %q: use %s or %s", c.Publisher, PublisherBatch, PublisherAsync)
	}
	return nil
}

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
	// up to 3 MB (WEBHOOKS.md 1.3).
	BodyLimit int
	// AckTimeout is how long a request waits for JetStream's ack before it is
	// answered 503, which Meta retries.
	AckTimeout time.Duration
	// MaxInflight bounds the publishes awaiting an ack. A request that finds
	// the window full waits for a slot within AckTimeout.
	MaxInflight int
	// ShutdownDelay is how long /readyz fails before the listener closes, so
	// that a load balancer stops sending first.
	ShutdownDelay time.Duration
	// Publisher is how NewPublisher sends bodies to JetStream: PublisherBatch
	// (fast-ingest batches, one ack for several bodies) or PublisherAsync
	// (a PubAck per body).
	Publisher string
	// Batch tunes the batch publisher.
	Batch BatchOptions
}

// The publishers NewPublisher builds.
const (
	PublisherBatch = "batch"
	PublisherAsync = "async"
)

// DefaultConfig returns the defaults documented in the README.
func DefaultConfig() Config {
	return Config{
		Listen:      ":8080",
		BodyLimit:   4 << 20,
		AckTimeout:  2 * time.Second,
		MaxInflight: 8192,
		Publisher:   PublisherBatch,
		Batch:       DefaultBatchOptions(),
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
	if c.AckTimeout <= 0 {
		return errors.New("ack timeout must be positive")
	}
	if c.AckTimeout >= 30*time.Second {
		return fmt.Errorf("ack timeout %s is too long: Meta expects an answer within seconds", c.AckTimeout)
	}
	if c.MaxInflight < 1 {
		return errors.New("max in-flight publishes must be at least 1")
	}
	if c.ShutdownDelay < 0 {
		return errors.New("shutdown delay must not be negative")
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

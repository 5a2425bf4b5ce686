package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// StreamConfig sizes the RAW stream.
type StreamConfig struct {
	// Replicas is 1 on one machine and 3 on a cluster (DESIGN.md, "Bus").
	Replicas int
	// MaxAge is how long bodies are kept; 7 days covers Meta's retries.
	MaxAge time.Duration
	// MaxBytes caps the stream's size; -1 is unlimited.
	MaxBytes int64
	// DuplicateWindow is how long a body's id is remembered, so that a Meta
	// retry of the same body within it is stored once. Each remembered id
	// costs server memory, so it is kept short; stage 1 deduplicates events
	// by their own ids beyond it.
	DuplicateWindow time.Duration
	// AllowBatch switches on JetStream's fast-ingest batches (allow_batched,
	// nats-server 2.14+), which BatchPublisher needs.
	AllowBatch bool
}

// DefaultStreamConfig returns the one-machine defaults.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{Replicas: 1, MaxAge: 7 * 24 * time.Hour, MaxBytes: -1, DuplicateWindow: 2 * time.Minute, AllowBatch: true}
}

// Validate reports the first problem of c.
func (c StreamConfig) Validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("raw stream replicas %d: use 1 to 5", c.Replicas)
	case c.MaxAge < time.Hour:
		return fmt.Errorf("raw stream max age %s: keep at least an hour (Meta retries for 7 days)", c.MaxAge)
	case c.DuplicateWindow <= 0 || c.DuplicateWindow > c.MaxAge:
		return fmt.Errorf("raw stream duplicate window %s: must be positive and within the max age", c.DuplicateWindow)
	}
	return nil
}

// RawStreamConfig returns the JetStream configuration of the RAW stream.
func (c StreamConfig) RawStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        schema.StreamRaw,
		Description: "wahook: raw Meta webhook bodies as received",
		Subjects:    []string{schema.SubjectRawAll},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.MaxAge,
		MaxBytes:    c.MaxBytes,
		MaxMsgs:     -1,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		// Fast batches change nothing of what is stored; they only let a
		// publisher have many messages covered by one ack.
		AllowBatchPublish: c.AllowBatch,
	}
}

// EnsureRawStream creates the RAW stream when it is absent. An existing
// stream is changed to c only with update (wahook migrate): a service
// started with default flags must not turn an R3 stream into R1 or shorten
// its retention. Without update, it only switches on fast batches when c
// asks for them and the stream lacks them, which changes nothing stored; if
// that fails, the stream info it returns says batches are off.
func EnsureRawStream(ctx context.Context, js jetstream.JetStream, c StreamConfig, update bool) (*jetstream.StreamInfo, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cfg := c.RawStreamConfig()
	if !update {
		s, err := js.Stream(ctx, cfg.Name)
		if err == nil {
			info := s.CachedInfo()
			if c.AllowBatch && !info.Config.AllowBatchPublish {
				// Best effort: without the right to update the stream, or
				// on a server before 2.14, the stream stays as it is and
				// the caller sees batches off.
				existing := info.Config
				existing.AllowBatchPublish = true
				if s, err := js.UpdateStream(ctx, existing); err == nil {
					info = s.CachedInfo()
				}
			}
			return info, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("provision stream %s: JetStream did not answer: %w", cfg.Name, err)
		}
		return nil, fmt.Errorf("provision stream %s: %w", cfg.Name, err)
	}
	return s.CachedInfo(), nil
}

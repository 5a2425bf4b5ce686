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
	// Replicas is 1 on one machine and 3 on a cluster (docs/architecture.md, "Bus").
	Replicas int
	// MaxAge is how long bodies are kept; 7 days covers Meta's retries.
	MaxAge time.Duration
	// MaxBytes caps the stream's size; -1 is unlimited.
	MaxBytes int64
	// DuplicateWindow is how long the stream remembers a body's id
	// (Nats-Msg-Id), so that the same body published again within it is
	// stored once: a message the batch publisher sends again after a lost
	// ack or a refused batch, which it does only before its request's
	// deadline (see CheckAckTimeout), and copies of one body that several
	// requests (or several ingest instances) publish at about the same
	// time. Meta's retries, which come seconds to minutes apart, are
	// caught by ingest's own duplicate index first (Config.DedupeWindow).
	//
	// Each id the stream remembers costs nats-server about 230 to 350
	// bytes of heap at its peak (a map entry, an entry struct, the id
	// string, and a list it compacts only at three times the live ids),
	// all of which its garbage collector marks every cycle; embedded in
	// serve, that heap and those marks are ingest's, and the marks are
	// most of its p99. With scripts/bench.sh on 2 shared cores (20 to 28k
	// bodies/s at saturation), a window of 2 minutes meant 419 to 502 MiB
	// resident after 40 s of saturation and 40 s at half rate, and
	// growing, and a p99 at half rate of 19 to 31 ms in 8 s rounds; 10 s:
	// 207 MiB, 17 to 23 ms; 2 s: 88 MiB, 7 to 15 ms. So it is kept short
	// (DefaultDuplicateWindow).
	DuplicateWindow time.Duration
	// AllowBatch switches on JetStream's fast-ingest batches (allow_batched,
	// nats-server 2.14+), which BatchPublisher needs.
	AllowBatch bool
}

// DefaultDuplicateWindow is the RAW stream's default duplicate window: the
// default AckTimeout, the shortest that CheckAckTimeout accepts for it. In
// the same bench rounds (8 s, 2 cores), a window of 5 s instead meant a p99
// at half rate of 12 ms instead of 8 to 10, and 28 MiB more resident.
const DefaultDuplicateWindow = 2 * time.Second

// DefaultStreamConfig returns the one-machine defaults.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{Replicas: 1, MaxAge: 7 * 24 * time.Hour, MaxBytes: -1, DuplicateWindow: DefaultDuplicateWindow, AllowBatch: true}
}

// minDuplicateWindow is nats-server's shortest duplicate window.
const minDuplicateWindow = 100 * time.Millisecond

// Validate reports the first problem of c.
func (c StreamConfig) Validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("raw stream replicas %d: use 1 to 5", c.Replicas)
	case c.MaxAge < time.Hour:
		return fmt.Errorf("raw stream max age %s: keep at least an hour (Meta retries for 7 days)", c.MaxAge)
	case c.DuplicateWindow < minDuplicateWindow || c.DuplicateWindow > c.MaxAge:
		return fmt.Errorf("raw stream duplicate window %s: use at least %s and at most the max age", c.DuplicateWindow, minDuplicateWindow)
	}
	return nil
}

// CheckAckTimeout reports whether the duplicate window covers the messages
// an endpoint with that ack timeout publishes again. The batch publisher
// sends a message again after a lost ack or a batch the stream forgot, when
// it cannot know whether the first copy was stored, and only before the
// request's deadline: the first copy was stored less than ackTimeout
// before, and a window at least that long stores the message once.
func (c StreamConfig) CheckAckTimeout(ackTimeout time.Duration) error {
	return checkWindow(c.DuplicateWindow, ackTimeout)
}

// CheckRawStream reports whether an existing RAW stream, whose window the
// service does not change (only wahook migrate does), covers the messages
// an endpoint with that ack timeout publishes again (see CheckAckTimeout).
func CheckRawStream(info *jetstream.StreamInfo, ackTimeout time.Duration) error {
	if info == nil {
		return nil
	}
	return checkWindow(info.Config.Duplicates, ackTimeout)
}

func checkWindow(window, ackTimeout time.Duration) error {
	if window < ackTimeout {
		return fmt.Errorf("raw stream duplicate window %s is shorter than the ack timeout %s: a body published again after a lost ack could be stored twice; "+
			"raise --raw-duplicate-window to at least the ack timeout", window, ackTimeout)
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

package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// EventsConfig sizes the EVENTS stream.
type EventsConfig struct {
	Replicas int
	// MaxAge is short: EVENTS can always be rebuilt from RAW.
	MaxAge time.Duration
	// DuplicateWindow: an event republished within it (a redelivered batch)
	// is stored once. Each remembered id costs server memory.
	DuplicateWindow time.Duration
}

// DefaultEventsConfig returns the one-machine defaults.
func DefaultEventsConfig() EventsConfig {
	return EventsConfig{Replicas: 1, MaxAge: 24 * time.Hour, DuplicateWindow: 30 * time.Second}
}

// EnsureEventsStream creates the EVENTS stream when it is absent; an
// existing one is changed to c only with update (wahook migrate).
func EnsureEventsStream(ctx context.Context, js jetstream.JetStream, c EventsConfig, update bool) error {
	if !update {
		_, err := js.Stream(ctx, schema.StreamEvents)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("provision stream %s: %w", schema.StreamEvents, err)
		}
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        schema.StreamEvents,
		Description: "wahook: normalized events, one subject per number and kind",
		Subjects:    []string{schema.SubjectEventsAll},
		Storage:     jetstream.FileStorage,
		MaxAge:      c.MaxAge,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
	})
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", schema.StreamEvents, err)
	}
	return nil
}

// Event is the JSON of a message on an EVENTS subject (schema/README.md):
// the kind and one row.
type Event struct {
	Kind schema.Kind `json:"kind"`
	V    int         `json:"v"`
	Row  any         `json:"row"`
}

// PublishEvents publishes every event of rows on its per-number subject with
// Nats-Msg-Id = its event id, and returns once all are acknowledged. Stage1
// and Replay keep one publisher for all their batches; this makes one for a
// single call.
func PublishEvents(ctx context.Context, js jetstream.JetStream, rows *schema.Rows) error {
	p := newEventPublisher(js.Conn(), eventsWindow)
	defer p.close()
	return p.publish(ctx, rows)
}

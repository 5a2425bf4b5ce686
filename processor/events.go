package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
// Nats-Msg-Id = its event id, and returns once all are acknowledged.
func PublishEvents(ctx context.Context, js jetstream.JetStream, rows *schema.Rows) error {
	pafs := make([]jetstream.PubAckFuture, 0, eventsChunk)
	pub := func(number string, k schema.Kind, id string, row any) error {
		data, err := json.Marshal(Event{Kind: k, V: 1, Row: row})
		if err != nil {
			return fmt.Errorf("encode %s event: %w", k, err)
		}
		msg := &nats.Msg{Subject: schema.EventsSubject(number, k), Data: data, Header: nats.Header{schema.HeaderMsgID: []string{id}}}
		paf, err := js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publish %s: %w", msg.Subject, err)
		}
		pafs = append(pafs, paf)
		if len(pafs) == eventsChunk {
			if err := waitAcks(ctx, pafs); err != nil {
				return err
			}
			pafs = pafs[:0]
		}
		return nil
	}
	for i := range rows.Statuses {
		r := &rows.Statuses[i]
		if err := pub(r.PhoneNumberID, schema.KindStatus, r.EventID, r); err != nil {
			return err
		}
	}
	for i := range rows.Inbound {
		r := &rows.Inbound[i]
		if err := pub(r.PhoneNumberID, schema.KindInbound, r.EventID, r); err != nil {
			return err
		}
	}
	for i := range rows.Management {
		r := &rows.Management[i]
		if err := pub(r.PhoneNumberID, r.Kind, r.EventID, r); err != nil {
			return err
		}
	}
	return waitAcks(ctx, pafs)
}

// eventsChunk bounds the publishes awaiting acks: a 50k-row batch must not
// overrun the async publish window and fail on a stall.
const eventsChunk = 4096

func waitAcks(ctx context.Context, pafs []jetstream.PubAckFuture) error {
	for _, paf := range pafs {
		select {
		case <-paf.Ok():
		case err := <-paf.Err():
			return fmt.Errorf("publish %s: %w", paf.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

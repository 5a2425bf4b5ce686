package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// Publisher stores a raw body durably. Publish blocks until the body is
// stored (nil; duplicate tells whether it was already), or the store failed
// or did not answer before deadline (an error). id is the body's
// Nats-Msg-Id, schema.RawMsgID(body), which the caller has at hand. The body
// must not be changed or reused by the caller after Publish is called: an
// unanswered publish may still hold it.
type Publisher interface {
	Publish(app, id string, body []byte, receivedAt, deadline time.Time) (duplicate bool, err error)
}

// BodyLender is a Publisher that keeps no reference to a body once Publish
// has returned, so that the caller may reuse the body's buffer right after.
type BodyLender interface {
	Publisher
	// LendsBody is a marker; it does nothing.
	LendsBody()
}

// RawPublisher is a Publisher to the RAW stream with its lifecycle: Drain
// waits until every publish awaiting an ack is answered or ctx ends; Close
// then stops it.
type RawPublisher interface {
	Publisher
	Drain(ctx context.Context) error
	Close()
}

// NewPublisher returns the publisher cfg.Publisher names on nc, with
// cfg.MaxInflight publishes awaiting an ack at most, each given up after
// cfg.AckTimeout. The batch publisher needs a RAW stream that allows
// batches (StreamConfig.AllowBatch).
func NewPublisher(nc *nats.Conn, cfg Config) (RawPublisher, error) {
	switch cfg.Publisher {
	case PublisherBatch:
		p, err := NewBatchPublisher(nc, cfg.MaxInflight, cfg.AckTimeout, cfg.Batch)
		if p != nil {
			p.adm.shedPast(cfg.QueueWait)
		}
		return p, err
	case PublisherAsync:
		p, err := NewJetStreamPublisher(nc, cfg.MaxInflight, cfg.AckTimeout)
		if p != nil {
			p.adm.shedPast(cfg.QueueWait)
		}
		return p, err
	}
	return nil, fmt.Errorf("publisher %q: use %s or %s", cfg.Publisher, PublisherBatch, PublisherAsync)
}

// JetStreamPublisher publishes to the RAW stream asynchronously, so that
// concurrent requests share broker round trips, with a bounded window of
// publishes awaiting their ack.
type JetStreamPublisher struct {
	js         jetstream.JetStream
	ackTimeout time.Duration
	adm        admission
}

// NATSWriteTimeout bounds each write to the NATS connection (nats.go's
// FlusherTimeout, a minute by default). A write blocks once the link stops
// delivering without closing (a network that drops everything, a server
// that stopped reading) and the sockets' buffers are full; it holds the
// connection's lock, so every publish waits, and the batch publisher's
// lock with them, so no request is answered at its deadline. Past it the
// write fails and the connection is made again: the requests waiting get
// their 503 (Meta retries). A body of 4 MiB needs under 1 MB/s to be
// written within it.
const NATSWriteTimeout = 5 * time.Second

// NATSOptions are the connection options ingest needs: reconnect forever,
// no buffering while disconnected, so that a publish during an outage fails
// at once (503, Meta retries) instead of waiting in a buffer, and writes
// bounded by NATSWriteTimeout.
func NATSOptions(name string) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.FlusherTimeout(NATSWriteTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(true),
	}
}

// NewJetStreamPublisher returns a publisher on nc with at most maxInflight
// publishes awaiting an ack; a pending ack is given up after ackTimeout.
func NewJetStreamPublisher(nc *nats.Conn, maxInflight int, ackTimeout time.Duration) (*JetStreamPublisher, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxInflight),
		jetstream.WithPublishAsyncTimeout(ackTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &JetStreamPublisher{js: js, ackTimeout: ackTimeout}, nil
}

// JetStream returns the JetStream context the publisher uses.
func (p *JetStreamPublisher) JetStream() jetstream.JetStream { return p.js }

// Publish implements Publisher. The message carries Nats-Msg-Id = id, the
// body's hash, so the same body published again within the stream's
// duplicate window is stored once, and headers for the receive time and the
// app.
func (p *JetStreamPublisher) Publish(app, id string, body []byte, receivedAt, deadline time.Time) (bool, error) {
	wait := time.Until(deadline)
	if wait <= 0 {
		return false, ErrAckTimeout
	}
	msg := &nats.Msg{
		Subject: schema.RawSubject(app),
		Data:    body,
		Header: nats.Header{
			schema.HeaderMsgID:      []string{id},
			schema.HeaderReceivedAt: []string{schema.FormatReceivedAt(receivedAt)},
			schema.HeaderApp:        []string{app},
		},
	}
	if p.adm.late(deadline) {
		return false, fmt.Errorf("publish %s: its ack would come after the deadline: %w", msg.Subject, ErrOverloaded)
	}
	// A full window makes the publish wait for a slot, at most the queue
	// wait (admission), else until the request's deadline.
	slotWait, shed := p.adm.slotWait(wait)
	sent := time.Now()
	paf, err := p.js.PublishMsgAsync(msg, jetstream.WithStallWait(slotWait))
	if err != nil {
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			if shed {
				return false, fmt.Errorf("publish %s: in-flight window full for %s: %w", msg.Subject, slotWait, ErrOverloaded)
			}
			return false, fmt.Errorf("publish %s: in-flight window full: %w", msg.Subject, ErrAckTimeout)
		}
		return false, fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	// The library fails the ack after its own ack timeout (the AckTimeout
	// given to NewJetStreamPublisher, armed at publish) and at once on a
	// disconnect, so a second timer is needed only when the publish waited
	// for a slot and the request's deadline now comes first by more than a
	// millisecond.
	var expired <-chan time.Time
	if time.Until(deadline) < p.ackTimeout-time.Millisecond {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case ack := <-paf.Ok():
		p.adm.observe(time.Since(sent))
		return ack.Duplicate, nil
	case err := <-paf.Err():
		if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			return false, ErrAckTimeout
		}
		return false, fmt.Errorf("publish %s: %w", msg.Subject, err)
	case <-expired:
		return false, ErrAckTimeout
	}
}

// Close implements RawPublisher; the JetStream context holds nothing to stop.
func (p *JetStreamPublisher) Close() {}

// Drain waits until every publish awaiting an ack is answered or ctx ends.
func (p *JetStreamPublisher) Drain(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain publishes: %d still pending: %w", p.js.PublishAsyncPending(), ctx.Err())
	}
}

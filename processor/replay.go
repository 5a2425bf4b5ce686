package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// ReplayResult counts what a replay fed through stage 1 again.
type ReplayResult struct {
	Bodies, Rows, DeadLetters int
	Batches                   int // written, of BatchRows rows or BatchBytes body bytes at most, about
	FirstSeq, LastSeq         uint64
}

// Replay feeds the RAW bodies received since `since`, up to the last one
// stored when it starts, through normalization, the writer and EVENTS again,
// batch by batch. Event ids are deterministic, so the analytics come out as
// if nothing had been replayed. It reads with an ordered consumer of its
// own and leaves stage 1's consumer alone. A failed write is retried with
// backoff until ctx ends.
//
// With numbers (nil: none), display numbers are resolved and learned as
// stage 1 does (resolve.go), and the events of numbers still unknown held
// again: the management table keeps the last copy of an event, and a
// replayed copy without the phone number id stage 1 had found for it
// would replace it.
func Replay(ctx context.Context, cfg Config, js jetstream.JetStream, w Writer, n BodyNormalizer, numbers *NumberMap, since time.Time, log *zap.Logger) (ReplayResult, error) {
	var res ReplayResult
	if log == nil {
		log = zap.NewNop()
	}
	stream, err := js.Stream(ctx, schema.StreamRaw)
	if err != nil {
		return res, fmt.Errorf("stream %s: %w", schema.StreamRaw, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("stream %s: %w", schema.StreamRaw, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || info.State.LastTime.Before(since) {
		return res, nil
	}
	cons, err := js.OrderedConsumer(ctx, schema.StreamRaw, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.SubjectRawAll},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return res, fmt.Errorf("replay consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return res, fmt.Errorf("replay consume: %w", err)
	}
	defer it.Stop()

	var events *eventPublisher
	if cfg.PublishEvents {
		events = newEventPublisher(js.Conn(), eventsWindow)
		defer events.close()
	}
	// resolver is stage 1's resolution of display numbers (nil: none);
	// work what the batch does about them once stored.
	var resolver *Stage1
	var work numberWork
	if numbers != nil {
		resolver = &Stage1{numbers: numbers, log: log, metrics: newMetrics(prometheus.NewRegistry())}
	}
	var rows schema.Rows
	bytes := 0 // of the bodies in rows
	// retry runs f until it succeeds, waiting a growing backoff after each
	// failure, or until ctx ends.
	retry := func(what string, f func() error) error {
		backoff := cfg.BackoffMin
		for {
			err := f()
			if err == nil {
				return nil
			}
			log.Warn(what+", retrying", zap.Error(err), zap.Duration("in", backoff))
			sleep(ctx, backoff)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			backoff = min(2*backoff, cfg.BackoffMax)
		}
	}
	flush := func() error {
		err := retry("replay batch not stored", func() error {
			err := w.Write(ctx, &rows)
			if err == nil && cfg.PublishEvents {
				err = events.publish(ctx, &rows)
			}
			if err == nil && resolver != nil {
				err = resolver.settleNumbers(ctx, &rows, &work)
			}
			return err
		})
		if err != nil {
			return err
		}
		res.Rows += rows.Len()
		res.DeadLetters += len(rows.DeadLetters)
		res.Batches++
		rows.Reset()
		work.reset()
		bytes = 0
		return nil
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// What was read is written before giving up.
				if rows.Len() > 0 {
					if err := flush(); err != nil {
						return res, err
					}
				}
				return res, fmt.Errorf("replay stalled at sequence %d of %d", res.LastSeq, last)
			}
			return res, fmt.Errorf("replay: %w", err)
		}
		src := SourceOf(msg)
		if res.FirstSeq == 0 {
			res.FirstSeq = src.RawSeq
		}
		res.LastSeq = src.RawSeq
		res.Bodies++
		m0, p0 := len(rows.Management), len(rows.Numbers)
		n.Normalize(msg.Data(), src, msg.Headers().Get(schema.HeaderMsgID), &rows)
		if resolver != nil {
			// A try that failed half way failed resolving (learning a
			// pair never fails it): the events to hold it listed are
			// listed again by the next. The held events it added for a
			// pair it learned stay, as the next does not learn it again.
			h0 := len(work.hold)
			if err := retry("replay: display numbers not resolved", func() error {
				work.hold = work.hold[:h0]
				return resolver.resolve(ctx, &rows, m0, p0, &work)
			}); err != nil {
				return res, err
			}
		}
		bytes += len(msg.Data())
		done := src.RawSeq >= last
		// Dead letters hold whole bodies (up to 4 MiB each): a batch is
		// bounded by their bytes too, as stage 1's are.
		if rows.Len() >= cfg.BatchRows || bytes >= cfg.BatchBytes || done {
			if err := flush(); err != nil {
				return res, err
			}
		}
		if done {
			return res, nil
		}
	}
}

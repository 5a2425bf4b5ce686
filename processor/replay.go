package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
func Replay(ctx context.Context, cfg Config, js jetstream.JetStream, w Writer, n BodyNormalizer, since time.Time, log *zap.Logger) (ReplayResult, error) {
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
	var rows schema.Rows
	bytes := 0 // of the bodies in rows
	flush := func() error {
		backoff := cfg.BackoffMin
		for {
			err := w.Write(ctx, &rows)
			if err == nil && cfg.PublishEvents {
				err = events.publish(ctx, &rows)
			}
			if err == nil {
				res.Rows += rows.Len()
				res.DeadLetters += len(rows.DeadLetters)
				res.Batches++
				rows.Reset()
				bytes = 0
				return nil
			}
			log.Warn("replay batch not stored, retrying", zap.Error(err), zap.Duration("in", backoff))
			sleep(ctx, backoff)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			backoff = min(2*backoff, cfg.BackoffMax)
		}
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
		n.Normalize(msg.Data(), src, msg.Headers().Get(schema.HeaderMsgID), &rows)
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

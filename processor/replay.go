package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
)

// ReplayResult counts what a replay fed through stage 1 again.
type ReplayResult struct {
	// Rows is the rows stored other than dead letters; DeadLetters counts
	// every dead letter, of a decode or of retries exhausted.
	Bodies, Rows, DeadLetters int
	// Batches is the writes that stored rows: batches of BatchRows rows or
	// BatchBytes body bytes at most, about, and the halves and dead
	// letters of a batch written again.
	Batches           int
	FirstSeq, LastSeq uint64
	// WrittenSeq is the RAW sequence of the last body of the last batch
	// stored, and WrittenAt when RAW stored it (the NATS server's clock,
	// which a replay's start time is matched against; not ingest's
	// received-at): a replay that stops (an error, a signal) has stored
	// every body read up to it, and one run again from WrittenAt goes on
	// from there (what it reads twice is stored once).
	WrittenSeq uint64
	WrittenAt  time.Time
}

// Replay feeds the RAW bodies received since `since`, up to the last one
// stored when it starts, through normalization, the writer and EVENTS again,
// batch by batch. Event ids are deterministic, so the analytics come out as
// if nothing had been replayed. It reads with an ordered consumer of its
// own and leaves stage 1's consumer alone.
//
// A write that fails while a store is down is retried with backoff until
// ctx ends. One that fails while both stores answer is written again in
// halves, as stage 1 does (isolate), and a body that fails on its own
// cfg.MaxDeliver times becomes a dead letter (retries_exhausted): one
// body the store refuses never holds back the replay of the others.
//
// NATS away, or RAW without a leader, delays the replay too: it writes
// what it read, waits, and reads on from after the last body it read. It
// gives up only when RAW is gone, or when readers opened again keep
// finding nothing while RAW answers and holds bodies after it.
//
// With numbers (nil: none), display numbers are resolved and learned as
// stage 1 does (resolve.go), and the events of numbers still unknown held
// again: the management table keeps the last copy of an event, and a
// replayed copy without the phone number id stage 1 had found for it
// would replace it.
func Replay(ctx context.Context, cfg Config, js jetstream.JetStream, w Writer, n BodyNormalizer, numbers *NumberMap, since time.Time, log *zap.Logger) (ReplayResult, error) {
	var res ReplayResult
	if err := cfg.Validate(); err != nil {
		return res, fmt.Errorf("processor config: %w", err)
	}
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
	// open reads RAW from sequence from, or from since when from is 0.
	open := func(from uint64) (jetstream.MessagesContext, jetstream.Consumer, error) {
		cc := jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{schema.SubjectRawAll},
			DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
			OptStartTime:   &since,
			// The client makes the consumer again after a reconnect or
			// missed heartbeats, without end by default, within one Next
			// and deaf to its context: a few tries, then the replay's
			// own loop below decides.
			MaxResetAttempts: replayResets,
		}
		if from > 0 {
			cc.DeliverPolicy, cc.OptStartTime, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, from
		}
		cons, err := js.OrderedConsumer(ctx, schema.StreamRaw, cc)
		if err != nil {
			return nil, nil, fmt.Errorf("replay consumer: %w", err)
		}
		// Bounded by bytes too, as stage 1's reads: 2,000 bodies of up to
		// the body limit (4 MiB) each, and a refill, were gigabytes.
		it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(replayPull, pullBytes))
		if err != nil {
			return nil, nil, fmt.Errorf("replay consume: %w", err)
		}
		return it, cons, nil
	}
	it, cons, err := open(0)
	if err != nil {
		return res, err
	}
	defer func() {
		it.Stop()
		dropConsumer(ctx, stream, cons, log)
	}()

	r := &replayer{
		ctx: ctx, res: &res,
		// The events of numbers learned meanwhile that settleNumbers
		// queues for stage 1's next batch are not applied by the replay:
		// they stay held, and stage 1's sweep applies them.
		st: &Stage1{cfg: cfg, js: js, w: w, n: n, numbers: numbers, log: log, metrics: newMetrics(prometheus.NewRegistry())},
	}
	r.strikeLog.Every = strikeLogEvery
	if cfg.PublishEvents {
		r.events = newEventPublisher(js.Conn(), eventsWindow)
		defer r.events.close()
	}
	var (
		rows   schema.Rows
		work   numberWork
		bodies []replayBody
		bytes  int // of the bodies in rows
	)
	flush := func() error {
		if err := r.store(bodies, &rows, &work, false); err != nil {
			return err
		}
		if n := len(bodies); n > 0 {
			res.WrittenSeq, res.WrittenAt = bodies[n-1].src.RawSeq, bodies[n-1].stored
		}
		rows.Reset()
		work.reset()
		clear(bodies)
		bodies, bytes = bodies[:0], 0
		return nil
	}
	var (
		// fresh is whether the reader was opened again after the last
		// body read; idle counts the fresh readers in a row that found
		// nothing while NATS and RAW answered and held bodies after it.
		fresh   bool
		idle    int
		waitLog = throttle.Throttle{Every: replayWait}
		// openFails counts the readers in a row that could not be
		// opened while NATS and RAW answered.
		openFails int
	)
	for {
		nctx, cancel := context.WithTimeout(ctx, replayWait)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			// What was read is written while the replay waits.
			if rows.Len() > 0 {
				if err := flush(); err != nil {
					return res, err
				}
			}
			// NATS away (or RAW without a leader) delays the replay: it
			// waits, and reads on from where it was once RAW answers.
			sctx, cancel := context.WithTimeout(ctx, replayWait)
			_, ierr := stream.Info(sctx)
			cancel()
			if errors.Is(ierr, jetstream.ErrStreamNotFound) {
				return res, fmt.Errorf("replay at sequence %d of %d: %w", res.LastSeq, last, ierr)
			}
			if ierr != nil || !js.Conn().IsConnected() {
				if _, due := waitLog.Note(); due {
					log.Warn("replay waiting for NATS", zap.Uint64("read_up_to", res.LastSeq), zap.Uint64("last", last),
						zap.NamedError("read_error", err), zap.NamedError("stream_error", ierr))
				}
				// A reader that met the outage found nothing for it, not
				// for want of bodies: it does not count toward giving up.
				fresh = false
				sleep(ctx, time.Second)
				continue
			}
			if fresh {
				if idle++; idle >= replayIdle {
					return res, fmt.Errorf("replay stalled at sequence %d of %d: %w", res.LastSeq, last, err)
				}
			}
			// A new reader reads on after the last body read: the old
			// one may have given up on NATS while it was away. Its
			// consumer is deleted rather than left to the server's
			// inactivity timeout.
			it.Stop()
			dropConsumer(ctx, stream, cons, log)
			from := res.LastSeq + 1
			if res.LastSeq == 0 {
				from = 0
			}
			next, nextCons, oerr := open(from)
			if oerr != nil {
				// The stopped reader ends the next read at once, and this
				// is tried again: while NATS is away, without end; while
				// NATS and RAW answer, replayOpens times.
				if openFails++; openFails > replayOpens {
					return res, fmt.Errorf("replay at sequence %d of %d: RAW not read again: %w", res.LastSeq, last, oerr)
				}
				if _, due := waitLog.Note(); due {
					log.Warn("replay: RAW not read again, retrying", zap.Uint64("read_up_to", res.LastSeq), zap.Error(oerr))
				}
				fresh = false
				sleep(ctx, time.Second)
				continue
			}
			it, cons, fresh, openFails = next, nextCons, true, 0
			// What the server said of the consumer it made (Messages
			// makes it): NumPending is the bodies from the start on.
			if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
				// Nothing after the last body read: those up to the last
				// one of the start were deleted meanwhile.
				return res, nil
			}
			log.Info("replay reading RAW again", zap.Uint64("from", from), zap.Uint64("last", last), zap.NamedError("read_error", err))
			continue
		}
		fresh, idle = false, 0
		b := replayBody{data: msg.Data(), src: SourceOf(msg), id: msg.Headers().Get(schema.HeaderMsgID)}
		if md, err := msg.Metadata(); err == nil {
			b.stored = md.Timestamp
		}
		if b.src.RawSeq > last {
			// Past the last body of the start: those before it were
			// deleted meanwhile.
			if rows.Len() > 0 {
				if err := flush(); err != nil {
					return res, err
				}
			}
			return res, nil
		}
		if res.FirstSeq == 0 {
			res.FirstSeq = b.src.RawSeq
		}
		res.LastSeq = b.src.RawSeq
		res.Bodies++
		if err := r.add(b, &rows, &work); err != nil {
			return res, err
		}
		bodies = append(bodies, b)
		bytes += len(b.data)
		done := b.src.RawSeq >= last
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

const (
	// replayPull is how many RAW bodies the replay's reader asks for at once.
	replayPull = 2000
	// replayIdle is how many readers opened in a row after the last body
	// read may find nothing within replayWait, while NATS and RAW answer
	// and hold bodies after it, before the replay gives up.
	replayIdle = 3
	// replayResets is how often the client tries to make the replay's
	// consumer again on its own.
	replayResets = 2
	// replayOpens is how many times in a row a reader may fail to open,
	// while NATS and RAW answer, before the replay gives up (a second
	// apart at least).
	replayOpens = 30
)

// dropConsumer deletes the replay's consumer of RAW, cons, once its
// reader is stopped: the server would keep it for its inactivity timeout
// (five minutes) otherwise. A consumer gone already, with the server it
// lived on, is no error.
func dropConsumer(ctx context.Context, stream jetstream.Stream, cons jetstream.Consumer, log *zap.Logger) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := stream.DeleteConsumer(dctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		log.Debug("replay: consumer not deleted; the server drops it when idle", zap.String("consumer", info.Name), zap.Error(err))
	}
}

// replayWait is how long the replay waits for its next body before it
// asks whether NATS and RAW answer (a variable for tests).
var replayWait = 10 * time.Second

// replayBody is a RAW body a replay read.
type replayBody struct {
	data   []byte
	src    schema.Source
	id     string    // its Nats-Msg-Id
	stored time.Time // when RAW stored it: the time --since is matched against
}

// replayer stores what Replay reads.
type replayer struct {
	ctx context.Context
	// st is stage 1's resolution of display numbers, and its view of
	// whether both stores answer; its cfg, writer, normalizer and log
	// are the replay's.
	st     *Stage1
	events *eventPublisher // nil: events are not published
	res    *ReplayResult
	// strikeLog throttles the warning of a body that failed on its own.
	strikeLog throttle.Throttle
}

// retry runs f until it succeeds, waiting a growing backoff after each
// failure, or until the replay's context ends.
func (r *replayer) retry(what string, f func() error) error {
	backoff := r.st.cfg.BackoffMin
	for {
		err := f()
		if err == nil {
			return nil
		}
		r.st.log.Warn(what+", retrying", zap.Error(err), zap.Duration("in", backoff))
		sleep(r.ctx, backoff)
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		backoff = min(2*backoff, r.st.cfg.BackoffMax)
	}
}

// add normalizes b into rows, resolving its display numbers when the
// replay has numbers.
func (r *replayer) add(b replayBody, rows *schema.Rows, work *numberWork) error {
	m0, p0 := len(rows.Management), len(rows.Numbers)
	r.st.n.Normalize(b.data, b.src, b.id, rows)
	if r.st.numbers == nil {
		return nil
	}
	// A try that failed half way failed resolving (learning a pair never
	// fails it): the events to hold it listed are listed again by the
	// next. The held events it added for a pair it learned stay, as the
	// next does not learn it again.
	h0 := len(work.hold)
	return r.retry("replay: display numbers not resolved", func() error {
		work.hold = work.hold[:h0]
		return r.st.resolve(r.ctx, rows, m0, p0, work)
	})
}

// try writes rows, publishes their events and settles their numbers.
func (r *replayer) try(rows *schema.Rows, work *numberWork) error {
	// A write does not outlive a hung store: as stage 1's, it has a
	// deadline of its own.
	ctx, cancel := context.WithTimeout(r.ctx, r.st.cfg.AckWait/2)
	defer cancel()
	err := r.st.w.Write(ctx, rows)
	if err == nil && r.events != nil {
		err = r.events.publish(ctx, rows)
	}
	if err == nil {
		err = r.st.settleNumbers(ctx, rows, work)
	}
	return err
}

// store stores rows, normalized from bodies. A failure while a store is
// down, or of the number buckets, is retried with backoff until the
// replay's context ends. A failure while both stores answer writes bodies
// again in halves, each normalized again, and a single body that fails so
// cfg.MaxDeliver times becomes a dead letter. A half (nested) does not
// warn again of its split.
func (r *replayer) store(bodies []replayBody, rows *schema.Rows, work *numberWork, nested bool) error {
	backoff := r.st.cfg.BackoffMin
	strikes := 0
	for {
		err := r.try(rows, work)
		if err == nil {
			r.res.Rows += rows.Len() - len(rows.DeadLetters)
			r.res.DeadLetters += len(rows.DeadLetters)
			r.res.Batches++
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if len(bodies) > 0 && !errors.Is(err, errNumbers) && !isOutage(err) && r.st.healthy(r.ctx) {
			if len(bodies) > 1 {
				if !nested {
					r.st.log.Warn("replay batch not stored while both stores answer: writing its bodies in halves",
						zap.Int("batch_bodies", len(bodies)), zap.Error(err))
				}
				half := len(bodies) / 2
				for _, group := range [][]replayBody{bodies[:half], bodies[half:]} {
					var grows schema.Rows
					var gwork numberWork
					for _, b := range group {
						if err := r.add(b, &grows, &gwork); err != nil {
							return err
						}
					}
					if err := r.store(group, &grows, &gwork, true); err != nil {
						return err
					}
				}
				return nil
			}
			// As in stage 1, a ClickHouse that cannot take writes now
			// (read-only replicas) answers pings: its refusals delay the
			// body and never make it a dead letter.
			if !chwriter.Unavailable(err) {
				strikes++
			}
			if strikes >= r.st.cfg.MaxDeliver {
				return r.deadLetter(bodies[0], strikes, err)
			}
			if count, due := r.strikeLog.Note(); due {
				r.st.log.Warn("replayed body not stored on its own, will retry", zap.Uint64("raw_seq", bodies[0].src.RawSeq),
					zap.Int("tries", strikes), zap.Int("max_deliver", r.st.cfg.MaxDeliver), zap.Duration("retry_in", backoff),
					zap.Int64("bodies_since_last_line", count), zap.Error(err))
			}
		} else {
			r.st.log.Warn("replay batch not stored, retrying", zap.Int("batch_bodies", len(bodies)), zap.Error(err), zap.Duration("in", backoff))
		}
		sleep(r.ctx, backoff)
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		backoff = min(2*backoff, r.st.cfg.BackoffMax)
	}
}

// deadLetter stores b, which failed on its own tries times with err, as a
// dead letter (retrying while the store does not take it).
func (r *replayer) deadLetter(b replayBody, tries int, err error) error {
	why := fmt.Sprintf("not stored in %d tries on its own in a replay while the stores answered: %v", tries, err)
	if err := r.retry("replay: dead letter not stored", func() error {
		ctx, cancel := context.WithTimeout(r.ctx, r.st.cfg.AckWait/2)
		defer cancel()
		return writeDeadLetter(ctx, r.st.w, b.src, b.id, b.data, why)
	}); err != nil {
		return err
	}
	r.res.DeadLetters++
	r.res.Batches++
	r.st.log.Warn("replayed body made a dead letter after failing on its own", zap.Uint64("raw_seq", b.src.RawSeq),
		zap.Int("tries", tries), zap.Error(err))
	return nil
}

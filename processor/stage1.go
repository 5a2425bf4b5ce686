package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/deadline"
	"github.com/wahook/wahook/internal/pullreader"
	"github.com/wahook/wahook/internal/pullstall"
	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
)

// Writer stores rows. Write returns nil only once every row is stored; after
// an error some rows may be stored and the caller writes the whole batch
// again later. Rows carry deterministic ids and every query deduplicates on
// them, so a row written twice counts once. Write must not keep rows after it
// returns.
type Writer interface {
	Write(ctx context.Context, rows *schema.Rows) error
}

// BodyNormalizer appends the rows of one RAW body to rows. A body, or an item of
// it, that cannot be decoded becomes a DeadLetter row with its reason: Normalize
// never fails, so one bad item never costs the others of the same POST.
type BodyNormalizer interface {
	Normalize(body []byte, src schema.Source, rawMsgID string, rows *schema.Rows)
}

// Stage1 is the RAW consumer.
type Stage1 struct {
	cfg     Config
	js      jetstream.JetStream
	w       Writer
	n       BodyNormalizer
	log     *zap.Logger
	metrics *metrics
	backoff time.Duration
	events  *eventPublisher // used by the reading goroutine only
	// solo publishes the events of bodies written one by one (isolate);
	// used by the writing goroutine only, as is lastWrite, how long the
	// last batch took to write.
	solo      *eventPublisher
	lastWrite time.Duration

	// numbers resolves display numbers and holds the events of numbers
	// not learned yet (nil: events keep what their body says). Held
	// events that the writer found learned are queued in applyQ for the
	// reader to add to its batch.
	numbers *NumberMap
	applyMu sync.Mutex
	applyQ  []HeldEvent

	// stall is what the backlog polls saw of a stalled consumer.
	stall stallWatch

	// strikes counts, by RAW sequence, how often each body failed on its
	// own while both stores answered (strike), until it is stored or made
	// a dead letter. Used by the writing goroutine only.
	strikes map[uint64]strikeCount
	// storedAt is when a write of bodies holding each kind of rows last
	// succeeded (stored). Used by the writing goroutine only.
	storedAt [rowKinds]time.Time

	// strikeLog throttles the warning of bodies that failed on their own
	// and will be tried again: while a replica's tables are read-only,
	// every body of every batch fails so, each on every delivery.
	strikeLog throttle.Throttle
	// pullErr takes the client's reports on reading the consumer.
	pullErr func(error)
}

// strikeLogEvery is how often at most stage 1 warns of bodies that failed
// on their own and will be tried again (a dead letter is always logged).
const strikeLogEvery = 10 * time.Second

// NewStage1 returns a stage 1 consumer; numbers and log may be nil.
func NewStage1(cfg Config, js jetstream.JetStream, w Writer, n BodyNormalizer, numbers *NumberMap, reg prometheus.Registerer, log *zap.Logger) (*Stage1, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("processor config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Stage1{cfg: cfg, js: js, w: w, n: n, numbers: numbers, log: log, metrics: newMetrics(reg), backoff: cfg.BackoffMin}
	s.strikeLog.Every = strikeLogEvery
	s.pullErr = pullreader.Reports(log, "raw stream consumer", s.metrics.restarts)
	if cfg.PublishEvents {
		s.events = newEventPublisher(js.Conn(), eventsWindow)
	}
	return s, nil
}

// batch is the RAW messages being gathered and their rows.
type batch struct {
	msgs  []jetstream.Msg
	rows  schema.Rows
	bytes int
	first time.Time
	// sent are the rows whose events were sent to EVENTS; eventsErr is
	// the first failure to send or store them: the batch is then nak'ed.
	sent      rowMarks
	eventsErr error
	// numbers is what the batch does about display numbers (resolve.go).
	numbers numberWork
}

func (b *batch) reset() {
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	b.rows.Reset()
	b.bytes = 0
	b.sent, b.eventsErr = rowMarks{}, nil
	b.numbers.reset()
}

// empty reports whether the batch has nothing to write: no body, and no
// held event applied.
func (b *batch) empty() bool { return len(b.msgs) == 0 && b.rows.Len() == 0 }

// ConsumerConfig is the durable consumer of stage 1 on WAHOOK_RAW.
func (s *Stage1) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "wahook stage 1: RAW bodies to ClickHouse rows and EVENTS",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	}
}

// healthTimeout bounds healthy's questions to the stores.
const healthTimeout = 5 * time.Second

// writerPoll is how often a due batch looks whether the writer is free
// while no body comes.
const writerPoll = 5 * time.Millisecond

// Run consumes until ctx ends, then writes the batch in hand once more and
// returns. It returns an error only when the consumer cannot be set up.
//
// Gathering and writing overlap: while one batch is written to ClickHouse
// and acked, the next is fetched and normalized. At most one batch is
// written at a time, so batches stay large and in order. A batch due
// (FlushInterval after its first body) while the previous one is still
// being written keeps growing until the writer is free, rather than
// stopping the reader: the reader waits for the writer only once the
// batch reaches BatchRows or BatchBytes, or a quarter of AckWait in age.
// A slow ClickHouse thus makes batches larger (which ClickHouse writes
// faster per row), not events later. Events go to EVENTS as each body is
// decoded, not with the batch, so that stage 2 sees them within
// milliseconds whatever the ClickHouse batching (and while ClickHouse is
// down); a batch is handed to the writer once
// JetStream holds its events, and its bodies are acked once ClickHouse
// holds its rows too. On stop, Run writes the batch it holds and returns;
// an error when that batch could not be stored (its bodies nak'ed).
func (s *Stage1) Run(ctx context.Context) (err error) {
	it := s.open(ctx)
	if it == nil {
		return nil
	}
	// it is nil when ctx ended while a restart of the consumer retried.
	defer func() {
		if it != nil {
			it.Stop()
		}
	}()
	polled := make(chan struct{})
	defer func() { <-polled }()
	go func() {
		defer close(polled)
		s.pollBacklog(ctx)
	}()
	if s.events != nil {
		defer s.events.close()
	}

	// The writer goroutine takes full batches and gives them back empty;
	// two batches take turns.
	full, empty := make(chan *batch), make(chan *batch, 1)
	empty <- &batch{}
	writerDone := make(chan struct{})
	// stopErr is the error of a batch not stored once ctx has ended: its
	// bodies are nak'ed, back at the next start, and the stop says so (it
	// said the last batch was written, and exited 0).
	var stopErr error
	go func() {
		defer close(writerDone)
		for b := range full {
			start := time.Now()
			if err := s.flush(ctx, b); err != nil && ctx.Err() != nil {
				stopErr = err
			}
			s.lastWrite = time.Since(start)
			empty <- b
		}
		if s.solo != nil {
			s.solo.close()
		}
	}()
	b := &batch{}
	// Sends and waits do not end with ctx: the last batch is still
	// published and written on stop, bounded by eventsAckTimeout.
	pubCtx := context.WithoutCancel(ctx)
	// handOff gives b to the writer once its events are in JetStream and
	// takes the writer's last batch back, waiting for the writer when block
	// is set; without it, it reports false (and keeps b) while the writer
	// is busy.
	handOff := func(block bool) bool {
		var next *batch
		if block {
			next = <-empty
		} else {
			select {
			case next = <-empty:
			default:
				return false
			}
		}
		if s.events != nil && b.eventsErr == nil {
			b.eventsErr = s.events.drain(pubCtx)
		}
		full <- b
		b = next
		return true
	}
	defer func() {
		if !b.empty() {
			handOff(true)
		}
		close(full)
		<-writerDone
		if stopErr != nil && err == nil {
			err = fmt.Errorf("stopped with its last batch not stored (its bodies stay in %s, read again at the next start): %w", schema.StreamRaw, stopErr)
		}
	}()
	maxAge := s.cfg.AckWait / 4
	var nextSweep time.Time // now: at start
	// idle is how long Next has waited without a message since the last
	// (at lastMsg).
	var idle time.Duration
	lastMsg := time.Now()
	// One context serves the reads until the batch is due.
	var due deadline.Deadline
	defer due.Stop()
	for ctx.Err() == nil {
		if s.numbers != nil {
			s.applyHeld(pubCtx, b, &nextSweep)
		}
		now := time.Now()
		wait := s.cfg.FlushInterval
		if !b.empty() {
			age := now.Sub(b.first)
			if wait = s.cfg.FlushInterval - age; wait <= 0 {
				if handOff(age >= maxAge) {
					continue
				}
				// The writer is busy: look again soon, reading meanwhile.
				wait = writerPoll
			}
		}
		msg, err := it.Next(due.By(ctx, now.Add(wait)))
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, context.DeadlineExceeded):
				// The loop hands the batch off when it is due.
				idle += time.Since(now)
				if n, stalled := s.stall.seen(lastMsg); idle >= s.cfg.StallAfter && stalled {
					s.metrics.restarts.Inc()
					s.log.Warn("raw stream consumer delivered nothing while it holds bodies and no pull request waits for them: reading it again",
						zap.Duration("idle", idle), zap.Uint64("bodies", n))
					idle, lastMsg = 0, time.Now()
					it.Stop()
					if it = s.open(ctx); it == nil {
						return nil
					}
				}
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				// The connection was closed, or the consumer deleted: a
				// failure of the bus never ends stage 1. The batch in hand
				// stays (its acks go over the reconnected connection, or
				// its bodies come back after AckWait).
				s.metrics.restarts.Inc()
				s.log.Warn("raw stream consumer stopped, reading again", zap.Error(err))
				it.Stop()
				sleep(ctx, s.cfg.BackoffMin)
				if it = s.open(ctx); it == nil {
					return nil
				}
				idle, lastMsg = 0, time.Now()
			default:
				s.log.Warn("fetch from raw stream", zap.Error(err))
				sleep(ctx, s.cfg.BackoffMin)
			}
			continue
		}
		idle, lastMsg = 0, now
		s.add(pubCtx, b, msg)
		if s.events != nil && b.eventsErr == nil {
			b.eventsErr = s.events.send(pubCtx, &b.rows, &b.sent)
		}
		if b.rows.Len() >= s.cfg.BatchRows || b.bytes >= s.cfg.BatchBytes {
			handOff(true)
		}
	}
	return nil
}

// backlogPoll is how often stage 1 reads its consumer's backlog.
const backlogPoll = 5 * time.Second

// pollBacklog sets the backlog gauge from the consumer's state until ctx
// ends: what the server has not delivered yet and what is unacked.
func (s *Stage1) pollBacklog(ctx context.Context) {
	t := time.NewTicker(backlogPoll)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, backlogPoll)
		if c, err := s.js.Consumer(cctx, schema.StreamRaw, s.cfg.Consumer); err == nil {
			info, err := c.Info(cctx)
			if err == nil {
				s.metrics.rawPending.Set(float64(info.NumPending + uint64(info.NumAckPending)))
			}
			s.stall.observe(info, err, time.Now())
		} else {
			s.stall.observe(nil, err, time.Now())
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stallWatch is what the backlog polls saw of a stalled consumer
// (pullstall.Held). Its methods are safe for concurrent use.
type stallWatch struct {
	mu         sync.Mutex
	polls      int       // the polls in a row that saw it
	prev, last time.Time // the latest two of them
	messages   uint64    // the messages the latest saw
}

// observe takes a poll's answer at time at; a failed poll ends a run.
func (w *stallWatch) observe(info *jetstream.ConsumerInfo, err error, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var held uint64
	if err == nil {
		held = pullstall.Held(info)
	}
	if held == 0 {
		w.polls = 0
		return
	}
	w.polls++
	w.prev, w.last, w.messages = w.last, at, held
}

// seen reports a stall seen by at least two polls in a row since the
// reader's last message (or its last new start, at lastMsg), the latest
// recent, and the messages the consumer holds.
func (w *stallWatch) seen(lastMsg time.Time) (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.messages, w.polls >= 2 && w.prev.After(lastMsg) && time.Since(w.last) <= 2*backlogPoll
}

// pullBytes bounds a pull, and the bodies stage 1's reader holds, in
// bytes: the most NATS allows in one message, so that any body fits (a
// body larger than a pull is never delivered, and the client asks again
// without end).
const pullBytes = 64 << 20

// open provisions stage 1's consumer and starts reading it, retrying with
// a growing delay until it can or ctx ends (nil): a passing NATS error
// only delays stage 1, while ingest keeps storing bodies.
func (s *Stage1) open(ctx context.Context) *pullreader.Reader {
	// Prefetch is bounded by count and by bytes (bodies reach 4 MB): a
	// pull's worth held by the reader, and up to two more on their way
	// (pullreader.Open).
	pull := min(s.cfg.MaxAckPending/2, 5000)
	for wait := s.cfg.BackoffMin; ; wait = min(2*wait, s.cfg.BackoffMax) {
		cons, err := s.js.CreateOrUpdateConsumer(ctx, schema.StreamRaw, s.ConsumerConfig())
		if err == nil {
			var it *pullreader.Reader
			if it, err = pullreader.Open(cons, pull, pullBytes, s.pullErr, jetstream.PullMaxMessagesWithBytesLimit(pull, pullBytes)); err == nil {
				return it
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("consumer on raw stream, retrying", zap.Error(err), zap.Duration("in", wait))
		sleep(ctx, wait)
	}
}

// add normalizes one RAW message into the batch, and resolves its display
// numbers; a failure to resolve them fails the batch (eventsErr), so that
// its bodies come back rather than being stored without their numbers.
func (s *Stage1) add(ctx context.Context, b *batch, msg jetstream.Msg) {
	if b.empty() {
		b.first = time.Now()
	}
	b.msgs = append(b.msgs, msg)
	b.bytes += len(msg.Data())
	src := SourceOf(msg)
	m0, p0 := len(b.rows.Management), len(b.rows.Numbers)
	s.n.Normalize(msg.Data(), src, msg.Headers().Get(schema.HeaderMsgID), &b.rows)
	if s.numbers != nil && b.eventsErr == nil {
		b.eventsErr = s.resolve(ctx, &b.rows, m0, p0, &b.numbers)
	}
}

// SourceOf reads the source of a RAW message from its headers and metadata.
func SourceOf(msg jetstream.Msg) schema.Source {
	src := schema.Source{App: msg.Headers().Get(schema.HeaderApp)}
	if src.App == "" {
		// Published straight to a RAW subject (send results from a sending
		// service): the app is the subject's last token.
		src.App = strings.TrimPrefix(msg.Subject(), schema.SubjectRawPrefix)
	}
	if t, err := schema.ParseReceivedAt(msg.Headers().Get(schema.HeaderReceivedAt)); err == nil {
		src.ReceivedAt = t
	}
	if md, err := msg.Metadata(); err == nil {
		src.RawSeq = md.Sequence.Stream
		if src.ReceivedAt.IsZero() {
			src.ReceivedAt = md.Timestamp
		}
	}
	return src
}

// flush writes the batch, whose events JetStream holds already, and acks
// its messages. When either store failed, and both answer, the batch is
// written again body by body (isolate), so that one body that cannot be
// stored never holds the others back; when a store is down, every body is
// nak'ed with a growing delay instead, so they come back, and flush waits
// that delay before it takes the next batch (which meanwhile grows to its
// limits, see Run).
func (s *Stage1) flush(runCtx context.Context, b *batch) error {
	// A stop does not cut a write short (that would waste it and leave its
	// bodies for redelivery): the write has its own deadline, well inside
	// AckWait, so a hung ClickHouse cannot hold bodies past it either.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.AckWait/2)
	defer cancel()
	start := time.Now()
	s.extend(b, start)
	err := b.eventsErr
	if err == nil {
		err = s.w.Write(ctx, &b.rows)
	}
	if err != nil {
		s.metrics.failures.Inc()
		if !errors.Is(err, errNumbers) && !isOutage(err) && s.healthy(ctx) {
			s.log.Warn("batch not stored while both stores answer: writing its bodies one by one",
				zap.Int("batch_bodies", len(b.msgs)), zap.Error(err))
			s.requeueHeld(&b.numbers)
			s.isolate(runCtx, b.msgs, err, start)
			b.reset()
			return nil
		}
		delay := s.backoff
		s.backoff = min(2*s.backoff, s.cfg.BackoffMax)
		for _, m := range b.msgs {
			_ = m.NakWithDelay(delay) // lost naks come back after AckWait
		}
		s.log.Warn("batch not stored, will retry", zap.Int("batch_bodies", len(b.msgs)), zap.Int("batch_rows", b.rows.Len()),
			zap.Duration("retry_in", delay), zap.Error(err))
		s.requeueHeld(&b.numbers)
		b.reset()
		sleep(runCtx, delay)
		return err
	}
	if err := s.settleNumbers(ctx, &b.rows, &b.numbers); err != nil {
		// The rows are stored, and stored again harmlessly when the bodies
		// come back: only the holding failed.
		s.metrics.failures.Inc()
		delay := s.backoff
		s.backoff = min(2*s.backoff, s.cfg.BackoffMax)
		for _, m := range b.msgs {
			_ = m.NakWithDelay(delay)
		}
		s.log.Warn("batch stored, its events of numbers not learned yet not held: will retry", zap.Int("batch_bodies", len(b.msgs)),
			zap.Duration("retry_in", delay), zap.Error(err))
		s.requeueHeld(&b.numbers)
		b.reset()
		sleep(runCtx, delay)
		return err
	}
	s.backoff = s.cfg.BackoffMin
	s.stored(b.msgs, &b.rows)
	for _, m := range b.msgs {
		if err := m.Ack(); err != nil {
			// The body comes back after AckWait and is written again under
			// the same ids: delayed, not counted twice.
			s.log.Debug("ack", zap.Error(err))
		}
	}
	s.metrics.observe(b, time.Since(start))
	b.reset()
	return nil
}

// extend resets the ack timer of the batch's bodies when they may have
// waited long enough (in the consumer's buffer, in the batch, for the
// writer) that the write could end past AckWait: a body is then never
// redelivered, and written twice, while its first write runs.
func (s *Stage1) extend(b *batch, now time.Time) {
	if now.Sub(b.first) < s.cfg.AckWait/4 && s.lastWrite < s.cfg.AckWait/8 {
		return
	}
	for _, m := range b.msgs {
		_ = m.InProgress()
	}
}

// healthy reports whether both stores answer: the NATS connection is up,
// EVENTS (when stage 1 publishes to it) has a leader that answers, and the
// writer's store answers a ping. It asks within healthTimeout of its own,
// whatever is left of ctx: a write that failed by running out of its
// deadline leaves ctx done, and a question asked under it would fail at
// once, taking every slow write for an outage (nak'ed whole, never
// isolated, never a dead letter).
func (s *Stage1) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	defer cancel()
	if !s.js.Conn().IsConnected() {
		return false
	}
	if s.cfg.PublishEvents {
		if _, err := s.js.Stream(ctx, schema.StreamEvents); err != nil {
			return false
		}
	}
	if p, ok := s.w.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx) == nil
	}
	return true
}

// isolate writes the bodies of a failed batch again in halves, and the
// halves that fail in halves again, down to single bodies, so that the
// bodies stored beside a bad one cost a few writes, not one each. A group
// stored is acked. A single body that fails on its own is struck (strike;
// since is when the batch's write began). A group that fails while a store
// is down is nak'ed with the batch backoff: an outage never makes dead
// letters.
func (s *Stage1) isolate(runCtx context.Context, msgs []jetstream.Msg, batchErr error, since time.Time) {
	if s.solo == nil {
		s.solo = newEventPublisher(s.js.Conn(), eventsWindow)
	}
	if len(msgs) == 1 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.AckWait/4)
		defer cancel()
		s.strike(ctx, msgs[0], batchErr, since)
		return
	}
	half := len(msgs) / 2
	for _, group := range [][]jetstream.Msg{msgs[:half], msgs[half:]} {
		if err := s.writeGroup(runCtx, group); err != nil {
			s.isolate(runCtx, group, err, since)
		}
	}
}

// writeGroup normalizes the bodies of msgs again and writes them as one
// batch, acking them when stored. A failure while a store is down naks
// them with the batch backoff and returns nil: they are handled.
func (s *Stage1) writeGroup(runCtx context.Context, msgs []jetstream.Msg) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.AckWait/4)
	defer cancel()
	start := time.Now()
	b := &batch{msgs: msgs}
	var err error
	for _, m := range msgs {
		_ = m.InProgress() // the isolation may take a while
		m0, p0 := len(b.rows.Management), len(b.rows.Numbers)
		s.n.Normalize(m.Data(), SourceOf(m), m.Headers().Get(schema.HeaderMsgID), &b.rows)
		if s.numbers != nil && err == nil {
			err = s.resolve(ctx, &b.rows, m0, p0, &b.numbers)
		}
	}
	if err == nil {
		err = s.writeAlone(ctx, &b.rows)
	}
	if err == nil {
		err = s.settleNumbers(ctx, &b.rows, &b.numbers)
	}
	if err != nil {
		s.requeueHeld(&b.numbers)
	}
	switch {
	case err == nil:
		s.stored(msgs, &b.rows)
		for _, m := range msgs {
			_ = m.Ack()
		}
		s.metrics.observe(b, time.Since(start))
		return nil
	case errors.Is(err, errNumbers) || isOutage(err) || len(msgs) > 1 && !s.healthy(ctx):
		delay := s.backoff
		for _, m := range msgs {
			_ = m.NakWithDelay(delay)
		}
		return nil
	}
	return err
}

// writeAlone publishes the events of rows and writes them.
func (s *Stage1) writeAlone(ctx context.Context, rows *schema.Rows) error {
	if s.cfg.PublishEvents {
		if err := s.solo.send(ctx, rows, &rowMarks{}); err != nil {
			return err
		}
		if err := s.solo.drain(ctx); err != nil {
			return err
		}
	}
	return s.w.Write(ctx, rows)
}

// strike handles a body that failed on its own with err, in an isolation
// of a batch whose write began at since.
func (s *Stage1) strike(ctx context.Context, m jetstream.Msg, err error, since time.Time) {
	var n uint64 = 1
	if md, mdErr := m.Metadata(); mdErr == nil {
		n = md.NumDelivered
	}
	src := SourceOf(m)
	// A ClickHouse that cannot take writes now (a replica's tables
	// read-only while ZooKeeper is away, too many parts) answers pings: the
	// body is not what it refuses. Its writes go on as any failed write's
	// (in halves, then alone: another connection may reach a replica that
	// takes them), but it never becomes a dead letter for it.
	//
	// What counts toward MaxDeliver is the times the body failed so,
	// alone while both stores answered, not its deliveries: those include
	// the naks of every batch it was in during an outage, and after a long
	// one a first failure of its own (a timeout, a passing error) would
	// make it a dead letter at once.
	if !isOutage(err) && !chwriter.Unavailable(err) && s.ownFault(err, m, src, since, time.Now()) && s.healthy(ctx) && s.countStrike(src.RawSeq) >= s.cfg.MaxDeliver {
		werr := writeDeadLetter(ctx, s.w, src, m.Headers().Get(schema.HeaderMsgID), m.Data(),
			fmt.Sprintf("not stored in %d tries on its own while the stores answered (%d deliveries): %v", s.cfg.MaxDeliver, n, err))
		if werr == nil {
			_ = m.Ack()
			delete(s.strikes, src.RawSeq)
			s.metrics.deadLetters.Inc()
			s.metrics.poison.Inc()
			s.log.Warn("body made a dead letter after failing on its own", zap.Uint64("raw_seq", src.RawSeq),
				zap.Uint64("deliveries", n), zap.Error(err))
			return
		}
		err = werr
	}
	delay := s.cfg.BackoffMin << min(n-1, 16)
	delay = min(delay, s.cfg.BackoffMax)
	_ = m.NakWithDelay(delay)
	if count, due := s.strikeLog.Note(); due {
		s.log.Warn("body not stored on its own, will retry", zap.Uint64("raw_seq", src.RawSeq), zap.Uint64("deliveries", n),
			zap.Int("max_deliver", s.cfg.MaxDeliver), zap.Duration("retry_in", delay), zap.Int64("bodies_since_last_line", count), zap.Error(err))
	}
}

// ownFault reports whether err, the failure on its own of the body m (read
// from RAW as src) in an isolation begun at since, can be the body's. A
// write that ran out of its deadline or lost its connection says nothing
// of the body unless the store took writes of every kind of rows the body
// holds since: a ClickHouse whose inserts hang while it answers pings (a
// table locked by an ALTER, a replica stuck behind a balancer) made every
// body a dead letter, acked and missing from the tables once it recovered.
// A body slow on its own is struck once bodies like it are stored beside it
// (after an idle spell, when traffic comes again), or once it has failed so
// for unsureFor AckWaits without that (a body of a kind of rows seldom
// written, or with no traffic): it came back for ever before, and each
// time cost its batch's write and the halves' (at now).
func (s *Stage1) ownFault(err error, m jetstream.Msg, src schema.Source, since, now time.Time) bool {
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.As(err, &ne) &&
		!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return true // refused: the store answered
	}
	var rows schema.Rows
	s.n.Normalize(m.Data(), src, m.Headers().Get(schema.HeaderMsgID), &rows)
	held := false
	for k, has := range kindsOf(&rows) {
		if has {
			if !s.storedAt[k].After(since) {
				held = false
				break
			}
			held = true
		}
	}
	if held {
		return true
	}
	if s.strikes == nil {
		s.strikes = map[uint64]strikeCount{}
	}
	c := s.strikes[src.RawSeq]
	if c.unsure.IsZero() {
		c.unsure, c.last = now, now
		s.strikes[src.RawSeq] = c
		return false
	}
	return now.Sub(c.unsure) >= unsureFor*s.cfg.AckWait
}

// unsureFor is how many AckWaits a body fails on its own without a sign of
// its fault before its failures count all the same (20 minutes with the
// default AckWait of 60 s). A stalled store that long makes dead letters,
// which wahook replay stores again.
const unsureFor = 20

// The kinds of rows a write holds, as ownFault tells them apart: each goes
// to tables of its own.
const (
	rowsStatuses = iota
	rowsErrors
	rowsInbound
	rowsManagement
	rowsSendResults
	rowsDeadLetters
	rowKinds
)

// kindsOf tells which kinds of rows r holds.
func kindsOf(r *schema.Rows) (k [rowKinds]bool) {
	k[rowsStatuses], k[rowsErrors], k[rowsInbound] = len(r.Statuses) > 0, len(r.Errors) > 0, len(r.Inbound) > 0
	k[rowsManagement], k[rowsSendResults], k[rowsDeadLetters] = len(r.Management) > 0, len(r.SendResults) > 0, len(r.DeadLetters) > 0
	return k
}

// writeDeadLetter stores the dead letter (retries_exhausted, for the
// reason why) of body, read from RAW as src with Nats-Msg-Id id (empty:
// the body's own id). The body itself may be what the store refuses: the
// reason is then kept without it (RAW still holds it, at its sequence).
func writeDeadLetter(ctx context.Context, w Writer, src schema.Source, id string, body []byte, why string) error {
	if id == "" {
		id = schema.RawMsgID(body)
	}
	d := schema.DeadLetter{Source: src, RawMsgID: id, Reason: ReasonRetriesExhausted, Error: why, Body: string(body)}
	rows := schema.Rows{DeadLetters: []schema.DeadLetter{d}}
	err := w.Write(ctx, &rows)
	if err != nil {
		rows.DeadLetters[0].Body = ""
		rows.DeadLetters[0].Error += fmt.Sprintf("; the body is not kept here (%v): it is in %s at sequence %d", err, schema.StreamRaw, d.Source.RawSeq)
		err = w.Write(ctx, &rows)
	}
	return err
}

// strikeCount is how often a body failed on its own while the stores
// answered, and when it last did.
type strikeCount struct {
	n    int
	last time.Time
	// unsure is when the body first failed on its own in a way that says
	// nothing of it (ownFault), and no strike counted since.
	unsure time.Time
}

// Bounds of stage 1's count of strikes: past strikesPrune bodies, those
// that have not failed for strikeForget are forgotten (another instance
// stored them, or a restart of the consumer's leader lost their naks).
const (
	strikesPrune = 10_000
	strikeForget = time.Hour
)

// countStrike counts a failure on its own of the body at RAW sequence seq
// and returns how many it has had.
func (s *Stage1) countStrike(seq uint64) int {
	now := time.Now()
	if s.strikes == nil {
		s.strikes = map[uint64]strikeCount{}
	}
	if len(s.strikes) >= strikesPrune {
		for k, c := range s.strikes {
			if now.Sub(c.last) > strikeForget {
				delete(s.strikes, k)
			}
		}
	}
	c := s.strikes[seq]
	c.n++
	c.last = now
	s.strikes[seq] = c
	return c.n
}

// stored notes a write of bodies holding rows, and forgets the strikes of
// msgs, acked once stored.
func (s *Stage1) stored(msgs []jetstream.Msg, rows *schema.Rows) {
	now := time.Now()
	for k, has := range kindsOf(rows) {
		if has {
			s.storedAt[k] = now
		}
	}
	if len(s.strikes) == 0 {
		return
	}
	for _, m := range msgs {
		if md, err := m.Metadata(); err == nil {
			delete(s.strikes, md.Sequence.Stream)
		}
	}
}

// isOutage reports whether err says a store did not answer (EVENTS without
// a leader, or storing the same event from an earlier try; the connection
// down), rather than refused what it was given: such a failure delays its
// bodies (nak with a backoff), however often it comes, and never makes a
// dead letter. A
// timeout is not one of them: a body can be what makes a write slow, and
// whether the stores answer is then for healthy to say.
func isOutage(err error) bool {
	for _, e := range []error{errEventsDown, errWindowClosed, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrConnectionDraining, nats.ErrDisconnected} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

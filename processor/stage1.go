package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

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
}

// NewStage1 returns a stage 1 consumer; log may be nil.
func NewStage1(cfg Config, js jetstream.JetStream, w Writer, n BodyNormalizer, reg prometheus.Registerer, log *zap.Logger) (*Stage1, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("processor config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Stage1{cfg: cfg, js: js, w: w, n: n, log: log, metrics: newMetrics(reg), backoff: cfg.BackoffMin}
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
}

func (b *batch) reset() {
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	b.rows.Reset()
	b.bytes = 0
	b.sent, b.eventsErr = rowMarks{}, nil
}

// ConsumerConfig is the durable consumer of stage 1 on WAHOOK_RAW.
func (s *Stage1) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "wahook stage 1: RAW bodies to ClickHouse rows and EVENTS",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: schema.SubjectRawAll,
		MaxDeliver:    -1,
	}
}

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
// holds its rows too.
func (s *Stage1) Run(ctx context.Context) error {
	// A passing NATS error at start only delays stage 1 (ingest keeps
	// storing bodies meanwhile), so the consumer is retried.
	var cons jetstream.Consumer
	for wait := s.cfg.BackoffMin; ; wait = min(2*wait, s.cfg.BackoffMax) {
		var err error
		if cons, err = s.js.CreateOrUpdateConsumer(ctx, schema.StreamRaw, s.ConsumerConfig()); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("consumer on raw stream, retrying", zap.Error(err), zap.Duration("in", wait))
		sleep(ctx, wait)
	}
	// Prefetch is bounded by count and by bytes (bodies reach 4 MB).
	pull := min(s.cfg.MaxAckPending/2, 5000)
	it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(pull, 64<<20))
	if err != nil {
		return fmt.Errorf("consume %s: %w", schema.StreamRaw, err)
	}
	defer it.Stop()
	if s.events != nil {
		defer s.events.close()
	}

	// The writer goroutine takes full batches and gives them back empty;
	// two batches take turns.
	full, empty := make(chan *batch), make(chan *batch, 1)
	empty <- &batch{}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for b := range full {
			s.flush(ctx, b)
			empty <- b
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
		if len(b.msgs) > 0 {
			handOff(true)
		}
		close(full)
		<-writerDone
	}()
	maxAge := s.cfg.AckWait / 4
	for ctx.Err() == nil {
		wait := s.cfg.FlushInterval
		if len(b.msgs) > 0 {
			age := time.Since(b.first)
			if wait = s.cfg.FlushInterval - age; wait <= 0 {
				if handOff(age >= maxAge) {
					continue
				}
				// The writer is busy: look again soon, reading meanwhile.
				wait = writerPoll
			}
		}
		nctx, cancel := context.WithTimeout(ctx, wait)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
				// The loop hands the batch off when it is due.
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return fmt.Errorf("consume %s: %w", schema.StreamRaw, err)
			default:
				s.log.Warn("fetch from raw stream", zap.Error(err))
				sleep(ctx, s.cfg.BackoffMin)
			}
			continue
		}
		s.add(b, msg)
		if s.events != nil && b.eventsErr == nil {
			b.eventsErr = s.events.send(pubCtx, &b.rows, &b.sent)
		}
		if b.rows.Len() >= s.cfg.BatchRows || b.bytes >= s.cfg.BatchBytes {
			handOff(true)
		}
	}
	return nil
}

// add normalizes one RAW message into the batch.
func (s *Stage1) add(b *batch, msg jetstream.Msg) {
	if len(b.msgs) == 0 {
		b.first = time.Now()
	}
	b.msgs = append(b.msgs, msg)
	b.bytes += len(msg.Data())
	src := SourceOf(msg)
	s.n.Normalize(msg.Data(), src, msg.Headers().Get(schema.HeaderMsgID), &b.rows)
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
// its messages; when either store failed, it naks them with a growing
// delay instead, so they come back, and waits that delay before it takes
// the next batch (which meanwhile grows to its limits, see Run).
func (s *Stage1) flush(runCtx context.Context, b *batch) {
	// A stop does not cut a write short (that would waste it and leave its
	// bodies for redelivery): the write has its own deadline, well inside
	// AckWait, so a hung ClickHouse cannot hold bodies past it either.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.AckWait/2)
	defer cancel()
	start := time.Now()
	err := b.eventsErr
	if err == nil {
		err = s.w.Write(ctx, &b.rows)
	}
	if err != nil {
		delay := s.backoff
		s.backoff = min(2*s.backoff, s.cfg.BackoffMax)
		for _, m := range b.msgs {
			_ = m.NakWithDelay(delay) // lost naks come back after AckWait
		}
		s.metrics.failures.Inc()
		s.log.Warn("batch not stored, will retry", zap.Int("batch_bodies", len(b.msgs)), zap.Int("batch_rows", b.rows.Len()),
			zap.Duration("retry_in", delay), zap.Error(err))
		b.reset()
		sleep(runCtx, delay)
		return
	}
	s.backoff = s.cfg.BackoffMin
	for _, m := range b.msgs {
		if err := m.Ack(); err != nil {
			// The body comes back after AckWait and is written again under
			// the same ids: delayed, not counted twice.
			s.log.Debug("ack", zap.Error(err))
		}
	}
	s.metrics.observe(b, time.Since(start))
	b.reset()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

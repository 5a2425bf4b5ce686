package stage2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/deadline"
	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/internal/pullreader"
	"github.com/wahook/wahook/internal/pullstall"
	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

const (
	// fetchBatch is how many events the consumer keeps buffered.
	fetchBatch = 1000
	// cooldownRetry is the delay of the redelivery of an event whose
	// cool-down could not be written.
	cooldownRetry = time.Second
	// consumerCheck is how often Run checks that its consumer exists.
	consumerCheck = 10 * time.Second
)

// Stage2 consumes EVENTS and publishes pacing signals. Run it once.
type Stage2 struct {
	js  jetstream.JetStream
	pub jetstream.JetStream // js's connection, with an async window of stage 2's own
	cfg Config
	log *zap.Logger
	m   *metrics

	pacingKV, cooldownKV jetstream.KeyValue
	keyTTL               bool // the cool-down bucket expires keys per message

	nums   map[string]*number
	dedupe *pacing.Deduper
	// cooldownRetry holds the ids of 131056 events whose cool-down could
	// not be written, with when it failed; they were nak'ed, and their
	// redelivery writes it. An id stays while its event may come back
	// here (its partition may move away and back), until no cool-down of
	// it can still run (pruneCooldownRetries).
	cooldownRetry map[string]time.Time
	w             writer
	// own is the partitions this instance owns, with Config.Partitions;
	// nil when it consumes every number.
	own *ownership
	// ackFloor is the consumer's ack floor (a stream sequence) as last
	// seen (ackFloorSeen), for a consumer made again after it was deleted
	// (remakeConsumer). Used by Run's goroutine only.
	ackFloor     uint64
	ackFloorSeen bool
	// pullErr takes the client's reports on reading the consumer.
	pullErr func(error)
	// seedLog throttles the warning of a last signal not read; seedErr is
	// the last failure, and no read is tried before seedBackoff.
	seedLog     throttle.Throttle
	seedErr     error
	seedBackoff time.Time
}

// New builds stage 2 over js. It does no I/O: Run provisions and consumes.
// reg takes the metrics; a nil log is zap.NewNop().
func New(cfg Config, js jetstream.JetStream, reg prometheus.Registerer, log *zap.Logger) (*Stage2, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stage 2 config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// The signals are written with async publishes. A JetStream context's
	// async window is shared by all its users, so stage 2 takes one of its
	// own on the same connection: another user's backlog (ingest's, in
	// serve) does not stall its writes, nor its writes theirs. It uses the
	// default API prefix, as the KV subjects it writes do.
	pub, err := newPublisher(js.Conn(), ackTimeout)
	if err != nil {
		return nil, fmt.Errorf("stage 2: %w", err)
	}
	s := &Stage2{
		js: js, pub: pub, cfg: cfg, log: log.Named("stage2"), m: newMetrics(reg),
		nums: map[string]*number{}, dedupe: pacing.NewDeduperFor(cfg.MessageMemory), cooldownRetry: map[string]time.Time{},
		seedLog: throttle.Throttle{Every: 10 * time.Second},
	}
	s.pullErr = pullreader.Reports(s.log, "stage 2 consumer", s.m.restarts)
	s.w = writer{s: s, live: map[*number]struct{}{}}
	return s, nil
}

// Run provisions the KV buckets and the durable consumer, or with
// Config.Partitions the consumer group (the EVENTS stream must exist:
// stage 1 creates it), then applies events until ctx ends. It returns nil
// when ctx ends, after writing the signals still pending, or the error
// that stopped it.
func (s *Stage2) Run(ctx context.Context) error {
	// A cluster that is still forming (no responders, a leader not elected
	// yet) or a stream stage 1 has not made yet only delays stage 2.
	if !s.retry(ctx, "stream "+schema.StreamEvents, func() error {
		_, err := s.js.Stream(ctx, schema.StreamEvents)
		return err
	}) {
		return nil
	}
	if !s.retry(ctx, "pacing buckets", func() (err error) {
		s.pacingKV, s.cooldownKV, s.keyTTL, err = ensureBuckets(ctx, s.js, s.cfg.Replicas, s.cfg.SignalTTL, true)
		return err
	}) {
		return nil
	}
	// The WABAs' states, beside the numbers: a goroutine of their own,
	// stopped and waited for when Run returns.
	actx, stopAccounts := context.WithCancel(ctx)
	var accounts sync.WaitGroup
	accounts.Go(func() { s.runAccounts(actx) })
	accounts.Go(func() { s.countAccounts(actx) })
	defer func() { stopAccounts(); accounts.Wait() }()
	if !s.keyTTL {
		s.log.Warn("the server has no per-message TTL: cool-downs stay in their bucket for the longest cool-down; readers go by until",
			zap.String("bucket", schema.BucketPairCooldown))
	}
	if s.cfg.Partitions > 0 {
		// A member that fails while it consumes (the connection closed,
		// the group deleted by hand) joins again; a group it cannot join
		// at the start (a wrong partition count) ends Run.
		for wait := restartMin; ; wait = min(2*wait, restartMax) {
			err := s.runGroup(ctx)
			var ce *consumeError
			if err == nil || errors.Is(err, errPartitionsFixed) || errors.Is(err, errSignalsNotWritten) {
				return err
			}
			if !errors.As(err, &ce) {
				// Joining failed (a cluster still forming): try again.
				s.log.Warn("stage 2 could not join its group, retrying", zap.Error(err), zap.Duration("in", wait))
				if sleepCtx(ctx, wait); ctx.Err() != nil {
					return s.unwritten()
				}
				continue
			}
			s.m.restarts.Inc()
			s.log.Warn("stage 2 group member stopped, joining again", zap.Error(err), zap.Duration("in", wait))
			// Stopped while out of the group: the signals its last flush
			// could not write are not written now (their partitions may
			// have moved), and the stop says so.
			if sleepCtx(ctx, wait); ctx.Err() != nil {
				return s.unwritten()
			}
		}
	}
	var cons jetstream.Consumer
	if !s.retry(ctx, "consumer "+s.cfg.Durable, func() (err error) {
		cons, err = ensureConsumer(ctx, s.js, s.cfg)
		return err
	}) {
		return nil
	}
	if ci := cons.CachedInfo(); ci != nil {
		s.ackFloor, s.ackFloorSeen = ci.AckFloor.Stream, true
	}
	s.log.Info("stage 2 started", zap.String("consumer", s.cfg.Durable), zap.Strings("subjects", s.cfg.FilterSubjects))
	s.seedHeld(ctx)
	s.warmMemory(ctx, cons)
	// One failure of the consumer (a connection the server closed, a
	// consumer deleted by hand) must not end stage 2, nor the process: it
	// is logged, and the consumer is provisioned and read again.
	wait := restartMin
	for {
		started := time.Now()
		err := s.consume(ctx, cons)
		if ctx.Err() != nil {
			break
		}
		if time.Since(started) > restartMax {
			wait = restartMin
		}
		s.m.restarts.Inc()
		s.log.Warn("stage 2 consumer stopped, reading again", zap.Error(err), zap.Duration("in", wait))
		// Until the consumer is made again. A stop meanwhile ends Run
		// here: the consumer the last try failed to make is nil.
		for {
			if sleepCtx(ctx, wait); ctx.Err() != nil {
				break
			}
			wait = min(2*wait, restartMax)
			if cons, err = remakeConsumer(ctx, s.js, s.cfg, s.ackFloor, s.ackFloorSeen); err == nil {
				break
			}
			s.log.Warn("stage 2 consumer, retrying", zap.Error(err), zap.Duration("in", wait))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := s.lastFlush(); err != nil {
		return err
	}
	s.log.Info("stage 2 stopped")
	return nil
}

// lastFlush writes every pending signal, on stop. A write that failed
// marked its number again: its signal is not in the KV, and the events it
// holds are not acked (applied again at the next start). The stop says so
// (it returned nil, and the process exited 0).
func (s *Stage2) lastFlush() error {
	s.w.flush(context.Background(), time.Now(), true)
	return s.unwritten()
}

// unwritten is errSignalsNotWritten with how many numbers' signals are
// pending, or nil when none is.
func (s *Stage2) unwritten() error {
	n := 0
	for _, d := range s.w.dirty {
		if d.dirty && !d.gone {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%w: %d signal(s) not written to %s (their events stay unacked in %s, applied again at the next start)", errSignalsNotWritten, n, schema.BucketPacing, schema.StreamEvents)
	}
	return nil
}

// errSignalsNotWritten is lastFlush's error: Run returns it as it is, in a
// group too (where any other error of a member's run is a reason to join
// again).
var errSignalsNotWritten = errors.New("stopped with signals not written")

// retry runs f until it succeeds (true) or ctx ends (false), waiting
// restartMin doubling to restartMax between tries, each failure logged.
func (s *Stage2) retry(ctx context.Context, what string, f func() error) bool {
	for wait := restartMin; ; wait = min(2*wait, restartMax) {
		err := f()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn("stage 2 start-up, retrying", zap.String("what", what), zap.Error(err), zap.Duration("in", wait))
		if sleepCtx(ctx, wait); ctx.Err() != nil {
			return false
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errStalled: the consumer holds events it does not deliver to a reader
// waiting for them, as when its pull request was lost.
var errStalled = errors.New("the consumer holds events and no pull request waits for them (one was lost)")

// Restarts of a failed consumer wait restartMin, doubling to restartMax.
const (
	restartMin = 250 * time.Millisecond
	restartMax = 10 * time.Second
)

// consume applies the events of cons until ctx ends (nil) or the consumer
// fails (its error). The signals due are written as it goes.
func (s *Stage2) consume(ctx context.Context, cons jetstream.Consumer) error {
	it, err := pullreader.Open(cons, fetchBatch, 64<<20, s.pullErr, jetstream.PullMaxMessages(fetchBatch))
	if err != nil {
		return fmt.Errorf("consume %s: %w", schema.StreamEvents, err)
	}
	// Next waits for a message or a timer, not for ctx: ctx's end stops
	// the reader, which ends a waiting Next.
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-quit:
		}
		it.Stop()
	}()
	defer func() { close(quit); <-stopped }()

	nextRefresh := time.Now().Add(s.cfg.Refresh)
	check := min(consumerCheck, s.cfg.StallAfter/2)
	nextCheck := time.Now().Add(check)
	// idle is how long Next has waited without a message since the last;
	// stalls is how many consumer checks in a row saw a stall.
	var idle time.Duration
	stalls := 0
	// One context serves the waits until the next wake-up: a timer per
	// message read would cost more than most messages' handling.
	var wake deadline.Deadline
	defer wake.Stop()
	for {
		next := s.nextWake(nextRefresh)
		var msg jetstream.Msg
		err = nil
		if wait := time.Until(next); wait > 0 {
			before := next.Add(-wait)
			msg, err = it.Next(wake.By(context.Background(), next))
			if msg == nil {
				idle += time.Since(before)
			}
		}
		switch {
		case err == nil && msg != nil:
			idle = 0
			s.handle(ctx, msg)
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded):
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("consume %s: %w", schema.StreamEvents, err)
		}
		now := time.Now()
		nextRefresh = s.tick(ctx, now, nextRefresh)
		if !now.Before(nextCheck) {
			// A pull to a consumer deleted before it arrived gets no
			// answer: look. A pull lost with the consumer's leader is
			// made again once its heartbeats stop; as a second line, the
			// consumer then holds events it does not deliver.
			info, err := cons.Info(ctx)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("consume %s: %w", schema.StreamEvents, err)
			}
			if err == nil {
				s.ackFloor, s.ackFloorSeen = info.AckFloor.Stream, true // where a consumer made again starts
			}
			var held uint64
			if err == nil && idle >= s.cfg.StallAfter {
				held = pullstall.Held(info)
			}
			if held == 0 {
				stalls = 0
			} else if stalls++; stalls >= 2 {
				return fmt.Errorf("consume %s: %w (%d events held, none delivered in %s of waiting)",
					schema.StreamEvents, errStalled, held, idle.Round(time.Second))
			}
			nextCheck = now.Add(check)
		}
	}
}

// nextWake is when Run's loop must wake up next without a message: the
// next due write or the next refresh.
func (s *Stage2) nextWake(nextRefresh time.Time) time.Time {
	next := s.w.nextDue(nextRefresh)
	if nextRefresh.Before(next) {
		next = nextRefresh
	}
	return next
}

// tick refreshes the live numbers when nextRefresh has come, and writes
// the signals due at now. It returns the next refresh.
func (s *Stage2) tick(ctx context.Context, now, nextRefresh time.Time) time.Time {
	if !now.Before(nextRefresh) {
		s.w.refresh(s.cfg.Now())
		nextRefresh = now.Add(s.cfg.Refresh)
	}
	s.w.flush(ctx, now, false)
	return nextRefresh
}

// handle applies one EVENTS message and acks it. A message it cannot
// decode is acked too: it is counted and logged, never retried (stage 1
// wrote it; retrying cannot make it decodable). A message whose cool-down
// could not be written is nak'ed, to write it on redelivery; so is one of
// a number whose partition this instance no longer owns, for its owner.
func (s *Stage2) handle(ctx context.Context, msg jetstream.Msg) {
	var ev event
	switch err := decodeEvent(msg.Data(), &ev); {
	case errors.Is(err, errNoNumber):
		s.m.events.WithLabelValues(resultIgnored).Inc()
	case err != nil:
		s.m.events.WithLabelValues(resultBad).Inc()
		if ce := s.log.Check(zap.WarnLevel, "undecodable event"); ce != nil {
			ce.Write(zap.String("subject", msg.Subject()), zap.Error(err))
		}
	case s.own != nil && !s.own.owns(ev.number):
		// Its partition is another instance's now: the consumer that
		// delivered it is being replaced (ownership.go). Unacked, it stays
		// in the group's work queue for its owner.
		s.m.events.WithLabelValues(resultNotOwned).Inc()
		if err := msg.NakWithDelay(notOwnedRetry); err != nil && ctx.Err() == nil {
			s.log.Debug("nak", zap.String("subject", msg.Subject()), zap.Error(err))
		}
		return
	default:
		// An event that changes a decision (advice, tier, quality, limit,
		// maintenance) is written to the KV at once; it is acked only once
		// the KV holds it, so that a crash in between cannot lose it.
		s.w.holding = msg
		err := s.apply(ctx, &ev)
		taken := s.w.holding == nil
		s.w.holding = nil
		if err != nil {
			if taken {
				s.w.release(s.nums[ev.number], msg)
			}
			if err := msg.NakWithDelay(cooldownRetry); err != nil && ctx.Err() == nil {
				s.log.Warn("nak", zap.String("subject", msg.Subject()), zap.Error(err))
			}
			return
		}
		if taken {
			return // acked when the signal's write is stored (writer.settle)
		}
		if n := s.nums[ev.number]; n != nil && !n.gone {
			if n.dirty {
				// Its change waits for the coalesced write: so does its ack.
				n.held = append(n.held, msg)
				return
			}
			// A message that changed nothing while a write of its number
			// is in flight (the redelivery of one whose write failed: it
			// is applied already) waits for that write, which holds what
			// it changed, and comes back if it fails too. Acked at once, a
			// crash before the write lands would leave the KV without it.
			if s.w.holdOn(n, msg) {
				return
			}
		}
	}
	if err := msg.Ack(); err != nil && ctx.Err() == nil {
		s.log.Warn("ack", zap.String("subject", msg.Subject()), zap.Error(err))
	}
}

// apply folds one event into its number's state, de-duplicating what
// counts, and writes a cool-down for a 131056. It fails only when the
// cool-down could not be written: the event is then counted, and its
// redelivery writes the cool-down alone.
func (s *Stage2) apply(ctx context.Context, ev *event) error {
	// An event stamped ahead of this clock (a sender's clock running fast,
	// a send result stamped in the future) counts as now: the windows and
	// the de-duplication follow the newest second seen, and a single event
	// far ahead would leave every number's traffic behind them.
	// Its id is then remembered by itself, not by the second it counts
	// at: a redelivery counts at another second of the clock.
	if now := s.cfg.Now().Unix(); ev.e.At > now+maxAhead {
		ev.ahead, ev.e.At = ev.e.At, now
		s.m.clamped.Inc()
	}
	// The number's state first: one not in memory is seeded from its last
	// signal, and a read of it that fails fails the event (nak'ed, tried
	// again) before anything of it is counted.
	n, err := s.number(ctx, ev.number)
	if err != nil {
		return err
	}
	e := ev.e
	pair := e.Recipient != "" && hasCode(e.Codes, 131056)
	if ev.countable() {
		if s.dedupe.Holds(e.At) {
			if ev.seen(s.dedupe) {
				if ev.moveFrom != 0 {
					// Earlier evidence of a message counted already.
					if n.p.MoveOutbound(ev.moveFrom, e.At) {
						s.w.changed(n, &e)
					}
					s.m.events.WithLabelValues(resultMoved).Inc()
					return nil
				}
				if _, retry := s.cooldownRetry[ev.id]; retry && pair {
					return s.cooldown(ctx, ev)
				}
				s.m.events.WithLabelValues(resultDuplicate).Inc()
				return nil
			}
			e.Outbound = ev.e.Outbound // not if its message counted before
			if ev.moveFrom != 0 {
				if n.p.MoveOutbound(ev.moveFrom, e.At) {
					s.w.changed(n, &e)
				}
			}
		} else {
			// Older than the windows: its traffic cannot count any more,
			// nor can a repeat be told apart, but an error's advice (a
			// stop holds 15 minutes) still can: apply it without traffic.
			// Applying it twice changes no hold; its count falls outside
			// the last minute. Its cool-down, if any, is over or was
			// written when it was new. A Business-app echo, however late,
			// still tells that the number is a coexistence one (tier 20):
			// after a backlog or a replay it was dropped here, and the
			// number kept being told 80.
			e.Inbound, e.Outbound = false, false
			if _, retry := s.cooldownRetry[ev.id]; !retry {
				pair = false
			}
			if len(e.Codes) == 0 && !e.Coexistence {
				s.m.events.WithLabelValues(resultIgnored).Inc()
				return nil
			}
		}
	}
	if n.p.Apply(e) {
		s.w.changed(n, &e)
	}
	s.m.events.WithLabelValues(resultApplied).Inc()
	if pair {
		return s.cooldown(ctx, ev)
	}
	return nil
}

// Bounds of cooldownRetry: past cooldownRetryPrune ids, those that failed
// longer than cooldownRetryKeep ago are forgotten. A cool-down runs at most
// pacing.MaxPairCooldown from its event, which is at most a few seconds
// ahead of the failure: a redelivery after that writes nothing.
const (
	cooldownRetryPrune = 1024
	cooldownRetryKeep  = 2 * pacing.MaxPairCooldown
)

// pruneCooldownRetries forgets the ids of cooldownRetry whose cool-down can
// no longer run.
func (s *Stage2) pruneCooldownRetries(now time.Time) {
	for id, failed := range s.cooldownRetry {
		if now.Sub(failed) > cooldownRetryKeep {
			delete(s.cooldownRetry, id)
		}
	}
}

// maxAhead is how far ahead of this clock an event's time may be, in
// seconds, before it counts as now.
const maxAhead = 2

// cooldown writes the cool-down of a 131056, remembering the event for a
// retry when the write fails.
func (s *Stage2) cooldown(ctx context.Context, ev *event) error {
	if err := s.writeCooldown(ctx, ev.number, ev.e.Recipient, ev.id, time.Unix(ev.e.At, 0)); err != nil {
		now := time.Now()
		if len(s.cooldownRetry) >= cooldownRetryPrune {
			s.pruneCooldownRetries(now)
		}
		s.cooldownRetry[ev.id] = now
		return err
	}
	delete(s.cooldownRetry, ev.id)
	return nil
}

// seedHeld seeds, at the start, the numbers (this instance's) whose last
// signal holds them (stop or pause): a hold ends without an event, and the
// signal must say so when it does; and those whose last signal shows
// traffic or a slow-down, written once more with this instance's rates, so
// that a signal of before the start does not stay in the KV. The other
// numbers are seeded when their next event comes.
func (s *Stage2) seedHeld(ctx context.Context) {
	// Tried a few times: a read that fails (an API request lost while a
	// cluster elects a leader) left the held numbers unseeded, and a stop
	// with no event after it said stop in the KV for good. The events wait
	// meanwhile; past the tries, the numbers are seeded by their events.
	wait := restartMin
	for try := 1; ; try++ {
		err := s.seedHeldOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		if try == seedTries {
			s.log.Warn("read the held numbers' last signals: giving up; they are seeded by their next events", zap.Error(err), zap.Int("tries", try))
			return
		}
		s.log.Warn("read the held numbers' last signals, retrying", zap.Error(err), zap.Duration("in", wait))
		if sleepCtx(ctx, wait); ctx.Err() != nil {
			return
		}
		wait *= 2
	}
}

// seedTries is how many times seedHeld reads the signals.
const seedTries = 4

func (s *Stage2) seedHeldOnce(ctx context.Context) error {
	w, err := s.pacingKV.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer kvbucket.StopWatch(w)
	held := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch of the signals ended before their last values were in")
			}
			if e == nil { // nil: every key's last value is in
				if held > 0 {
					s.log.Info("seeded the numbers held at the start", zap.Int("numbers", held))
				}
				return nil
			}
			var sig schema.PacingSignal
			if json.Unmarshal(e.Value(), &sig) != nil {
				continue
			}
			// A signal that still shows traffic or a slow-down of the
			// previous instance: its rates and advice are of before the
			// start, and without an event its number would not be
			// written again. Seeded, it is written once with what this
			// instance knows (rates that fill again within a minute).
			stale := sig.Advice == schema.AdviceSlowDown || sig.Observed.S60 > 0 || len(sig.RecentErrors) > 0
			if sig.Advice != schema.AdviceStop && sig.Advice != schema.AdvicePause && !stale {
				continue
			}
			if s.own != nil && !s.own.owns(sig.PhoneNumberID) {
				continue
			}
			if s.nums[sig.PhoneNumberID] == nil {
				n := s.seed(sig.PhoneNumberID, &sig)
				if stale {
					s.w.mark(n) // written once, then evicted like any number
				}
				held++
			}
		}
	}
}

// number is the state of id, made on first sight and seeded from its last
// signal in the KV. A read that fails (other than for a key that does not
// exist) is an error, and no state is made: seeded from nothing, the number
// would lose its tier, stop and quality, and its next write would put that
// in the KV for good.
func (s *Stage2) number(ctx context.Context, id string) (*number, error) {
	if n := s.nums[id]; n != nil {
		return n, nil
	}
	// While the reads fail, a new number's event fails at once for a
	// while instead of each waiting for its own read: the loop goes on
	// with the numbers it holds.
	if now := time.Now(); now.Before(s.seedBackoff) {
		s.m.seedFailures.Inc()
		return nil, fmt.Errorf("read the last signal of %s: %w", id, s.seedErr)
	}
	var last *schema.PacingSignal
	rctx, cancel := context.WithTimeout(ctx, kvReadTimeout)
	defer cancel()
	e, err := s.pacingKV.Get(rctx, schema.PacingKey(id))
	if errors.Is(err, nats.ErrNoResponders) {
		// The bucket's direct reads have no responder when its stream is
		// gone, and briefly while it has no leader: tell them apart.
		if _, kerr := s.js.KeyValue(rctx, schema.BucketPacing); errors.Is(kerr, jetstream.ErrBucketNotFound) {
			err = kerr
		}
	}
	switch {
	case err == nil:
		var sig schema.PacingSignal
		if err := json.Unmarshal(e.Value(), &sig); err == nil {
			last = &sig
		}
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted),
		errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		// No signal to restore: none was written, or the bucket itself is
		// gone (it is provisioned again to write).
	default:
		s.m.seedFailures.Inc()
		if n, due := s.seedLog.Note(); due {
			s.log.Warn("the last signal of a number could not be read: its events wait and are tried again",
				zap.String("phone_number_id", id), zap.Error(err), zap.Int64("failures_since_last_line", n))
		}
		s.seedErr, s.seedBackoff = err, time.Now().Add(seedBackoff)
		return nil, fmt.Errorf("read the last signal of %s: %w", id, err)
	}
	return s.seed(id, last), nil
}

// kvReadTimeout bounds the read of a number's last signal: the event loop
// waits for it. After a failed read, seedBackoff passes before the next.
const (
	kvReadTimeout = 500 * time.Millisecond
	seedBackoff   = 2 * time.Second
)

// seed makes the state of id, restored from last, its last signal, if any.
func (s *Stage2) seed(id string, last *schema.PacingSignal) *number {
	n := &number{id: id, p: pacing.NewNumber(id), subject: schema.PacingSubject(id),
		kvSubject: "$KV." + schema.BucketPacing + "." + schema.PacingKey(id)}
	if last != nil && last.PhoneNumberID == id {
		n.p.Restore(*last)
		n.last = *last
		s.m.adviceMoved("", last.Advice)
		// A restored hold ends without an event: the number stays live
		// until then, so that its signal is written when it ends.
		if u := n.p.HoldsUntil(); u > 0 {
			n.holdUntil = u
		}
	}
	// Live, so that refresh writes it if its last signal is stale and
	// evicts it once nothing can change it (a number seeded for an event
	// that then counts nothing would stay in memory for good otherwise).
	s.w.live[n] = struct{}{}
	s.nums[id] = n
	s.m.numbers.Set(float64(len(s.nums)))
	return n
}

func hasCode(codes []int32, c int32) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

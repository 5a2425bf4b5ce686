package stage2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// warmBatch is how many events one fetch of the warm-up asks for (a
// variable for the tests).
var warmBatch = 2000

const (
	// warmSlack is read back beyond the message memory: the memory keeps a
	// message up to one epoch (64 s) longer.
	warmSlack = 64 * time.Second
	// warmFetchWait bounds one fetch of the warm-up.
	warmFetchWait = time.Second
	// maxWarmRetries bounds how often a warm-up opens its reading
	// consumer again after an error; warmRetryWait is the wait before the
	// first, doubled each time.
	maxWarmRetries = 5
	warmRetryWait  = 100 * time.Millisecond
)

// warmMemory fills the message memory, at the start, with the messages
// whose evidence this consumer took before this process did: the
// outbound evidence (send results, statuses) stored on EVENTS within the
// memory and the slack before the last event acked, from when the
// consumer was made, up to its ack floor. Without it, a later status of a
// message sent before a restart (a read, mostly) counted the message
// again as outbound, at the status's second, for up to the memory after
// every restart.
//
// Only what was acked is read: an event past the floor is delivered again
// and counts then. Events acked past the floor (acks come out of order
// while a number's write is in flight) are not read: their later statuses
// count again, as before. Nor are events stored before the consumer was
// made, which it never counted. The memory is filled as the events' own
// handling fills it, at each event's second, so that the epochs it keeps
// are the ones a process that never stopped would keep.
//
// It reads for at most Config.MemoryWarmup, with an ephemeral consumer
// whose every call is bounded by that time, and reads the newest part
// when it cannot read all; it never fails the start. It returns how many
// messages it remembered.
func (s *Stage2) warmMemory(ctx context.Context, cons jetstream.Consumer) int {
	return s.warm(ctx, nil, s.cfg.MemoryWarmup, func(ctx context.Context, w *warmup) error { return w.consumerSpan(ctx, cons) })
}

// warmPartitions is warmMemory for a group member (Config.Partitions):
// it fills the memory with the messages of the partitions parts whose
// evidence the group took, whoever took it (this member before a restart,
// or the member that owned a partition before it moved here). What the
// group took is what its work-queue stream no longer holds: for each
// partition, the events on EVENTS before its first message still on the
// work queue, or, with none there, every event sourced so far
// (partitionSpan). Like warmMemory it reads for at most budget (0: not at
// all), reads the newest part when it cannot read all, and never fails.
func (s *Stage2) warmPartitions(ctx context.Context, parts []int, budget time.Duration) int {
	if len(parts) == 0 {
		return 0
	}
	return s.warm(ctx, parts, budget, func(ctx context.Context, w *warmup) error { return w.partitionSpan(ctx, parts) })
}

// warm runs a warm-up whose span (floor, from) span sets, for at most
// budget, and logs how it went; parts are the partitions warmed, none
// without a group.
func (s *Stage2) warm(ctx context.Context, parts []int, budget time.Duration, span func(context.Context, *warmup) error) int {
	if budget <= 0 {
		return 0
	}
	w := warmup{s: s, began: time.Now()}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	defer w.close()
	err := w.run(ctx, span)
	s.dedupe.FlushEarlier() // what was read, whatever ended the reading
	var where []zap.Field
	if parts != nil {
		where = []zap.Field{zap.String("member", s.cfg.Member), zap.Ints("partitions", parts)}
	}
	s.m.warmed.Add(float64(w.remembered))
	switch {
	case parent.Err() != nil:
		return w.remembered // stopping: nothing to tell
	case w.floor == 0 && err != nil:
		s.m.warmups.WithLabelValues(warmFailed).Inc()
		s.log.Warn("stage 2 message memory not warmed: what its consumer (or its group's work queue) took could not be read; statuses of messages sent before the start (or the handover) count those messages again",
			append(where, zap.Error(err))...)
		return 0
	case w.floor == 0:
		return 0 // nothing was taken yet
	}
	fields := append(where, zap.Int("messages", w.remembered), zap.Int("events_read", w.read), zap.Uint64("ack_floor", w.floor),
		zap.Time("from", w.from), zap.Uint64("sequences_skipped", w.skipped), zap.Int("retries", w.retries), zap.Duration("took", time.Since(w.began)))
	switch {
	case err != nil:
		s.m.warmups.WithLabelValues(warmPartial).Inc()
		s.log.Warn("stage 2 message memory warmed in part or not at all (--stage2-memory-warmup ran out, or EVENTS could not be read): statuses of the messages not read count those messages again",
			append(fields, zap.Error(err))...)
	case w.skipped > 0:
		s.m.warmups.WithLabelValues(warmNewest).Inc()
		s.log.Warn("stage 2 message memory warmed with the newest events only (--stage2-memory-warmup could not read them all): statuses of the older messages skipped count those messages again",
			fields...)
	default:
		s.m.warmups.WithLabelValues(warmComplete).Inc()
		s.log.Info("stage 2 message memory warmed from EVENTS", fields...)
	}
	return w.remembered
}

// warmup is one warmMemory.
type warmup struct {
	s     *Stage2
	began time.Time
	from  time.Time
	floor uint64
	// rc is the ephemeral consumer reading EVENTS back.
	rc               jetstream.Consumer
	read, remembered int
	// first and last are the sequences of the first and the last event
	// read; skipped is how many sequences the jump passed over.
	first, last, skipped uint64
	pending              uint64 // events left for rc after the last read
	// next is the sequence the reading resumes at after an error (0: at
	// w.from, nothing read yet); retries is how often it did.
	next    uint64
	retries int
	// floors, for a group member, is the last event of each partition
	// warmed that the group took (w.floor is the highest); an event of
	// another partition, or past its partition's floor, is not
	// remembered.
	floors map[int]uint64
}

// run sets the span with span, then reads it.
func (w *warmup) run(ctx context.Context, span func(context.Context, *warmup) error) error {
	if err := span(ctx, w); err != nil || w.floor == 0 {
		return err
	}
	return w.readSpan(ctx)
}

// consumerSpan sets the span of warmMemory: up to the ack floor of
// stage 2's consumer cons, from the memory before it but not before cons
// was made.
func (w *warmup) consumerSpan(ctx context.Context, cons jetstream.Consumer) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if info.Delivered.Consumer == 0 || info.AckFloor.Stream == 0 {
		return nil // a new consumer: nothing was counted by it
	}
	w.floor = info.AckFloor.Stream
	w.setFrom(ctx)
	if info.Created.After(w.from) {
		w.from = info.Created // what was stored before it, it never counted
	}
	return nil
}

// setFrom sets where the reading starts: the memory and its slack before
// the last event taken (w.floor); the events past it are handled at their
// own seconds once delivered, however late.
func (w *warmup) setFrom(ctx context.Context) {
	end := w.began
	if m, err := w.s.js.Stream(ctx, schema.StreamEvents); err == nil {
		if msg, err := m.GetMsg(ctx, w.floor); err == nil && msg.Time.Before(end) {
			end = msg.Time
		}
	}
	w.from = end.Add(-w.s.cfg.MessageMemory - warmSlack)
}

// partitionSpan sets the span of warmPartitions: each partition's floor,
// the event before its first message still on the group's work queue
// (the queue keeps a message until it is acked, and takes EVENTS' events
// in order, so the partition's events before it were taken), or, with
// none there, the last event sourced into the queue before the lookup (the
// partition's events up to it were all taken). A group sources EVENTS
// from its first event, so there is no bound before. The queue's state and
// its messages are read from its leader: a replica behind it would miss a
// message just sourced, and its event would be taken for counted.
func (w *warmup) partitionSpan(ctx context.Context, parts []int) error {
	queue := groupStream(w.s.cfg.Durable)
	wq, err := w.s.js.Stream(ctx, queue) // the leader's info, before the lookups
	if err != nil {
		return err
	}
	sourced := sourcedSeq(wq.CachedInfo())
	floors, floor := make(map[int]uint64, len(parts)), uint64(0)
	for _, p := range parts {
		f := sourced
		h, err := leaderFirstHeader(ctx, w.s.js, queue, strconv.Itoa(p)+"."+groupFilter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return err
		default:
			seq, err := sourceSeq(h)
			if err != nil {
				return err
			}
			f = seq - 1
		}
		floors[p] = f
		floor = max(floor, f)
	}
	w.floors, w.floor = floors, floor // all or nothing
	if w.floor > 0 {
		w.setFrom(ctx)
	}
	return nil
}

// sourcedSeq is the last event of EVENTS stored on the group's work queue,
// as its leader keeps it (the source's persisted state, kept when the
// queue's messages are acked); 0, nothing known, from a server that does
// not report it: the partitions with a message held are warmed, the
// others not.
func sourcedSeq(info *jetstream.StreamInfo) uint64 {
	for _, si := range info.Sources {
		if si != nil && si.Name == schema.StreamEvents {
			return si.Seq
		}
	}
	return 0
}

// leaderFirstHeader is the headers of the first message of stream on
// subject (a wildcard may be in it), as the stream's leader has it: the
// JetStream API's message get, not the direct get (which a replica may
// answer), whatever the stream allows. ctx bounds the request (it must
// have a deadline).
func leaderFirstHeader(ctx context.Context, js jetstream.JetStream, stream, subject string) (nats.Header, error) {
	req, err := json.Marshal(struct {
		Seq        uint64 `json:"seq"`
		NextBySubj string `json:"next_by_subj"`
	}{1, subject})
	if err != nil {
		return nil, err
	}
	opts := js.Options()
	prefix := opts.APIPrefix
	switch {
	case opts.Domain != "":
		prefix = "$JS." + opts.Domain + ".API."
	case prefix == "":
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	reply, err := js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			ErrCode     uint16 `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("get the first message of %s on %s: %w", subject, stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == uint16(jetstream.JSErrCodeMessageNotFound):
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("get the first message of %s on %s: %s (%d)", subject, stream, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("get the first message of %s on %s: %w", subject, stream, jetstream.ErrInvalidJetStreamResponse)
	case len(resp.Message.Hdrs) == 0:
		return nats.Header{}, nil
	}
	return nats.DecodeHeadersMsg(resp.Message.Hdrs)
}

// headerStreamSource names, on a message sourced from another stream,
// that stream and the message's sequence there (nats-server's
// JSStreamSource).
const headerStreamSource = "Nats-Stream-Source"

// sourceSeq is the sequence on EVENTS of a message of the group's work
// queue, from its Nats-Stream-Source header ("<stream> <sequence> ...").
func sourceSeq(h nats.Header) (uint64, error) {
	f := strings.Fields(h.Get(headerStreamSource))
	if len(f) >= 2 && f[0] == schema.StreamEvents {
		if seq, err := strconv.ParseUint(f[1], 10, 64); err == nil && seq > 0 {
			return seq, nil
		}
	}
	return 0, fmt.Errorf("a message of the work queue without the EVENTS sequence it was sourced from (%s %q)", headerStreamSource, h.Get(headerStreamSource))
}

// readSpan reads EVENTS from w.from up to w.floor into the memory. A
// reading consumer that cannot be made or read (a NATS node restarting, a
// consumer lost with its server, an API call that timed out on a busy
// server) is made again past the last event read, a few times, while the
// time lasts: one such error cost the whole read-back.
func (w *warmup) readSpan(ctx context.Context) error {
	if err := w.reopen(ctx, nil); err != nil {
		return err
	}
	// After each batch: when what is left up to the floor would take
	// longer than the time left, at the pace read so far (the sequences
	// read, the jumps' skipped ones not counted, over the time since the
	// first consumer was made), the newest part is read instead (what the
	// time left can read, with a margin): the messages sent just before the
	// start are the ones whose statuses come soonest after it. A few jumps
	// at most: each makes a consumer.
	// opened is the sequence before the last jump's first: nothing was read
	// since the jump while last is not past it.
	jumps, opened, readSince := 0, uint64(0), time.Now()
	for w.pending > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		done, err := w.fetch(ctx)
		if testHookWarmFetched != nil {
			testHookWarmFetched(w)
		}
		if err != nil {
			if err := w.reopen(ctx, err); err != nil {
				return err
			}
			continue
		}
		if done {
			return nil
		}
		dl, _ := ctx.Deadline()
		left, took := time.Until(dl), time.Since(readSince)
		if jumps >= maxWarmJumps || left <= 0 || took <= 0 || w.first == 0 || w.last <= opened || w.last >= w.floor {
			continue
		}
		pace := float64(w.last-w.first+1-w.skipped) / took.Seconds() // sequences read a second
		if float64(w.floor-w.last) <= pace*left.Seconds()*0.9 {
			continue
		}
		can := uint64(pace * left.Seconds() * 0.75)
		if can >= w.floor-w.last {
			continue
		}
		next := w.floor - can + 1
		w.skipped += next - w.last - 1
		w.next = next
		if err := w.reopen(ctx, nil); err != nil {
			return err
		}
		jumps++
		opened = next - 1
	}
	return nil
}

// testHookWarmFetched, set by tests, runs after each fetch of a warm-up.
var testHookWarmFetched func(*warmup)

// maxWarmJumps bounds the jumps of a warm-up.
const maxWarmJumps = 4

// reopen makes the reading consumer, from w.next (or w.from, with nothing
// read yet), after failed, the error of the one before (nil: the first,
// or a jump). It tries again after an error, up to maxWarmRetries in the
// whole warm-up, waiting a little longer each time, while ctx lasts; it
// returns the last error once it gives up.
func (w *warmup) reopen(ctx context.Context, failed error) error {
	for {
		if failed != nil {
			if ctx.Err() != nil || w.retries >= maxWarmRetries {
				return failed
			}
			wait := warmRetryWait << w.retries
			w.retries++
			w.s.log.Debug("stage 2 message memory read-back: reading again after an error", zap.Uint64("from_seq", w.next),
				zap.Int("retry", w.retries), zap.Error(failed))
			if sleepCtx(ctx, wait); ctx.Err() != nil {
				return failed
			}
		}
		c := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &w.from}
		if w.next > 0 {
			c = jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: w.next}
		}
		if failed = w.open(ctx, c); failed == nil {
			return nil
		}
	}
}

// open replaces the reading consumer with one made of c.
func (w *warmup) open(ctx context.Context, c jetstream.ConsumerConfig) error {
	w.close()
	c.AckPolicy = jetstream.AckNonePolicy
	c.FilterSubjects = warmFilters(w.s.cfg.FilterSubjects)
	c.InactiveThreshold = 10 * time.Second // left behind if close fails: gone soon all the same
	c.MemoryStorage = true
	c.Replicas = 1
	rc, err := w.s.js.CreateConsumer(ctx, schema.StreamEvents, c)
	if err != nil {
		return err
	}
	w.rc = rc
	w.pending = rc.CachedInfo().NumPending
	return nil
}

// fetch reads one batch into the memory; done once past the floor.
func (w *warmup) fetch(ctx context.Context) (done bool, err error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	fctx, cancel := context.WithTimeout(ctx, warmFetchWait)
	defer cancel()
	// No more than are there: a fetch waits for its whole batch.
	batch, err := w.rc.Fetch(int(min(uint64(warmBatch), w.pending)), jetstream.FetchContext(fctx))
	if err != nil {
		return false, err
	}
	for msg := range batch.Messages() {
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		w.pending = md.NumPending
		if md.Sequence.Stream > w.floor {
			done = true
			continue // the rest of the batch is past it too
		}
		if w.first == 0 {
			w.first = md.Sequence.Stream
		}
		w.last, w.next = md.Sequence.Stream, md.Sequence.Stream+1
		w.read++
		if w.floors != nil && !w.taken(msg.Subject(), md.Sequence.Stream) {
			continue
		}
		var ev event
		if decodeEvent(msg.Data(), &ev) == nil && ev.msg != "" {
			// An event stamped ahead counted at the clock of its handling,
			// which the time it was stored tells, not this clock: one far
			// ahead would carry the memory's head past the others.
			at, ref := ev.e.At, md.Timestamp.Unix()
			if now := w.s.cfg.Now().Unix(); now < ref {
				ref = now
			}
			if at > ref+maxAhead {
				at = ref
			}
			// Not FirstEvidence: on a handover the memory's head is at
			// the clock, and FirstEvidence keeps nothing older than the
			// windows.
			if w.s.dedupe.RememberEarlier(ev.msg, at) {
				w.remembered++
			}
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return done, err
	}
	return done, nil
}

// taken reports whether the event seq on subject is of a partition warmed
// and at or before its floor.
func (w *warmup) taken(subject string, seq uint64) bool {
	token, _, _ := strings.Cut(strings.TrimPrefix(subject, schema.SubjectEventsPrefix), ".")
	f, ok := w.floors[partitionOfToken(token, w.s.cfg.Partitions)]
	return ok && seq <= f
}

// close deletes the reading consumer, if any.
func (w *warmup) close() {
	if w.rc == nil {
		return
	}
	// Briefly: a consumer not deleted goes by itself (InactiveThreshold).
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = w.s.js.DeleteConsumer(ctx, schema.StreamEvents, w.rc.CachedInfo().Name)
	w.rc = nil
}

// warmFilters narrows stage 2's filter subjects to the kinds that carry a
// message's evidence, when stage 2 reads every number.
func warmFilters(filters []string) []string {
	if len(filters) == 1 && filters[0] == schema.SubjectEventsAll {
		return []string{
			schema.SubjectEventsPrefix + "*." + string(schema.KindStatus),
			schema.SubjectEventsPrefix + "*." + string(schema.KindSendResult),
		}
	}
	return filters
}

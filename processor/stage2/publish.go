package stage2

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

const (
	// trafficHorizon is how long after a number's newest traffic (Meta's
	// time) its signal is refreshed every Refresh: until the 60 s window,
	// which ends Settle before now, has passed it.
	trafficHorizon = 60 + int64(pacing.Settle/time.Second) + 2
	// holdHorizon is how long after an error or a management event the
	// signal is checked every Refresh and written when it changes: the
	// longest hold (a stop) and a minute of recent_errors.
	holdHorizon = int64((pacing.StopHold + time.Minute) / time.Second)
	// maxPendingWrites bounds the KV writes awaiting their acks.
	maxPendingWrites = 4096
	// ackTimeout is how long a KV write may await its ack.
	ackTimeout = 10 * time.Second
)

// number is a business number's state and its writing schedule.
type number struct {
	id                 string
	subject, kvSubject string // wahook.pacing.<id>, $KV.wahook_pacing.<id>
	p                  *pacing.Number

	dirty  bool // changed since its last write
	writes int  // its writes awaiting their acks
	// held are the EVENTS messages applied since its last write: acked once
	// a write of what they changed is stored.
	held      []jetstream.Msg
	gone      bool      // forgotten: its partition moved to another instance
	lastWrite time.Time // real clock
	trafficAt int64     // Meta's time of its newest traffic
	holdUntil int64     // Meta's time until which its advice may change without events
	last      schema.PacingSignal
}

// pendingWrite is a KV write awaiting its ack, and the EVENTS messages
// whose decision it carries: they are acked only once it is stored.
type pendingWrite struct {
	f    jetstream.PubAckFuture
	n    *number
	msgs []jetstream.Msg
}

// writer coalesces and writes the signals: a changed number is written at
// once when its last write is at least Coalesce old, else when it is; and
// every Refresh while it is live. It runs on Run's goroutine.
type writer struct {
	s       *Stage2
	dirty   []*number
	due     time.Time // the earliest due write of dirty
	live    map[*number]struct{}
	pending []pendingWrite
	// holding is the message being applied: a write it causes at once (a
	// change of advice, tier, quality, limit or maintenance) takes it, to
	// ack it once the KV holds the decision (handle acks it otherwise).
	holding jetstream.Msg
	// fails counts the failed writes since failLogged, the last log line
	// about them.
	fails      int
	failLogged time.Time
}

// changed marks n to be written after e changed it. An error or a
// management event that changes what a sender must do (the advice, the
// tier, quality, messaging limit or maintenance window) is written at
// once, whatever the coalescing: coalescing only spaces the writes that
// move the rates and counts.
func (w *writer) changed(n *number, e *pacing.Event) {
	if e.Inbound || e.Outbound {
		n.trafficAt = max(n.trafficAt, e.At)
	}
	w.live[n] = struct{}{}
	if len(e.Codes) > 0 || e.Field != "" {
		n.holdUntil = max(n.holdUntil, e.At+holdHorizon)
		if !n.gone {
			sigNow := w.s.cfg.Now()
			if sig := n.p.Signal(sigNow, w.s.cfg.Tiers); !sameDecision(sig, n.last) {
				w.write(n, sigNow, time.Now())
				w.s.m.urgent.Inc()
				return
			}
		}
	}
	w.mark(n)
}

// sameDecision reports whether two signals tell a sender the same: the
// same advice under the same tier, quality, messaging limit and
// maintenance window (rates and counts aside).
func sameDecision(a, b schema.PacingSignal) bool {
	return a.Advice == b.Advice && a.TierMPS == b.TierMPS && a.TierSource == b.TierSource && a.Quality == b.Quality &&
		a.MessagingLimit == b.MessagingLimit && (a.MaintenanceUntil == nil) == (b.MaintenanceUntil == nil) &&
		(a.MaintenanceUntil == nil || a.MaintenanceUntil.Equal(*b.MaintenanceUntil))
}

func (w *writer) mark(n *number) {
	if n.dirty || n.gone {
		return
	}
	n.dirty = true
	w.dirty = append(w.dirty, n)
	if d := n.lastWrite.Add(w.s.cfg.Coalesce); w.due.IsZero() || d.Before(w.due) {
		w.due = d
	}
}

// nextDue is when the next write is due, or def when none is.
func (w *writer) nextDue(def time.Time) time.Time {
	if len(w.dirty) == 0 {
		return def
	}
	return w.due
}

// refresh marks the live numbers whose signal moves without events: those
// with traffic in the last minute, and those whose holds or recent errors
// changed the signal since its last write. A number leaves the live set
// once neither can change it.
func (w *writer) refresh(now time.Time) {
	sec := now.Unix()
	for n := range w.live {
		switch {
		case sec <= n.trafficAt+trafficHorizon:
			w.mark(n)
		case !sameSignal(n.p.Signal(now, w.s.cfg.Tiers), n.last):
			w.mark(n)
		case sec > n.holdUntil && n.writes == 0 && !n.dirty:
			// Not while a write is to make: evict keeps it, and out of
			// the live set nothing would look at it again.
			delete(w.live, n)
			w.evict(n)
		}
	}
}

// evict forgets n, which left the live set: nothing but an event can
// change its signal any more, and its last signal, in the KV, holds what
// an event needs (its tier, quality, limit and holds: a number seen again
// is seeded from it, as after a restart). So memory holds the numbers of
// the last minutes, not every number ever seen. A number with a write
// still to make stays, and refresh keeps one whose writes await their acks
// live until they are settled (a redelivery of an event it applied must
// find it, and wait for those writes): a failed write's number is always
// still known.
func (w *writer) evict(n *number) {
	if n.dirty || n.gone || w.s.nums[n.id] != n {
		return
	}
	delete(w.s.nums, n.id)
	w.s.m.adviceMoved(n.last.Advice, "")
	w.s.m.evicted.Inc()
	w.s.m.numbers.Set(float64(len(w.s.nums)))
}

// flush writes the numbers whose write is due at now, or all with all,
// and collects the acks of earlier writes; with all it waits for every
// ack.
func (w *writer) flush(ctx context.Context, now time.Time, all bool) {
	if len(w.dirty) > 0 && (all || !now.Before(w.due)) {
		sigNow := w.s.cfg.Now()
		// A write can fail while the loop runs (its publish refused, or,
		// with maxPendingWrites in flight, earlier writes settled by the
		// blocking reap), and a failed number is marked again: it goes on
		// a new list, added to the kept ones after the loop. Marked onto
		// the list being walked, it would be dropped with it, and stay
		// dirty for good without ever being written again.
		dirty := w.dirty
		w.dirty = nil
		keep := dirty[:0]
		w.due = time.Time{}
		for _, n := range dirty {
			if n.gone || !n.dirty { // forgotten, or written at once since
				continue
			}
			due := n.lastWrite.Add(w.s.cfg.Coalesce)
			if all || !now.Before(due) {
				w.write(n, sigNow, now)
				continue
			}
			keep = append(keep, n)
			if w.due.IsZero() || due.Before(w.due) {
				w.due = due
			}
		}
		clear(dirty[len(keep):])
		w.dirty = append(keep, w.dirty...)
	}
	w.reap(ctx, all)
}

// forget stops writing n, whose partition moved to another instance. A
// change not written yet is written at once, so that the new owner, which
// seeds the number from its last signal, finds it (best effort: the new
// owner may read before the write lands).
func (w *writer) forget(n *number, sigNow, now time.Time) {
	if n.dirty {
		w.write(n, sigNow, now)
	}
	w.drop(n)
}

// drop forgets n without writing it: the messages whose change it holds
// unwritten go back, for the number's owner to apply.
func (w *writer) drop(n *number) {
	n.gone = true
	// A write refused at once leaves its messages with n, which is
	// written no more: they go back, for the new owner to apply.
	for _, m := range n.held {
		_ = m.NakWithDelay(notOwnedRetry)
	}
	n.held = nil
	w.s.m.adviceMoved(n.last.Advice, "")
	delete(w.live, n)
}

// newPublisher is the JetStream context of stage 2's KV writes. Its async
// publishes time out: without a timeout, a write whose PubAck is lost (the
// node that took it died before answering) would never resolve, and reap,
// which settles the writes in order, would stop at it for good, holding
// the acks of every later write's EVENTS messages until the member's
// MaxAckPending is full and its consumer delivers nothing more.
func newPublisher(nc *nats.Conn, timeout time.Duration) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*maxPendingWrites), jetstream.WithPublishAsyncTimeout(timeout))
}

// write publishes n's signal at sigNow to the KV (async) and its subject.
func (w *writer) write(n *number, sigNow, now time.Time) {
	s := w.s
	sig := n.p.Signal(sigNow, s.cfg.Tiers)
	data, err := json.Marshal(&sig)
	if err != nil {
		panic("BUG: pacing signal does not encode: " + err.Error())
	}
	s.m.adviceMoved(n.last.Advice, sig.Advice)
	n.dirty, n.lastWrite, n.last = false, now, sig
	if len(w.pending) >= maxPendingWrites {
		w.reap(context.Background(), true)
	}
	if w.holding != nil {
		n.held, w.holding = append(n.held, w.holding), nil
	}
	f, err := s.pub.PublishMsgAsync(&nats.Msg{Subject: n.kvSubject, Data: data})
	if err != nil {
		w.failed(n, err) // n.held waits for the next write
		return
	}
	pw := pendingWrite{f: f, n: n, msgs: n.held}
	n.held = nil
	n.writes++
	w.pending = append(w.pending, pw)
	if err := s.js.Conn().Publish(n.subject, data); err != nil {
		s.log.Warn("publish signal", zap.String("subject", n.subject), zap.Error(err))
	}
	s.m.signals.Inc()
}

// reap collects the acks of earlier writes; with block it waits for all. A
// failed write marks its number to be written again.
func (w *writer) reap(ctx context.Context, block bool) {
	keep := w.pending[:0]
	var timeout <-chan time.Time
	for i, p := range w.pending {
		if !block {
			select {
			case <-p.f.Ok():
				w.settle(p, nil)
			case err := <-p.f.Err():
				w.settle(p, err)
			default:
				keep = append(keep, w.pending[i:]...)
				clear(w.pending[len(keep):])
				w.pending = keep
				return
			}
			continue
		}
		if timeout == nil {
			t := time.NewTimer(ackTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-p.f.Ok():
			w.settle(p, nil)
		case err := <-p.f.Err():
			w.settle(p, err)
		case <-timeout:
			w.settle(p, context.DeadlineExceeded)
		case <-ctx.Done():
			w.settle(p, ctx.Err())
		}
	}
	clear(w.pending)
	w.pending = w.pending[:0]
}

// holdOn gives msg to the newest write of n awaiting its ack, if there is
// one: msg is acked when that write is stored, nak'ed when it fails.
func (w *writer) holdOn(n *number, msg jetstream.Msg) bool {
	if n.writes == 0 {
		return false
	}
	for i := len(w.pending) - 1; i >= 0; i-- {
		if p := &w.pending[i]; p.n == n {
			p.msgs = append(p.msgs, msg)
			return true
		}
	}
	return false
}

// release takes msg back from the write, or the number n, that took it.
func (w *writer) release(n *number, msg jetstream.Msg) {
	if n != nil {
		for k, m := range n.held {
			if m == msg {
				n.held = append(n.held[:k], n.held[k+1:]...)
				return
			}
		}
	}
	for i := len(w.pending) - 1; i >= 0; i-- {
		p := &w.pending[i]
		for k, m := range p.msgs {
			if m == msg {
				p.msgs = append(p.msgs[:k], p.msgs[k+1:]...)
				return
			}
		}
	}
}

// settle ends a write: stored, its messages are acked; failed, its number
// is written again and its messages come back soon (a redelivery finds
// them applied already and acks them once the write has succeeded; after a
// crash, it applies them again).
func (w *writer) settle(p pendingWrite, err error) {
	p.n.writes--
	if err != nil {
		w.failed(p.n, err)
		for _, m := range p.msgs {
			_ = m.NakWithDelay(cooldownRetry)
		}
		return
	}
	for _, m := range p.msgs {
		if err := m.Ack(); err != nil {
			w.s.log.Debug("ack after the signal's write", zap.Error(err))
		}
	}
}

func (w *writer) failed(n *number, err error) {
	w.s.m.writeFails.WithLabelValues(schema.BucketPacing).Inc()
	// One line every failLogEvery at most, with the count: during an
	// outage every number's write fails.
	w.fails++
	if now := time.Now(); now.Sub(w.failLogged) >= failLogEvery {
		w.s.log.Warn("pacing signals not written, will retry", zap.String("bucket", schema.BucketPacing),
			zap.Int("failed_writes", w.fails), zap.Duration("in_the_last", now.Sub(w.failLogged).Round(time.Second)), zap.Error(err))
		w.fails, w.failLogged = 0, now
	}
	w.mark(n) // not if forgotten meanwhile
}

// failLogEvery spaces the log lines of failed signal writes.
const failLogEvery = 10 * time.Second

// sameSignal reports whether a and b say the same, whenever they were
// made. It compares their JSON, so that a field added to the signal is
// compared too.
func sameSignal(a, b schema.PacingSignal) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	ja, errA := json.Marshal(&a)
	jb, errB := json.Marshal(&b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

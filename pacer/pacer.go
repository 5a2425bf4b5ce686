package pacer

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/wahook/wahook/schema"
)

// ErrStopped is what a *StopError is: errors.Is(err, pacer.ErrStopped).
var ErrStopped = errors.New("pacer: number stopped")

// ErrCooldown is what a *CooldownError is.
var ErrCooldown = errors.New("pacer: recipient in a cool-down")

// ErrClosed is Wait's answer once Close is called: to the Waits blocked
// then, and to every later one.
var ErrClosed = errors.New("pacer: closed")

// StopError is Wait's answer for a number whose advice is stop (or that an
// Outcome stopped): send nothing from it before Until.
type StopError struct {
	PhoneNumberID string
	Until         time.Time // the signal's stop_until
	Reason        string    // the signal's reason, or the error that stopped it
}

func (e *StopError) Error() string {
	return fmt.Sprintf("pacer: number %s stopped until %s: %s", e.PhoneNumberID, e.Until.UTC().Format(time.RFC3339), e.Reason)
}

// Is makes errors.Is(err, ErrStopped) hold.
func (e *StopError) Is(target error) bool { return target == ErrStopped }

// CooldownError is Wait's answer, with Config.CooldownNoWait, for a
// recipient that may not be messaged before Until: in a cool-down that
// wahook wrote after a 131056 (Local false), or held by the pacer's own pair
// rule or an Outcome (Local true).
type CooldownError struct {
	PhoneNumberID string
	Until         time.Time
	Local         bool
}

func (e *CooldownError) Error() string {
	return fmt.Sprintf("pacer: recipient of number %s in a cool-down until %s", e.PhoneNumberID, e.Until.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrCooldown) hold.
func (e *CooldownError) Is(target error) bool { return target == ErrCooldown }

// Pacer paces the sends of a service by wahook's signal. It is safe for
// concurrent use; Close stops it.
type Pacer struct {
	cfg    Config
	js     jetstream.JetStream
	hasher *schema.Hasher

	mu        sync.Mutex
	numbers   map[string]*number
	cooldowns map[string]time.Time // wahook's cool-downs by PairCooldownKey
	pairs     map[string]*pair     // the local pair rule by PairCooldownKey
	byKey     map[string]*number   // the numbers by their KV key (schema.PacingKey), for cool-downs
	// byWaba is the numbers of each WABA that signals or send results
	// named (setWABA); fanAt the last halving of a whole WABA ("waba:" and its
	// id) or of the app ("app"), at most one a second (throttled).
	byWaba map[string]map[*number]struct{}
	fanAt  map[string]time.Time
	// accounts is the WABAs' states of wahook_accounts, by key
	// (schema.AccountKey).
	accounts map[string]*schema.AccountState
	// wabaOf is each number's WABA as setWABA last recorded it, read
	// without p.mu: results name the same WABA again and again.
	wabaOf sync.Map

	rep *reporter

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  atomic.Bool
	done    chan struct{} // closed by Close: the blocked Waits return
	blocked atomic.Int64  // Waits blocked now, for tests
	buckets atomic.Int64  // buckets made by newBucket, for tests

	stats struct {
		signals, cooldowns, fallbacks, stops, pauses, unanswered atomic.Int64
	}
}

// number is one business number's state.
type number struct {
	id       string
	lim      *rate.Limiter
	sig      *schema.PacingSignal
	sigAt    time.Time            // when sig came, by this process's clock
	tier     float64              // the last known tier (0: none)
	fallback bool                 // the fallback rate applies now
	used     bool                 // Wait or Rate was asked about it: its fallback is logged and counted
	changed  chan struct{}        // closed and replaced when its signal, holds, rate or a cool-down of its recipients changes
	queue    list.List            // the Waits queued for a token of lim (*waiter), in their order
	waba     string               // its WABA: its signal's waba_id or its send results' (setWABA)
	acct     *schema.AccountState // its WABA's state, if wahook_accounts has one
	// wabaSignal: its signal named waba; a send result no longer replaces it
	wabaSignal bool
	throttle   float64   // rate cap after a throughput error reported through Outcome (throttled)
	thrUntil   time.Time // until then, or a signal that has the error (throttleSeen)
	thrSince   time.Time
	thrErrAt   time.Time   // the reported 130429's own time (its result's timestamp)
	thrTimer   *time.Timer // refreshes the number at thrUntil
	// holds from Outcome, before the signal says so
	pauseUntil time.Time
	stopUntil  time.Time
	stopReason string
	// the latest maintenance window a signal announced
	maintEnd    time.Time
	maintReason string

	// abandoned is the times of lim's tokens taken by Waits that left the
	// queue before their turn, whose debt is still in lim: the next bucket
	// (newBucket) gives those still to come back; rebuild, that it is
	// due (leave).
	abandoned []time.Time
	rebuild   bool
	// seq is the place of the last Wait that came for the number: each
	// takes the next (Wait), and keeps it when it goes round again.
	seq uint64
	// away is the Waits a hold of the number keeps from its queue
	// (*awayWait), in their order (seq): when the hold ends, each takes
	// its token after those before it (awayBefore).
	away list.List
}

// awayWait is a Wait held by a hold of its number, in number.away.
type awayWait struct {
	seq  uint64
	gone chan struct{} // closed when it leaves number.away
}

// ticket gives a Wait its place among the number's Waits (seq), if it has
// none yet: when it first queues for a token, or is first held (by a hold
// of the number or by its recipient), under the lock that queues or holds
// it. A place given when it came, before the lock of its token, would let
// two new Waits take their tokens in the opposite order to their places.
// p.mu is held.
func (n *number) ticket(seq *uint64) {
	if *seq == 0 {
		n.seq++
		*seq = n.seq
	}
}

// goAway puts the Wait seq in n.away, in its order. p.mu is held.
func (n *number) goAway(seq uint64) *list.Element {
	a := &awayWait{seq: seq, gone: make(chan struct{})}
	e := n.away.Back()
	for e != nil && e.Value.(*awayWait).seq > seq {
		e = e.Prev()
	}
	if e == nil {
		return n.away.PushFront(a)
	}
	return n.away.InsertAfter(a, e)
}

// comeBack takes the Wait of e out of n.away and lets the one after it
// go. p.mu is held.
func (n *number) comeBack(e *list.Element) {
	n.away.Remove(e)
	close(e.Value.(*awayWait).gone)
}

// awayBefore is the channel to wait on before the Wait seq takes a token
// of n's bucket: the last Wait held away that came before it (nil: none).
// self is the Wait's own element of n.away (nil: none). p.mu is held.
func (n *number) awayBefore(seq uint64, self *list.Element) <-chan struct{} {
	e := n.away.Back()
	if self != nil {
		e = self.Prev()
	}
	for e != nil && e.Value.(*awayWait).seq > seq {
		e = e.Prev()
	}
	if e == nil {
		return nil
	}
	return e.Value.(*awayWait).gone
}

// waiter is a Wait queued for a token of its number's bucket. p.mu guards
// it.
type waiter struct {
	seq      uint64            // its Wait's place among the number's (number.seq)
	deadline time.Time         // its context's (zero: none)
	tok      *rate.Reservation // its token, of the number's bucket now
	at       time.Time         // when tok comes
	err      error             // its answer when a new rate puts tok past the deadline (then out of the queue)
	elem     *list.Element
	moved    chan struct{} // told when a new bucket moves at earlier, or sets err
}

// pair is the local pair rule of one (number, recipient).
type pair struct {
	lim       *rate.Limiter
	last      time.Time
	coolUntil time.Time // after a 131056 reported through Outcome
	strikes   int
}

// New returns a Pacer that watches wahook_pacing, wahook_pair_cooldown and
// wahook_accounts through js and reports send results (unless Config.NoReport). It returns
// once the signals and cool-downs already written are held, or after
// Config.StartWait (NATS unreachable: a warning, and every number at the
// fallback rate until they are read), or with ctx's error when ctx ends
// first. Buckets that do not exist yet (wahook not started) are watched
// once they do; until then every number gets the fallback rate. ctx bounds
// only New itself.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Pacer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if js == nil && (cfg.ReportHTTPURL == "" && !cfg.NoReport) {
		return nil, errors.New("pacer: no JetStream to watch the signal and report on")
	}
	p := &Pacer{
		cfg:       cfg,
		js:        js,
		numbers:   map[string]*number{},
		cooldowns: map[string]time.Time{},
		pairs:     map[string]*pair{},
		byKey:     map[string]*number{},
		byWaba:    map[string]map[*number]struct{}{},
		fanAt:     map[string]time.Time{},
		accounts:  map[string]*schema.AccountState{},
		done:      make(chan struct{}),
	}
	if js == nil {
		cfg.Logger.Warn("pacer: no JetStream: no pacing signal or cool-down is watched; every number is sent at the fallback rate, and results are reported over HTTP only")
	}
	if len(cfg.PhoneHashKey) > 0 {
		p.hasher = schema.NewHasher(cfg.PhoneHashKey)
	} else {
		cfg.Logger.Warn("pacer: no phone hash key: wahook's pair cool-downs cannot be matched to recipients; the local pair rule and reported 131056 still hold")
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if !cfg.NoReport {
		p.rep = newReporter(cfg, js)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.rep.run(runCtx) }()
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.prune(runCtx) }()
	if js == nil {
		return p, nil
	}
	// The signals and cool-downs already written are held before New
	// returns: a number stopped, paused or slowed when the sender starts
	// is not sent at the fallback rate meanwhile.
	loaded := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	p.wg.Add(3)
	go func() { defer p.wg.Done(); p.watch(runCtx, schema.BucketPacing, p.onSignal, nil, loaded[0]) }()
	go func() { defer p.wg.Done(); p.watch(runCtx, schema.BucketPairCooldown, p.onCooldown, nil, loaded[1]) }()
	go func() {
		defer p.wg.Done()
		p.watch(runCtx, schema.BucketAccounts, p.onAccount, p.accountsSynced, loaded[2])
	}()
	limit := time.NewTimer(cfg.StartWait)
	defer limit.Stop()
	for _, ch := range loaded {
		select {
		case <-ch:
		case <-limit.C:
			cfg.Logger.Warn("pacer: the pacing signals and cool-downs were not read within the start wait; numbers go at the fallback rate until they are", "start_wait", cfg.StartWait.String())
			return p, nil
		case <-ctx.Done():
			_ = p.Close(context.Background())
			return nil, fmt.Errorf("pacer: reading the pacing signals: %w", ctx.Err())
		}
	}
	return p, nil
}

// Close stops watching, reports the results still queued or held (within
// ctx; give it a context of its own with a limit, not one that has ended)
// and waits for the pacer's goroutines. It returns an error naming how many
// results it dropped (wahook unreachable: three more tries once closing;
// ctx ended), wrapping ctx's error if ctx ended first; nil when it dropped
// none. The Waits blocked when it is called return ErrClosed at once, as
// every later Wait does; Outcome must not be called after it.
func (p *Pacer) Close(ctx context.Context) error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	// First, not after the reports: a Wait blocked for a token minutes
	// away, or a pause, would otherwise hold its caller until its own
	// context ends.
	close(p.done)
	var err error
	var dropped int64
	if p.rep != nil {
		dropped = p.rep.dropped.Load()
		err = p.rep.close(ctx)
	}
	p.cancel()
	p.mu.Lock()
	for _, n := range p.numbers {
		if n.thrTimer != nil {
			n.thrTimer.Stop()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	if p.rep != nil {
		if n := p.rep.dropped.Load() - dropped; n > 0 {
			if err != nil {
				return fmt.Errorf("pacer: %d send results could not be reported: %w", n, err)
			}
			return fmt.Errorf("pacer: %d send results could not be reported", n)
		}
	}
	// Nothing was lost, even if ctx ended first (nothing was left).
	return nil
}

// Stats are the pacer's counters.
type Stats struct {
	Signals         int64 `json:"signals"`          // signal values applied
	Cooldowns       int64 `json:"cooldowns"`        // wahook cool-downs applied
	FallbackEntered int64 `json:"fallback_entered"` // times a number fell back to the conservative rate (no or stale signal)
	FallbackNumbers int   `json:"fallback_numbers"` // numbers sent from (Wait, Rate) on the fallback rate now
	Stops           int64 `json:"stops"`            // Wait answers of ErrStopped
	Pauses          int64 `json:"pauses"`           // Waits that waited for a pause (once each)
	Reported        int64 `json:"reported"`         // results reported to wahook and acknowledged
	ReportDropped   int64 `json:"report_dropped"`   // results dropped: queue full, wahook unreachable at Close, or refused by wahook
	ReportFailures  int64 `json:"report_failures"`  // reports that failed (and were tried again)
	ReportInvalid   int64 `json:"report_invalid"`   // results not reported: wahook would refuse them (schema.SendResult.Check)
	Unanswered      int64 `json:"unanswered"`       // results with neither a status, a message_id nor an error_code: not reported, retried
	ReportHeld      int64 `json:"report_held"`      // results wahook refuses for now, held to be tried again (now)
}

// Stats returns the counters.
func (p *Pacer) Stats() Stats {
	s := Stats{
		Signals:         p.stats.signals.Load(),
		Cooldowns:       p.stats.cooldowns.Load(),
		FallbackEntered: p.stats.fallbacks.Load(),
		Stops:           p.stats.stops.Load(),
		Pauses:          p.stats.pauses.Load(),
		Unanswered:      p.stats.unanswered.Load(),
	}
	p.mu.Lock()
	for _, n := range p.numbers {
		if n.fallback && n.used {
			s.FallbackNumbers++
		}
	}
	p.mu.Unlock()
	if p.rep != nil {
		s.Reported, s.ReportDropped, s.ReportFailures = p.rep.reported.Load(), p.rep.dropped.Load(), p.rep.failures.Load()
		s.ReportInvalid, s.ReportHeld = p.rep.invalid.Load(), p.rep.heldCount.Load()
	}
	return s
}

// Rate is the rate the pacer sends a number at now, in messages per
// second (its Config.Share of the number's rate), and whether it is the
// fallback rate.
func (p *Pacer) Rate(phoneNumberID string) (mps float64, fallback bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.number(phoneNumberID)
	if !n.used {
		n.used = true
		if n.fallback {
			n.fallback = false
			p.fallbackOn(n, "no fresh signal")
		}
	}
	p.refresh(n, time.Now())
	return float64(n.lim.Limit()), n.fallback
}

// Signal returns the number's last signal, if any.
func (p *Pacer) Signal(phoneNumberID string) (schema.PacingSignal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.numbers[phoneNumberID]; ok && n.sig != nil {
		return *n.sig, true
	}
	return schema.PacingSignal{}, false
}

// Account returns the state of the number's WABA (wahook_accounts), if the
// pacer knows the number's WABA and the bucket has a state for it.
func (p *Pacer) Account(phoneNumberID string) (schema.AccountState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.numbers[phoneNumberID]; ok && n.acct != nil {
		return *n.acct, true
	}
	return schema.AccountState{}, false
}

// hold is what keeps a number from sending now.
type hold struct {
	stop   bool
	until  time.Time
	reason string
}

// Wait blocks until a message from phoneNumberID to recipient may be sent:
// the number's stop (a *StopError at once), its pause (waits), the
// recipient's cool-down and pair rule (waits, or with CooldownNoWait a
// *CooldownError at once), then a token of the number's bucket. It returns
// ctx's error when ctx ends first, or an error that is
// context.DeadlineExceeded when the bucket's token would come after ctx's
// deadline (also when a new rate puts it there while Wait waits), or
// ErrClosed once Close is called. recipient may be empty (no pair rule).
// The Waits of one number take its tokens in the order they came, also
// when one starts over after a pause, or its recipient's pair rule or
// cool-down.
func (p *Pacer) Wait(ctx context.Context, phoneNumberID, recipient string) error {
	key := ""
	if recipient != "" {
		key = schema.PairCooldownKey(phoneNumberID, p.hash(recipient))
	}
	paused := false
	// seq is this Wait's place among the number's Waits (ticket): the
	// queue keeps them in that order (enqueue), also when one goes round
	// again after a pause, or its recipient's pair rule or cool-down. away is its element of the
	// number's Waits held away by a hold: when the hold ends, those that
	// came before it take their tokens first (awayBefore), so that the
	// bucket's tokens at hand go to the first to come, not the first to
	// wake.
	var seq uint64
	var n *number
	var away *list.Element
	defer func() {
		if away != nil {
			p.mu.Lock()
			n.comeBack(away)
			p.mu.Unlock()
		}
	}()
	for {
		if p.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		p.mu.Lock()
		now := time.Now()
		n = p.number(phoneNumberID)
		if !n.used {
			n.used = true
			if n.fallback {
				n.fallback = false
				p.fallbackOn(n, "no fresh signal")
			}
		}
		p.refresh(n, now)
		h := p.hold(n, now)
		changed := n.changed
		var coolUntil time.Time
		var local bool
		if key != "" && h.until.IsZero() {
			coolUntil = p.cooldowns[key]
			if pr := p.pairs[key]; pr != nil && pr.coolUntil.After(coolUntil) {
				coolUntil, local = pr.coolUntil, true
			}
		}
		switch {
		case !h.stop && !h.until.IsZero():
			n.ticket(&seq)
			if away == nil {
				away = n.goAway(seq)
			}
		case coolUntil.After(now):
			n.ticket(&seq)
			if away != nil {
				// Held by its recipient now: the Waits after it go on.
				n.comeBack(away)
				away = nil
			}
		}
		p.mu.Unlock()

		switch {
		case h.stop:
			return p.stopErr(phoneNumberID, h)
		case !h.until.IsZero():
			if !paused {
				paused = true
				p.stats.pauses.Add(1)
			}
			if err := p.sleepUntil(ctx, h.until, changed); err != nil {
				return err
			}
			continue
		case coolUntil.After(now):
			if p.cfg.CooldownNoWait {
				return &CooldownError{PhoneNumberID: phoneNumberID, Until: coolUntil, Local: local}
			}
			if err := p.sleepUntil(ctx, coolUntil, changed); err != nil {
				return err
			}
			continue
		}

		// The local pair rule, checked before the number's bucket and taken
		// after it, right before the send: Meta counts a pair's messages as
		// they arrive, so the time between the pair's token and the send
		// must not vary with the wait for the number's token.
		var pr *pair
		if key != "" && p.cfg.PairBurst > 0 {
			p.mu.Lock()
			pr = p.pair(key)
			pr.last = now
			tokens := pr.lim.TokensAt(now)
			if tokens < 1 {
				n.ticket(&seq)
				if away != nil {
					n.comeBack(away) // held by its recipient
					away = nil
				}
			}
			p.mu.Unlock()
			if tokens < 1 {
				until := now.Add(time.Duration((1 - tokens) * float64(p.cfg.PairInterval)))
				if p.cfg.CooldownNoWait {
					return &CooldownError{PhoneNumberID: phoneNumberID, Until: until, Local: true}
				}
				if err := p.sleepUntil(ctx, until, changed); err != nil {
					return err
				}
				continue
			}
		}
		// The number's token: reserved, then waited for in the number's
		// queue. A stop, pause or cool-down of the recipient that comes
		// meanwhile takes it out of the queue (leave), and Wait starts
		// over; a new rate moves
		// it to the new bucket, in its turn (rebucket): a caller queued at
		// a low rate does not keep its late turn, nor one at a high rate
		// its early one.
		p.mu.Lock()
		n.ticket(&seq)
		if ch := n.awayBefore(seq, away); ch != nil {
			// A Wait that came before this one is still held away (the
			// hold has ended, and it has not woken yet). A hold that
			// comes meanwhile holds this one too (changed), in its
			// order among those away.
			changed = n.changed
			p.mu.Unlock()
			p.blocked.Add(1)
			var end error
			select {
			case <-ch:
			case <-changed:
			case <-ctx.Done():
				end = ctx.Err()
			case <-p.done:
				end = ErrClosed
			}
			p.blocked.Add(-1)
			if end != nil {
				return end
			}
			continue
		}
		now = time.Now()
		if len(n.abandoned) > 0 {
			// Waits left during a hold: their turns go before this one
			// takes its own.
			p.newBucket(n, float64(n.lim.Limit()))
			now = time.Now()
		}
		tok := n.lim.ReserveN(now, 1)
		d := tok.DelayFrom(now)
		if away != nil {
			n.comeBack(away) // its token taken: the next may take its own
			away = nil
		}
		var w *waiter
		var at time.Time
		if d > 0 {
			dl, _ := ctx.Deadline()
			w = &waiter{seq: seq, deadline: dl, tok: tok, at: now.Add(d), moved: make(chan struct{}, 1)}
			after, turn := place(n, w, now)
			if w.late(turn) {
				tok.CancelAt(now) // the last turn: all of it back
				p.mu.Unlock()
				return tooLate(turn.Sub(now))
			}
			p.enqueue(n, w, after, now)
			at = w.at
		}
		changed = n.changed
		p.mu.Unlock()
		if w != nil {
			again, err := p.waitToken(ctx, n, key, w, at, changed)
			if err != nil {
				return err
			}
			if again {
				continue
			}
		}
		p.mu.Lock()
		now = time.Now()
		// A stop or pause, or a cool-down of the recipient, that came
		// with the token still counts (the token is spent): the send
		// would go into it.
		h = p.hold(n, now)
		cooled := p.cooled(key, now)
		var res *rate.Reservation
		if pr != nil && h.until.IsZero() && !cooled {
			res = pr.lim.ReserveN(now, 1)
		}
		p.mu.Unlock()
		if h.stop {
			return p.stopErr(phoneNumberID, h)
		}
		if !h.until.IsZero() || cooled {
			continue
		}
		if res != nil {
			if d := res.DelayFrom(now); d > 0 {
				// Another send to the recipient took the token meanwhile.
				if p.cfg.CooldownNoWait {
					p.giveBack(res)
					return &CooldownError{PhoneNumberID: phoneNumberID, Until: now.Add(d), Local: true}
				}
				// A stop, pause or cool-down of the recipient that comes
				// during the wait holds the caller, as one that came with
				// the number's token does: the send would go into it.
				at := now.Add(d)
				for {
					p.mu.Lock()
					changed = n.changed
					now = time.Now()
					h = p.hold(n, now)
					cooled := p.cooled(key, now)
					p.mu.Unlock()
					if h.stop {
						p.giveBack(res)
						return p.stopErr(phoneNumberID, h)
					}
					if !h.until.IsZero() || cooled {
						p.giveBack(res)
						break
					}
					if !time.Now().Before(at) {
						return nil
					}
					if err := p.sleepUntil(ctx, at, changed); err != nil {
						p.giveBack(res)
						return err
					}
				}
				continue // paused or cooled: start over once it ends
			}
		}
		return nil
	}
}

// stopErr is Wait's answer to the stop h of the number id, counted.
func (p *Pacer) stopErr(id string, h hold) error {
	p.stats.stops.Add(1)
	return &StopError{PhoneNumberID: id, Until: h.until, Reason: h.reason}
}

// giveBack gives a reservation's token back to its bucket. Every call
// that moves a bucket (a reservation, a token given back) holds p.mu and
// reads the clock under it, so that the buckets see time in order: a
// bucket asked at a time before its last (a clock read before a wait for
// the lock, while another Wait reserved) moves its last back and counts
// that time's tokens twice, and the number would go over its rate.
func (p *Pacer) giveBack(r *rate.Reservation) {
	p.mu.Lock()
	r.CancelAt(time.Now())
	p.mu.Unlock()
}

// tooLate is Wait's answer when the number's token comes in d, after its
// context's deadline.
func tooLate(d time.Duration) error {
	return fmt.Errorf("pacer: %w: the number's next token comes in %v, after the context's deadline", context.DeadlineExceeded, d)
}

// waitToken waits until at, the time of the token of the waiter w queued on
// the number n, and takes w out of the queue. ctx's end or Close takes w
// out before its turn (leave: the number's next bucket gives the turn
// back). So does a stop or pause of the number, or a cool-down of the pair
// key, that comes meanwhile, and it answers again: Wait starts over. A new
// bucket moves the token (newBucket), and the wait goes on to its new
// time, or ends with w.err. at is w.at as read under p.mu: newBucket
// changes w.at, under p.mu.
func (p *Pacer) waitToken(ctx context.Context, n *number, key string, w *waiter, at time.Time, changed <-chan struct{}) (again bool, err error) {
	p.blocked.Add(1)
	defer p.blocked.Add(-1)
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	for {
		var end error
		select {
		case <-ctx.Done():
			end = ctx.Err()
		case <-p.done:
			end = ErrClosed
		case <-t.C:
		case <-changed:
			wakeups.Add(1)
		case <-w.moved:
		}
		p.mu.Lock()
		now := time.Now()
		if w.err != nil { // out of the queue already
			p.mu.Unlock()
			return false, w.err
		}
		if end == nil && p.closed.Load() {
			end = ErrClosed // Close and the token came together
		}
		if end == nil && !now.Before(w.at) {
			n.queue.Remove(w.elem)
			p.mu.Unlock()
			return false, nil
		}
		h := p.hold(n, now)
		if end != nil || h.stop || !h.until.IsZero() || p.cooled(key, now) {
			// A hold or Close sends every queued Wait away: they make no
			// bucket (the next Wait to queue does, once).
			p.leave(n, w, errors.Is(end, ErrClosed) || h.stop || !h.until.IsZero())
			p.mu.Unlock()
			return end == nil, end
		}
		changed, at = n.changed, w.at
		p.mu.Unlock()
		t.Reset(at.Sub(now))
	}
}

// place is where the waiter w, whose token of n's bucket is the last
// taken, goes in n's queue: after the last queued Wait that came before it
// (after; nil: at the front), with the turn of the first Wait behind it
// whose turn is still to come, or its own when there is none (turn). p.mu
// is held.
func place(n *number, w *waiter, now time.Time) (after *list.Element, turn time.Time) {
	after = n.queue.Back()
	for after != nil && after.Value.(*waiter).seq > w.seq {
		after = after.Prev()
	}
	turn = w.at
	e := n.queue.Front()
	if after != nil {
		e = after.Next()
	}
	for ; e != nil; e = e.Next() {
		if b := e.Value.(*waiter); now.Before(b.at) {
			return after, b.at
		}
	}
	return after, turn
}

// enqueue puts the waiter w in n's queue after the element after (place).
// A Wait that went round again (a pause sent every queued Wait away, or
// its recipient's pair rule or cool-down held it) goes back before the
// Waits that came after it: it takes the turn of the first of them whose
// turn is still to come, each of them the next one's, and the last the
// token w took, the last of the bucket. In the order the Waits woke, the
// first to come could be served last, past its deadline. The first that
// the move would put past its own deadline leaves the queue instead, with
// w.err, as in newBucket: it carries w's token, which goes back whole (the
// bucket's last), and the Waits behind it keep their turns. A new Wait,
// the most of them, goes at the back and moves none. p.mu is held.
func (p *Pacer) enqueue(n *number, w *waiter, after *list.Element, now time.Time) {
	if after == nil {
		w.elem = n.queue.PushFront(w)
	} else {
		w.elem = n.queue.InsertAfter(w, after)
	}
	// carrier holds w's token, passed down the queue from turn to turn.
	carrier := w
	for e := w.elem.Next(); e != nil; e = e.Next() {
		b := e.Value.(*waiter)
		if !now.Before(b.at) {
			continue // its token has come: it is served
		}
		if carrier != w && carrier.late(b.at) {
			p.refuse(n, carrier, b.at, now)
			return
		}
		carrier.tok, b.tok = b.tok, carrier.tok
		carrier.at, b.at = b.at, carrier.at
		carrier = b
	}
	if carrier != w && carrier.late(carrier.at) {
		p.refuse(n, carrier, carrier.at, now)
	}
}

// refuse takes the queued waiter w, which holds the bucket's last token,
// out of n's queue with w.err, its token back: its turn would be turn,
// after its deadline. p.mu is held.
func (p *Pacer) refuse(n *number, w *waiter, turn, now time.Time) {
	w.tok.CancelAt(now)
	n.queue.Remove(w.elem)
	w.err = tooLate(turn.Sub(now))
	w.tell()
}

// late reports whether a turn at t comes after w's deadline.
func (w *waiter) late(t time.Time) bool { return !w.deadline.IsZero() && t.After(w.deadline) }

// tell wakes w's wait: its turn moved earlier, or it has its answer.
func (w *waiter) tell() {
	select {
	case w.moved <- struct{}{}:
	default:
	}
}

// cooled reports whether the pair key is in a cool-down at now: wahook's,
// or one of a 131056 reported through Outcome. p.mu is held.
func (p *Pacer) cooled(key string, now time.Time) bool {
	if key == "" {
		return false
	}
	pr := p.pairs[key]
	return p.cooldowns[key].After(now) || (pr != nil && pr.coolUntil.After(now))
}

// sleepUntil waits until t, a change (changed closed), ctx's end or Close.
func (p *Pacer) sleepUntil(ctx context.Context, t time.Time, changed <-chan struct{}) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	p.blocked.Add(1)
	defer p.blocked.Add(-1)
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrClosed
	case <-tm.C:
	case <-changed:
		wakeups.Add(1)
	}
	return nil
}

// wakeups counts the Waits woken by a change, for tests.
var wakeups atomic.Int64

// hash is the key of recipient: its keyed hash in wahook's form
// (schema.Recipient), as wahook keys its cool-downs.
func (p *Pacer) hash(recipient string) string {
	recipient = schema.Recipient(recipient)
	if p.hasher == nil {
		return recipient
	}
	return p.hasher.Hash(recipient)
}

// number returns the state of id, made with the fallback rate if new.
// p.mu is held.
func (p *Pacer) number(id string) *number {
	n := p.numbers[id]
	if n == nil {
		r := p.cfg.FallbackShare * p.cfg.FallbackTierMPS * p.cfg.Share
		n = &number{id: id, lim: rate.NewLimiter(rate.Limit(r), p.burst(r)), changed: make(chan struct{})}
		p.numbers[id] = n
		p.byKey[schema.PacingKey(id)] = n
		p.fallbackOn(n, "no signal yet")
	}
	return n
}

func (p *Pacer) pair(key string) *pair {
	pr := p.pairs[key]
	if pr == nil {
		pr = &pair{lim: rate.NewLimiter(rate.Every(p.cfg.PairInterval), p.cfg.PairBurst)}
		p.pairs[key] = pr
	}
	return pr
}

func (p *Pacer) burst(r float64) int {
	return max(1, int(r*p.cfg.BurstWindow.Seconds()))
}

// hold is the number's stop or pause at now, with the pacer's
// configuration. p.mu is held.
func (p *Pacer) hold(n *number, now time.Time) hold {
	return n.hold(now, p.cfg.MaintenanceMargin, p.cfg.Replies)
}

// hold is the number's stop or pause at now: its WABA's ban or
// restriction (replies: Config.Replies), a stop, a maintenance window
// (with its margin), a pause. p.mu is held.
func (n *number) hold(now time.Time, margin time.Duration, replies bool) hold {
	var h hold
	if until, reason, ok := n.acct.Blocks(now, replies); ok {
		if until.IsZero() {
			until = now.Add(accountRecheck)
		}
		h = hold{stop: true, until: until, reason: reason}
	}
	if n.stopUntil.After(now) && n.stopUntil.After(h.until) {
		h = hold{stop: true, until: n.stopUntil, reason: n.stopReason}
	}
	if s := n.sig; s != nil {
		switch s.Advice {
		case schema.AdviceStop:
			if s.StopUntil != nil && s.StopUntil.After(now) && s.StopUntil.After(h.until) {
				h = hold{stop: true, until: *s.StopUntil, reason: s.Reason}
			}
		}
	}
	// A maintenance window holds until its end plus the margin, also once
	// the signal that ends it has come.
	if end := n.maintEnd.Add(margin); !n.maintEnd.IsZero() && !h.stop && end.After(now) && end.After(h.until) {
		h = hold{until: end, reason: n.maintReason}
	}
	if !h.stop && n.pauseUntil.After(now) && n.pauseUntil.After(h.until) {
		h = hold{until: n.pauseUntil, reason: "131057: maintenance"}
	}
	return h
}

// refresh sets the number's rate from its signal at now: the signal's
// recommended rate while it is fresh, the fallback rate once it is stale,
// the rate after a reported 130429 while that is lower. A signal is fresh
// while both its updated_at and its arrival here are within MaxSignalAge:
// one stamped ahead of this clock (wahook's clock ahead, then set back)
// still goes stale once no newer one comes. p.mu is held.
func (p *Pacer) refresh(n *number, now time.Time) {
	var r float64
	s := n.sig
	if s != nil && now.Sub(s.UpdatedAt) <= p.cfg.MaxSignalAge && now.Sub(n.sigAt) <= p.cfg.MaxSignalAge {
		p.fallbackOff(n)
		r = s.RecommendedMPS
		switch s.Advice {
		case schema.AdvicePause, schema.AdviceStop:
			// Its hold has ended (or Wait would not be here): the tier
			// less the inbound rate, as the rule's "ok".
			r = float64(s.TierMPS) - s.Observed.Inbound10
		}
		r = max(r, 1)
	} else {
		if s != nil {
			p.fallbackOn(n, "signal older than "+p.cfg.MaxSignalAge.String())
		}
		tier := n.tier
		if tier <= 0 {
			tier = p.cfg.FallbackTierMPS
		}
		r = max(p.cfg.FallbackShare*tier, 1)
	}
	r *= p.cfg.Share
	if n.throttle > 0 {
		if now.Before(n.thrUntil) && !throttleSeen(s, n.thrSince, n.thrErrAt) {
			r = min(r, n.throttle)
		} else {
			n.throttle = 0
		}
	}
	if rate.Limit(r) != n.lim.Limit() {
		p.rebucket(n, r)
	}
}

// throttleSeen reports whether s has the 130429 reported at since, whose
// own time is errAt, so that its rate has stage 2's own slowing. Stage 2
// stamps its signal with the time of the number's latest throughput error
// (throttled_at, whole seconds): one at or after errAt has it. A signal of
// the seconds before the report reached wahook (stage 2 rewrites a sending
// number's signal every second) has not, even when it counts an earlier
// 130429 of the last minute, and the halving holds until one that has
// comes (or throttleHold). A signal without throttled_at (a wahook before
// it) has the error when it is written after the report and counts a
// throughput error.
func throttleSeen(s *schema.PacingSignal, since, errAt time.Time) bool {
	switch {
	case s == nil:
		return false
	case s.ThrottledAt != nil:
		return !s.ThrottledAt.Before(errAt.Truncate(time.Second))
	}
	return s.UpdatedAt.After(since) && s.RecentErrors[schema.ClassThroughput] > 0
}

// rebucket gives the number a new bucket at rate r (newBucket), and wakes
// its Waits. p.mu is held.
func (p *Pacer) rebucket(n *number, r float64) {
	p.newBucket(n, r)
	p.wake(n)
}

// newBucket gives the number a new bucket at rate r, and moves the Waits
// queued on the old one to it, at the new rate, in their order (requeue).
// The old bucket's tokens carry over, up to the new depth, with the turns
// it gave that are still to come given back (those of the queued Waits,
// which take new turns, and of the Waits that left the queue before
// theirs); its debt does not. Changing the old bucket's rate instead
// (SetLimitAt) would keep the turns given at the old rate, so a fall
// would not reach the queued Waits nor a rise release them, and the
// tokens a queued Wait gives back would be counted against the last turn
// given, at the new rate: after a rise, far more than one. It reads the
// clock itself, under p.mu as every reservation is: with a time read
// before the lock (Outcome's), the bucket's tokens would not have come up
// to the last reservation's time, while the turns before it counted as
// still to come, so too many would carry over. p.mu is held.
func (p *Pacer) newBucket(n *number, r float64) {
	p.buckets.Add(1)
	now := time.Now()
	b := p.burst(r)
	owed := 0
	for e := n.queue.Front(); e != nil; e = e.Next() {
		if now.Before(e.Value.(*waiter).at) {
			owed++
		}
	}
	for _, at := range n.abandoned {
		if now.Before(at) {
			owed++
		}
	}
	n.abandoned = nil
	// Every token of the bucket still to come is one of those turns
	// (Wait takes a turn and queues under p.mu), so the level without
	// them is the bucket's tokens plus them.
	level := min(max(n.lim.TokensAt(now)+float64(owed), 0), float64(b))
	whole := int(level)
	frac := level - float64(whole)
	n.lim = rate.NewLimiter(rate.Limit(r), b)
	// Full when made; b-whole taken frac tokens' time ago leaves level now.
	n.lim.ReserveN(now.Add(-time.Duration(frac/r*float64(time.Second))), b-whole)
	// The new turns are taken here, in the order the Waits came, not by
	// each Wait as it wakes: in the order they woke, a Wait could take the
	// turn of one queued before it and push that one past its deadline.
	// Each whose turn moves earlier is told. One whose new turn comes after
	// its deadline leaves the queue with w.err (told too), and those behind
	// it move up. One whose token has come is served already (the old
	// bucket counted it).
	for e := n.queue.Front(); e != nil; {
		w, next := e.Value.(*waiter), e.Next()
		if now.Before(w.at) {
			old := w.at
			w.tok = n.lim.ReserveN(now, 1)
			w.at = now.Add(w.tok.DelayFrom(now))
			switch {
			case w.late(w.at):
				p.refuse(n, w, w.at, now) // the bucket's last turn
			case w.at.Before(old):
				w.tell()
			}
		}
		e = next
	}
}

// leave takes w out of n's queue before its turn. Its token stays taken in
// the bucket (x/time/rate gives a token back only when no later one is
// taken; given back last first, a chain of them stops at the first whose
// time is off by a rounding): its time is kept in n.abandoned, for the
// next bucket to give back, so that the Waits behind w move up in their
// order (they kept their turns, and the number its debt: after a pause,
// 200 queued Waits left and it sent nothing for as long again). When all
// the queued Waits leave (a hold, Close), the next Wait to queue makes
// that bucket, once; when w leaves alone (its context, its recipient's
// cool-down), it is made a moment later, once for the Waits that leave
// together (one context over many). A bucket per Wait was work in the
// square of the queue, under p.mu. p.mu is held.
func (p *Pacer) leave(n *number, w *waiter, all bool) {
	n.queue.Remove(w.elem)
	n.abandoned = append(n.abandoned, w.at)
	if all || n.rebuild {
		return
	}
	n.rebuild = true
	time.AfterFunc(leaveBatch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		n.rebuild = false
		if len(n.abandoned) > 0 {
			p.newBucket(n, float64(n.lim.Limit()))
		}
	})
}

// leaveBatch is how long after a Wait leaves its number's queue the
// number gets its new bucket.
const leaveBatch = time.Millisecond

func (p *Pacer) fallbackOn(n *number, why string) {
	if n.fallback {
		return
	}
	n.fallback = true
	if !n.used {
		return // a number of the bucket this service does not send from
	}
	p.stats.fallbacks.Add(1)
	tier := n.tier
	if tier <= 0 {
		tier = p.cfg.FallbackTierMPS
	}
	p.cfg.Logger.Warn("pacer: fallback rate", "phone_number_id", n.id, "reason", why,
		"mps", p.cfg.FallbackShare*tier*p.cfg.Share, "tier_mps", tier)
}

func (p *Pacer) fallbackOff(n *number) {
	if !n.fallback {
		return
	}
	n.fallback = false
	if n.used && n.sig != nil {
		p.cfg.Logger.Info("pacer: signal back, fallback rate off", "phone_number_id", n.id, "advice", string(n.sig.Advice), "recommended_mps", n.sig.RecommendedMPS)
	}
}

// wake wakes the Waits of the number n that wait for a change: the Waits
// of other numbers sleep on (a sender with many Waits queued over many
// numbers would otherwise wake them all at every signal of any). p.mu is
// held.
func (p *Pacer) wake(n *number) {
	close(n.changed)
	n.changed = make(chan struct{})
}

// wakeKey wakes the Waits of the number of the pair cool-down key (its
// part before the recipient's hash), if any. p.mu is held.
func (p *Pacer) wakeKey(key string) {
	if i := strings.LastIndexByte(key, '.'); i > 0 {
		if n := p.byKey[key[:i]]; n != nil {
			p.wake(n)
		}
	}
}

// onSignal applies a value of wahook_pacing (nil value: the key went).
func (p *Pacer) onSignal(key string, value []byte) {
	if value == nil {
		return // a deleted signal: the old one goes stale by itself
	}
	var s schema.PacingSignal
	if err := json.Unmarshal(value, &s); err != nil || s.PhoneNumberID == "" {
		p.cfg.Logger.Warn("pacer: a pacing signal that is not one", "key", key, "error", fmt.Sprint(err))
		return
	}
	p.stats.signals.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.number(s.PhoneNumberID)
	now := time.Now()
	// An older signal than the one held is a late write (another stage 2
	// during a handover) and is dropped, unless the one held is stamped
	// ahead of this clock by more than MaxSignalAge: wahook's clock was
	// ahead and has been set back, and every signal it writes from now on
	// would be dropped, a stop among them.
	if n.sig != nil && s.UpdatedAt.Before(n.sig.UpdatedAt) && !n.sig.UpdatedAt.After(now.Add(p.cfg.MaxSignalAge)) {
		return
	}
	n.sig, n.sigAt = &s, now
	if s.MaintenanceUntil != nil && s.MaintenanceUntil.After(n.maintEnd) {
		n.maintEnd, n.maintReason = *s.MaintenanceUntil, s.Reason
	}
	if s.TierMPS > 0 {
		n.tier = float64(s.TierMPS)
	}
	// The number's WABA as Meta's webhooks name it: a ban or restriction
	// of it stops the number without a send result that names it.
	if s.WabaID != "" {
		p.setWABA(n, s.WabaID, true)
	}
	p.refresh(n, now)
	p.wake(n)
}

// onAccount applies a value of wahook_accounts (nil: the key went) to the
// numbers of its WABA.
func (p *Pacer) onAccount(key string, value []byte) {
	var st *schema.AccountState
	if value != nil {
		st = new(schema.AccountState)
		if err := json.Unmarshal(value, st); err != nil || st.WabaID == "" || schema.AccountKey(st.WabaID) != key {
			p.cfg.Logger.Warn("pacer: a WABA state that is not one", "key", key, "error", fmt.Sprint(err))
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setAccount(key, st)
}

// accountsSynced forgets the WABAs' states whose keys a new watch of
// wahook_accounts did not give: they went with the bucket.
func (p *Pacer) accountsSynced(keys map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.accounts {
		if !keys[key] {
			p.setAccount(key, nil)
		}
	}
}

// setAccount holds st as the state of the WABA of key (nil: none) and
// gives it to the WABA's numbers, waking their Waits. p.mu is held.
func (p *Pacer) setAccount(key string, st *schema.AccountState) {
	if st == nil {
		delete(p.accounts, key)
	} else {
		p.accounts[key] = st
	}
	for waba, ns := range p.byWaba {
		if schema.AccountKey(waba) != key {
			continue
		}
		for n := range ns {
			n.acct = st
			p.wake(n)
		}
	}
}

// onCooldown applies a value of wahook_pair_cooldown (nil: the key went).
func (p *Pacer) onCooldown(key string, value []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if value == nil {
		delete(p.cooldowns, key)
		p.wakeKey(key)
		return
	}
	var c schema.PairCooldown
	if err := json.Unmarshal(value, &c); err != nil {
		return
	}
	p.stats.cooldowns.Add(1)
	if c.Until.After(time.Now()) {
		p.cooldowns[key] = c.Until
	} else {
		delete(p.cooldowns, key)
	}
	p.wakeKey(key)
}

// watch follows a bucket's keys, waiting for the bucket to exist, and
// starting again after an error (with a backoff, logged at most once a
// minute) or at once after NATS reconnects: the client's own watch may take
// many seconds to notice that the server it read from went away, and a stop
// written meanwhile would be missed. synced, if not nil, is given the keys
// of each new watch's first values once they are in: what is held of
// other keys went with a bucket deleted or made again.
func (p *Pacer) watch(ctx context.Context, bucket string, apply func(key string, value []byte), synced func(keys map[string]bool), loaded chan struct{}) {
	const minBackoff = 250 * time.Millisecond
	backoff := minBackoff
	var failLog every
	failing := false
	var goneSince time.Time // of the tries in a row that found no bucket
	forgot := false
	for ctx.Err() == nil {
		live, err := p.watchOnce(ctx, bucket, apply, synced, loaded)
		if ctx.Err() != nil {
			return
		}
		// A bucket gone holds nothing: once it has not been found for
		// bucketGoneFor (not for a server that answers so for a moment
		// while it restarts or its leader moves), what was held of it
		// goes.
		switch {
		case !errors.Is(err, jetstream.ErrBucketNotFound):
			goneSince, forgot = time.Time{}, false
		case goneSince.IsZero():
			goneSince = time.Now()
		case !forgot && time.Since(goneSince) >= bucketGoneFor && synced != nil:
			synced(map[string]bool{})
			forgot = true
		}
		if live {
			backoff = minBackoff
			if failing {
				failing = false
				p.cfg.Logger.Info("pacer: watching " + bucket + " again")
			}
		}
		if errors.Is(err, errReconnected) {
			continue
		}
		if errors.Is(err, errRecreated) {
			p.cfg.Logger.Info("pacer: " + bucket + " was deleted or made again; watching it anew")
			continue
		}
		failing = true
		if failLog.due(time.Minute) {
			effect := "numbers fall back once their signals are stale"
			if bucket == schema.BucketAccounts {
				effect = "WABA bans and restrictions are not applied (wahook before 2026-12 has no such bucket)"
			}
			p.cfg.Logger.Warn("pacer: cannot watch "+bucket+"; "+effect, "error", fmt.Sprint(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// closeOnce closes ch unless it is closed. Only the watch's goroutine
// closes it.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// bucketGoneFor is how long a bucket must be not found before what was
// held of it goes.
const bucketGoneFor = 2 * time.Second

// errReconnected ends a watch when NATS reconnects.
var errReconnected = errors.New("nats reconnected")

// errRecreated ends a watch whose bucket was deleted or made again.
var errRecreated = errors.New("the bucket was deleted or made again")

// bucketCreated is when the bucket's stream was made (zero when the server
// does not say): a bucket deleted and made again has a new time. (The
// pacer brings only schema with it, so not internal/kvbucket's.)
func bucketCreated(ctx context.Context, kv jetstream.KeyValue) (time.Time, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().Created, nil
	}
	return time.Time{}, nil
}

// bucketCheck is how often a watch checks that its bucket is the one it
// watches (a variable for tests).
var bucketCheck = 30 * time.Second

// watchOnce watches the bucket until an error, ctx's end, a reconnect, or
// the bucket deleted or made again (checked every bucketCheck: the watch
// itself does not end then, and would see nothing of the new bucket). live
// is whether the watch delivered the bucket's values.
func (p *Pacer) watchOnce(ctx context.Context, bucket string, apply func(string, []byte), synced func(map[string]bool), loaded chan struct{}) (live bool, err error) {
	reconnected := p.js.Conn().StatusChanged(nats.CONNECTED)
	defer p.js.Conn().RemoveStatusListener(reconnected)
	kv, err := p.js.KeyValue(ctx, bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			closeOnce(loaded) // no value written yet: nothing to wait for
		}
		return false, err
	}
	created, err := bucketCreated(ctx, kv)
	if err != nil {
		return false, err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		// nats.go waits, in the subscription's goroutine, for room in
		// the watch's channel: read until it ends, or a watch stopped
		// during a large bucket's load leaves it blocked for good.
		_ = w.Stop()
		go func() {
			for range w.Updates() { //nolint:revive // drained until nats.go closes it
			}
		}()
	}()
	check := time.NewTicker(bucketCheck)
	defer check.Stop()
	var first map[string]bool // the keys of the first values, until they are in
	if synced != nil {
		first = map[string]bool{}
	}
	for {
		select {
		case <-ctx.Done():
			return live, ctx.Err()
		case <-reconnected:
			return live, errReconnected
		case <-check.C:
			if now, err := bucketCreated(ctx, kv); errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
				(err == nil && !now.Equal(created)) {
				return live, errRecreated
			}
		case e, ok := <-w.Updates():
			if !ok {
				return live, errors.New("watcher closed")
			}
			if e == nil {
				if first != nil {
					synced(first)
					first = nil
				}
				live = true
				closeOnce(loaded)
				continue // the initial values are in
			}
			if first != nil {
				first[e.Key()] = true
			}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				apply(e.Key(), e.Value())
			default:
				apply(e.Key(), nil)
			}
		}
	}
}

// prune forgets pairs whose bucket is full again and cool-downs that ended.
func (p *Pacer) prune(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			idle := time.Duration(max(p.cfg.PairBurst, 1)) * p.cfg.PairInterval
			p.mu.Lock()
			for k, pr := range p.pairs {
				// Kept while its strikes still count (the cool-down's end
				// and its wait once more, as stage 2 keeps them).
				kept := pr.coolUntil
				if pr.strikes > 0 {
					kept = kept.Add(schema.PairCooldownWait(pr.strikes))
				}
				if now.Sub(pr.last) > idle && now.After(kept) {
					delete(p.pairs, k)
				}
			}
			for k, until := range p.cooldowns {
				if now.After(until) {
					delete(p.cooldowns, k)
				}
			}
			p.mu.Unlock()
		}
	}
}

package pacer

import (
	crand "crypto/rand"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/wahook/wahook/schema"
)

// Action is what to do with a message after a send.
type Action string

// The actions.
const (
	ActionDone         Action = "done"          // accepted: nothing more to do
	ActionRetry        Action = "retry"         // send it again after Decision.After (Wait paces it again)
	ActionDrop         Action = "drop"          // a problem of this message or recipient: never resend it
	ActionStopNumber   Action = "stop_number"   // stop sending from this number (Wait answers ErrStopped); do not resend
	ActionStopCampaign Action = "stop_campaign" // stop the campaign on every number: its template, token or account is wrong
)

// Decision is Outcome's answer.
type Decision struct {
	Action  Action
	Retry   bool          // Action == ActionRetry
	After   time.Duration // wait at least this long before the retry
	Code    int32
	Class   schema.ErrorClass
	Verdict schema.Verdict
	Reason  string
}

// Result is one send's result as Outcome takes it: wahook's send result and
// which send of the message it was.
type Result struct {
	schema.SendResult
	// Attempt is the number of this send of the message (1 for the first);
	// the backoff of retryable service errors grows with it.
	Attempt int
}

var requestSeq atomic.Uint64

// requestPrefix starts the request ids the pacer gives results without
// one: random per process, so that the ids of two processes (replicas
// sharing numbers) never meet, and two identical failures of theirs in
// one second count twice, as within one process.
var requestPrefix = func() string {
	var b [6]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	return "pacer-" + hex.EncodeToString(b[:]) + "-"
}()

// Outcome reports r to wahook (queued and batched; it never blocks on
// wahook) and returns what to do next, by wahook's error catalogue:
//
//   - accepted: done;
//   - throughput (130429, 4, 80007): retry at once through Wait, and the
//     number's rate is halved until wahook's signal has the error; after
//     80007 (the WABA's limit) also the rates of the pacer's other numbers
//     of the same WABA (the waba_id of their results), and after 4 (the
//     app's limit) those of all the numbers it was asked about, each until
//     a signal of its own has a throughput error in this one's second or
//     later, or 10 s;
//   - pair rate (131056): retry that recipient after max(6 s, 4^X s), X the
//     131056 in a row for the pair before this one; other recipients go on;
//   - maintenance (131057): the number pauses for a minute (or until the
//     signal's maintenance_until), then retry;
//   - stop verdicts (131048, 131064, policy, a number that cannot send:
//     33, 133010, ...): stop the number, never retry;
//     auth and payment errors, and a template that is missing, paused or
//     wrong: stop the campaign;
//   - a country the account may not message (130497, verdict
//     skip_country): drop; the caller skips the country's other recipients;
//   - undeliverable, engagement and the other errors of one message: drop;
//   - a flow throttled (132069: ten messages of the flow in the last
//     hour): retry after an hour (to 72 minutes), when the flow's hour has
//     passed, dropped after MaxAttempts;
//   - retryable errors (service, 134101, ...): retry with a backoff of 1 s
//     doubling with the attempt (to 60 s), dropped after MaxAttempts.
//
// A result without a timestamp gets now; without a request id one of the
// pacer's (unique to the process), so that two identical failures in one
// second count twice;
// without a status, failed if it has an error code, accepted if it has a
// message id. A result with none of the three is a send whose answer was
// lost: it is retried like a service error and not reported. A result
// wahook would refuse (schema.SendResult.Check) is not reported either,
// and counted (Stats.ReportInvalid); its decision is made all the same.
func (p *Pacer) Outcome(r Result) Decision {
	now := outcomeNow()
	res := r.SendResult
	if res.Timestamp.IsZero() {
		res.Timestamp = schema.Timestamp{Time: now.UTC()}
	}
	if res.RequestID == "" {
		res.RequestID = requestPrefix + strconv.FormatUint(requestSeq.Add(1), 36)
	}
	p.learnWABA(res.PhoneNumberID, res.WabaID)
	if res.Status == "" {
		switch {
		case res.ErrorCode != 0:
			res.Status = schema.SendFailed
		case res.MessageID != "":
			res.Status = schema.SendAccepted
		default:
			// Neither a wamid nor Meta's error: the send's answer was lost
			// (a timeout, a broken connection). Nothing to report; the
			// message may not have gone, so it is retried as a service
			// error is.
			p.stats.unanswered.Add(1)
			d := Decision{Reason: "no answer from the send API: neither a message_id nor an error_code"}
			if attempt := max(r.Attempt, 1); attempt < p.cfg.MaxAttempts {
				d.Action, d.Retry, d.After = ActionRetry, true, retryBackoff(attempt)
			} else {
				d.Action = ActionDrop
			}
			return d
		}
	}
	if p.rep != nil {
		// A result wahook would refuse is not queued: it would be dropped
		// there, after holding up the reports of the others.
		if err := res.Check(); err != nil {
			p.rep.refusedHere(err)
		} else {
			p.rep.add(res)
		}
	}
	if res.Status == schema.SendAccepted {
		return Decision{Action: ActionDone}
	}
	e, _ := schema.LookupError(res.ErrorCode)
	d := Decision{Code: e.Code, Class: e.Class, Verdict: e.Verdict, Reason: e.Title}
	if d.Reason == "" {
		d.Reason = "unknown error code " + strconv.Itoa(int(e.Code))
	}
	attempt := max(r.Attempt, 1)
	switch e.Verdict {
	case schema.VerdictSlowDown:
		d.Action = ActionRetry
		p.throttled(e.Code, res.PhoneNumberID, now, res.Timestamp.Time)
	case schema.VerdictWaitRecipient:
		d.Action = ActionRetry
		d.After = p.pairStrike(res.PhoneNumberID, res.Recipient, now)
	case schema.VerdictPause:
		d.Action = ActionRetry
		d.After = p.paused(res.PhoneNumberID, now)
	case schema.VerdictStop:
		switch e.Class {
		case schema.ClassAuth, schema.ClassPayment:
			d.Action = ActionStopCampaign
		default:
			d.Action = ActionStopNumber
		}
		p.stopped(res.PhoneNumberID, now, strconv.Itoa(int(e.Code))+": "+d.Reason)
	default:
		switch {
		case e.Code == flowThrottled && attempt < p.cfg.MaxAttempts:
			// A backoff of seconds met the same error MaxAttempts times
			// within a minute, and dropped a message that an hour later
			// goes. Spread over the 20% after the hour, so that a
			// campaign's throttled messages do not all come back in the
			// same second; not before it, when the flow's ten sends of
			// the hour may still count.
			d.Action = ActionRetry
			d.After = time.Duration(float64(flowThrottleWait) * (1 + 0.2*rand.Float64()))
		case e.Retryable && attempt < p.cfg.MaxAttempts:
			d.Action = ActionRetry
			d.After = retryBackoff(attempt)
		case e.Class == schema.ClassTemplate && !e.Retryable:
			d.Action = ActionStopCampaign
		default:
			d.Action = ActionDrop
		}
	}
	d.Retry = d.Action == ActionRetry
	return d
}

// flowThrottled is Meta's "Flow throttled": ten messages with this flow
// were sent in the last hour; flowThrottleWait is the wait Meta asks for.
const (
	flowThrottled    = 132069
	flowThrottleWait = time.Hour
)

// retryBackoff is the wait before the next send of a message whose
// attempt-th send met a retryable service error: 1 s doubling with the
// attempt, to 60 s, ±20%.
func retryBackoff(attempt int) time.Duration {
	back := time.Duration(math.Min(60, math.Pow(2, float64(attempt-1))) * float64(time.Second))
	return time.Duration(float64(back) * (0.8 + 0.4*rand.Float64()))
}

// The throughput errors whose limit is wider than the number's: Meta's
// limits on the Graph API calls of a WABA (80007) and of an app (4).
const (
	wabaRateLimit = 80007
	appRateLimit  = 4
)

// throttled halves the rate of the number id after a throughput error
// (code) until a signal that has it comes (throttleSeen: stage 2 then slows
// the number itself) or throttleHold. A WABA's limit (80007) halves those of
// the pacer's other numbers of the number's WABA too (learnWABA), and an
// app's (4) those of all the numbers it was asked to pace (Wait, Rate):
// their sends count against the same limit, and the signals of the others
// will not have the error, so theirs hold until one of their own has a
// throughput error in this one's second or later, or throttleHold.
func (p *Pacer) throttled(code int32, id string, now, errAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.number(id)
	p.throttle(n, now, errAt)
	// The others once a second at most: the errors of one burst come
	// together, from many numbers.
	switch code {
	case wabaRateLimit:
		if n.waba == "" || now.Sub(p.fanAt["waba:"+n.waba]) < time.Second {
			return
		}
		p.fanAt["waba:"+n.waba] = now
		for o := range p.byWaba[n.waba] {
			if o != n {
				p.throttle(o, now, errAt)
			}
		}
	case appRateLimit:
		if now.Sub(p.fanAt["app"]) < time.Second {
			return
		}
		p.fanAt["app"] = now
		for _, o := range p.numbers {
			// The numbers this service sends from: the pacer knows every
			// number whose signal it watches.
			if o != n && o.used {
				p.throttle(o, now, errAt)
			}
		}
	}
}

// throttle halves n's rate, once a second at most. p.mu is held.
func (p *Pacer) throttle(n *number, now, errAt time.Time) {
	cur := float64(n.lim.Limit())
	if n.throttle > 0 && now.Sub(n.thrSince) < time.Second {
		return // one halving per second: the errors of one burst come together
	}
	n.throttle = max(cur/2, p.cfg.Share) // the floor of 1 mps, of this pacer's share
	n.thrSince, n.thrUntil, n.thrErrAt = now, now.Add(throttleHold), errAt
	p.refresh(n, now)
	// Its end reaches the Waits queued at the halved rate even when no
	// signal, Wait or Rate comes to refresh the number.
	if n.thrTimer != nil {
		n.thrTimer.Stop()
	}
	n.thrTimer = time.AfterFunc(throttleHold+time.Millisecond, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.closed.Load() {
			p.refresh(n, time.Now())
		}
	})
}

// learnWABA records the WABA of the number id that its send result names,
// for the numbers a WABA's limit (80007) slows together and its ban stops,
// unless the number's signal has named one: Meta's word, where the
// result's is the sender's (a sender's configuration that still names the
// WABA Meta moved the number from would move it back at every result).
// Only a change takes p.mu.
func (p *Pacer) learnWABA(id, waba string) {
	if waba == "" || id == "" || len(waba) > schema.MaxSubjectToken {
		return // none, or none of Meta's (longer than 64 bytes)
	}
	if v, ok := p.wabaOf.Load(id); ok && (v.(wabaSeen).waba == waba || v.(wabaSeen).signal) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setWABA(p.number(id), waba, false)
}

// wabaSeen is a value of Pacer.wabaOf: a number's WABA, and whether its
// signal named it.
type wabaSeen struct {
	waba   string
	signal bool
}

// setWABA records waba as the number's WABA, named by its signal or by a
// send result (which does not replace the signal's). p.mu is held.
func (p *Pacer) setWABA(n *number, waba string, signal bool) {
	if n.wabaSignal && !signal {
		return
	}
	if n.waba == waba {
		if signal && !n.wabaSignal {
			n.wabaSignal = true
			p.wabaOf.Store(n.id, wabaSeen{waba, true})
		}
		return
	}
	if old := p.byWaba[n.waba]; old != nil {
		delete(old, n)
		if len(old) == 0 {
			delete(p.byWaba, n.waba)
		}
	}
	n.waba, n.acct = waba, p.accounts[schema.AccountKey(waba)]
	if n.acct != nil {
		p.wake(n) // its Waits see the WABA's ban or restriction now
	}
	set := p.byWaba[waba]
	if set == nil {
		set = map[*number]struct{}{}
		p.byWaba[waba] = set
	}
	set[n] = struct{}{}
	n.wabaSignal = signal
	p.wabaOf.Store(n.id, wabaSeen{waba, signal})
}

// outcomeNow is Outcome's clock (a variable for tests).
var outcomeNow = time.Now

// throttleHold is how long a reported 130429 halves the rate at most (a
// variable for tests).
var throttleHold = 10 * time.Second

// pairStrike records a 131056 for the pair and returns its wait.
func (p *Pacer) pairStrike(id, recipient string, now time.Time) time.Duration {
	if recipient == "" {
		return PairInterval
	}
	key := schema.PairCooldownKey(id, p.hash(recipient))
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.pair(key)
	pr.last = now
	// The next strike in a row while the last cool-down is kept (until
	// its end and its wait once more), as stage 2 counts them
	// (schema.PairCooldown.Kept).
	strikes := 1
	if pr.strikes > 0 && now.Before(pr.coolUntil.Add(schema.PairCooldownWait(pr.strikes))) {
		strikes = min(pr.strikes+1, schema.MaxPairStrikes)
	}
	pr.strikes = strikes
	wait := schema.PairCooldownWait(strikes)
	until := now.Add(wait)
	if until.After(pr.coolUntil) {
		pr.coolUntil = until
	}
	p.wake(p.number(id))
	return pr.coolUntil.Sub(now)
}

// paused pauses the number after a 131057 and returns the wait.
func (p *Pacer) paused(id string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.number(id)
	until := now.Add(maintenanceHold)
	if s := n.sig; s != nil && s.MaintenanceUntil != nil && s.MaintenanceUntil.Add(p.cfg.MaintenanceMargin).After(now) {
		until = s.MaintenanceUntil.Add(p.cfg.MaintenanceMargin)
	}
	if until.After(n.pauseUntil) {
		n.pauseUntil = until
	}
	p.wake(n)
	return n.pauseUntil.Sub(now)
}

// stopped stops the number for 15 minutes after a stop verdict.
func (p *Pacer) stopped(id string, now time.Time, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.number(id)
	if until := now.Add(stopHold); until.After(n.stopUntil) {
		n.stopUntil, n.stopReason = until, reason
	}
	p.wake(n)
}

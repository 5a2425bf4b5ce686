package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// The BatchPublisher's own goroutines (ending idle batches, answering
// expired messages, following the connection) and its shutdown.

// lingerLoop ends the current batch when no message followed between two
// checks, so that its PubAck covers the messages no flow ack did (and the
// stream forgets the batch), or when its oldest message waiting for an ack
// was sent MaxDelay ago or more. The first check comes Linger after a
// message; under steady traffic the checks space out so that the oldest
// uncovered message waits MaxDelay at most, which spares a wake-up every
// Linger.
func (p *BatchPublisher) lingerLoop() {
	defer p.stopped.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	sweep := time.NewTicker(time.Second)
	defer sweep.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-sweep.C:
			p.sweep()
			continue
		case <-p.kick:
		}
		wait := p.opts.Linger
		for {
			p.mu.Lock()
			b, sends := p.cur, p.sends
			p.mu.Unlock()
			if b == nil {
				break
			}
			t.Reset(wait)
			select {
			case <-p.stop:
				t.Stop()
				return
			case <-t.C:
			}
			p.mu.Lock()
			if p.cur == b {
				age := b.oldestWait()
				if p.sends == sends || age >= p.opts.MaxDelay {
					p.endLocked(b)
				} else {
					wait = max(p.opts.MaxDelay-age, p.opts.Linger)
				}
			}
			p.mu.Unlock()
		}
	}
}

// expireResolution is how late past its deadline a message is answered
// ErrAckTimeout at most.
const expireResolution = 5 * time.Millisecond

// expireLoop answers ErrAckTimeout for the messages whose deadline passed.
// One ticker serves every request, instead of a timer for each. It stops
// while no publish waits, until the next one begins (expireWake): idle, its
// 200 wake-ups a second were four fifths of serve's CPU.
func (p *BatchPublisher) expireLoop() {
	defer p.stopped.Done()
	t := time.NewTicker(expireResolution)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			if p.inflight.Load() > 0 {
				p.expire(now)
				continue
			}
			// A publish that begins from here on finds inflight at 0 and
			// leaves a token in expireWake, which ends this wait at once.
			t.Stop()
			select {
			case <-p.stop:
				return
			case <-p.expireWake:
			}
			t.Reset(expireResolution)
		}
	}
}

// expire answers ErrAckTimeout for the messages whose deadline is before
// now. An ack that never came means the batch is in trouble: if it is the
// current one, new messages start another. The message may still be stored;
// its request gets 503 and Meta's retry is a duplicate.
func (p *BatchPublisher) expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		for _, pd := range b.waiting {
			if pd != nil && pd.b == b && !pd.resolved && !now.Before(pd.deadline) {
				pd.resolve(false, ErrAckTimeout)
				if p.cur == b {
					p.endLocked(b)
				}
			}
		}
	}
}

// sweep forgets ended batches whose messages all have their answer: their
// waiters gave up, and no ack will come.
func (p *BatchPublisher) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for id, b := range p.batches {
		if !b.ending || now.Sub(b.lastSend) < 2*p.ackTimeout {
			continue
		}
		live := false
		for _, pd := range b.waiting {
			if pd != nil && pd.b == b && !pd.resolved {
				live = true
				break
			}
		}
		if !live {
			delete(p.batches, id)
		}
	}
}

// statusLoop follows the connection (connectionChanged).
func (p *BatchPublisher) statusLoop() {
	defer p.stopped.Done()
	for {
		select {
		case <-p.stop:
			return
		case s, ok := <-p.status:
			if !ok {
				return
			}
			p.connectionChanged(s)
		}
	}
}

// connectionChanged ends the current batch when the connection drops:
// messages sent just before may be lost, so new ones start a new batch, and
// once the connection is back the ended batch's commit tells what was
// stored. A connection that reconnects reports RECONNECTING, not
// DISCONNECTED (nats.go reports DISCONNECTED only when it will not retry).
func (p *BatchPublisher) connectionChanged(s nats.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case nats.DISCONNECTED, nats.RECONNECTING:
		if b := p.cur; b != nil {
			p.endLocked(b)
		}
	case nats.CONNECTED:
		// Commits sent while disconnected were lost; ask again.
		for _, b := range p.batches {
			if b.ending && b.sent > 0 {
				p.commitLocked(b)
			}
		}
	}
}

// Drain waits until every message awaiting an ack is answered or ctx ends.
func (p *BatchPublisher) Drain(ctx context.Context) error {
	for p.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain publishes: %d still pending: %w", p.inflight.Load(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Close stops the publisher: publishes fail with ErrClosed, and so do the
// messages still awaiting an ack (their bodies may be stored; Meta's retry
// is then a duplicate). Call Drain first.
func (p *BatchPublisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if b := p.cur; b != nil {
		p.endLocked(b)
	}
	p.mu.Unlock()
	close(p.stop)
	p.stopped.Wait()
	p.nc.RemoveStatusListener(p.status)
	_ = p.sub.Unsubscribe()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, b := range p.batches {
		for _, pd := range b.waiting {
			if pd != nil && pd.b == b {
				pd.resolve(false, ErrClosed)
			}
		}
		delete(p.batches, id)
	}
}

package pacer

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

// SetHeld sets how often and how long results wahook refuses for now are
// tried again, for the test.
func SetHeld(t *testing.T, retry, upTo time.Duration) {
	r, f := heldRetry, heldFor
	heldRetry, heldFor = retry, upTo
	t.Cleanup(func() { heldRetry, heldFor = r, f })
}

// SetThrottleHold sets how long a reported 130429 halves the rate, for the
// test.
func SetThrottleHold(t *testing.T, d time.Duration) {
	old := throttleHold
	throttleHold = d
	t.Cleanup(func() { throttleHold = old })
}

// SetOutcomeClock makes Outcome read its time from now, for the test.
func SetOutcomeClock(t *testing.T, now func() time.Time) {
	old := outcomeNow
	outcomeNow = now
	t.Cleanup(func() { outcomeNow = old })
}

// Wakeups is how many times Waits were woken by a change, in all pacers.
func Wakeups() int64 { return wakeups.Load() }

// Blocked is how many of p's Waits are blocked now: for a token, a hold
// or a cool-down.
func Blocked(p *Pacer) int64 { return p.blocked.Load() }

// ApplySignal applies s as if read from wahook_pacing, for the test.
func (p *Pacer) ApplySignal(s schema.PacingSignal) {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	p.onSignal(schema.PacingKey(s.PhoneNumberID), b)
}

// QueuedTurns is how far off the turns of the Waits queued on the number
// id are, in their order.
func QueuedTurns(p *Pacer, id string) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.numbers[id]
	if n == nil {
		return nil
	}
	var out []time.Duration
	now := time.Now()
	for e := n.queue.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*waiter).at.Sub(now))
	}
	return out
}

// Buckets is how many buckets p has made for its numbers since New (a new
// rate, a Wait leaving the queue).
func Buckets(p *Pacer) int64 { return p.buckets.Load() }

// SetBucketCheck sets how often a watch checks that its bucket was not
// made again, for the test.
func SetBucketCheck(t *testing.T, d time.Duration) {
	old := bucketCheck
	bucketCheck = d
	t.Cleanup(func() { bucketCheck = old })
}

// WABAOf is the WABA the pacer holds for the number, for the test.
func WABAOf(p *Pacer, id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.numbers[id]; n != nil {
		return n.waba
	}
	return ""
}

// CoolAsTokenComes holds the pacer's lock for hold, past the time of the
// token of the Wait queued for the number, and then applies wahook's
// cool-down of recipient until until, as onCooldown does: the Wait wakes
// to both at once.
func CoolAsTokenComes(p *Pacer, id, recipient string, hold time.Duration, until time.Time) {
	key := schema.PairCooldownKey(id, p.hash(recipient))
	p.mu.Lock()
	defer p.mu.Unlock()
	time.Sleep(hold)
	p.cooldowns[key] = until
	p.wakeKey(key)
}

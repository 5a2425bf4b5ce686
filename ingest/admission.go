package ingest

import (
	"sync/atomic"
	"time"

	"github.com/wahook/wahook/internal/throttle"
)

// admission sheds load at the door, before a body is published. Past
// capacity, requests used to wait for an in-flight slot up to the ack
// timeout, got one late, and had their body stored after their 503: Meta
// then retried and the store did the work twice, and the 200s fell to half
// of capacity. Now a request waits for a slot QueueWait at most, and is
// published only when the acks of the moment (their moving average) can
// still come before its deadline; otherwise it is answered 503 at once,
// with nothing published (ErrOverloaded).
type admission struct {
	queueWait time.Duration     // 0: wait for a slot until the deadline
	ackNanos  atomic.Int64      // moving average of the time to an ack
	probes    throttle.Throttle // one shed request an interval goes through
}

// shedPast has a shed the requests that would wait past d for a slot, and
// those whose ack the average expects after their deadline, but for one
// probe every probeEvery; with d 0 it sheds none.
func (a *admission) shedPast(d time.Duration) {
	a.queueWait, a.probes.Every = d, probeEvery
}

// probeEvery is how often at most a request that the average would shed is
// published all the same, as a probe. The average moves only with acks, and
// a shed request brings none: without probes, acks that were slow for a
// moment (a JetStream leader election, a node's restart) could leave the
// average above half the ack timeout, and every later request would be shed,
// for good, however fast the stream had become again.
const probeEvery = 50 * time.Millisecond

// slotWait is how long a request whose deadline is wait away may wait for
// a slot, and whether that is cut short by QueueWait.
func (a *admission) slotWait(wait time.Duration) (time.Duration, bool) {
	if a.queueWait > 0 && a.queueWait < wait {
		return a.queueWait, true
	}
	return wait, false
}

// late reports whether an ack is not expected before deadline: the time
// left is less than twice the average time to an ack. Once every
// probeEvery, it lets one such request through (a probe), whose ack moves
// the average.
func (a *admission) late(deadline time.Time) bool {
	if a.queueWait <= 0 {
		return false
	}
	if time.Until(deadline) >= 2*time.Duration(a.ackNanos.Load()) {
		return false
	}
	_, probe := a.probes.Note()
	return !probe
}

// observe folds the time one publish took to its ack into the average
// (weight 1/16).
func (a *admission) observe(d time.Duration) {
	for {
		old := a.ackNanos.Load()
		next := old + (int64(d)-old)/16
		if old == 0 {
			next = int64(d)
		}
		if a.ackNanos.CompareAndSwap(old, next) {
			return
		}
	}
}

// Package throttle lets one occurrence through an interval and counts the
// others: a warning that every request or message of an outage would repeat
// becomes one line an interval with the count since the last (the metrics
// count every one), and ingest's admission lets one shed request through
// an interval as a probe.
package throttle

import (
	"sync/atomic"
	"time"
)

// Throttle lets an occurrence through at most once every Every. The zero
// value with Every set is ready; it is safe for concurrent use.
type Throttle struct {
	Every time.Duration
	at    atomic.Int64 // when the last one went through (monoNanos)
	count atomic.Int64 // occurrences since the last one that went through
}

// Note counts one occurrence and reports whether it goes through, with the
// occurrences since the last that did (this one included). The first
// occurrence always goes through.
func (l *Throttle) Note() (int64, bool) {
	l.count.Add(1)
	now, last := monoNanos(), l.at.Load()
	if now-last < int64(l.Every) || !l.at.CompareAndSwap(last, now) {
		return 0, false
	}
	return l.count.Swap(0), true
}

// epoch is a day before the process started, on the monotonic clock.
var epoch = time.Now().Add(-24 * time.Hour)

// monoNanos is a time in nanoseconds on the monotonic clock, which a step of
// the wall clock (NTP) does not move. It is more than a day from 0, so that
// a zero value reads as long ago.
func monoNanos() int64 { return int64(time.Since(epoch)) }

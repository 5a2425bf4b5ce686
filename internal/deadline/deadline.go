// Package deadline keeps one context with a deadline across the many waits
// of a read loop. A loop that waits for its next message until some time
// (a batch's flush, a write due) would otherwise make a context, and with
// it a timer, for every message it reads; most of those deadlines are the
// same one, moved by nothing but the clock.
package deadline

import (
	"context"
	"time"
)

// Deadline hands out contexts that end no later than asked. The zero value
// is ready; it is not safe for concurrent use, and every call of By must
// pass the same parent.
type Deadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

// By returns a context that ends at at, or earlier: when parent ends, or
// at the deadline it was made with. The context it returned last is
// returned again while it has not ended and its deadline is not after at;
// otherwise a new one, ending at at, replaces it. A loop that waits with it
// may so wake before at (at most once per context), and then looks again.
func (d *Deadline) By(parent context.Context, at time.Time) context.Context {
	if d.ctx != nil && !d.at.After(at) && d.ctx.Err() == nil {
		return d.ctx
	}
	d.Stop()
	d.ctx, d.cancel = context.WithDeadline(parent, at)
	d.at = at
	return d.ctx
}

// Stop releases the last context (ending it).
func (d *Deadline) Stop() {
	if d.cancel != nil {
		d.cancel()
	}
	d.ctx, d.cancel = nil, nil
}

package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/wahook/wahook/schema"
)

// PacingCheckConfig configures CheckPacing.
type PacingCheckConfig struct {
	// Timeout bounds the wait for the service to apply every event.
	Timeout time.Duration
	// Backlog reports what the service has not applied yet: stage 1's
	// backlog on RAW plus stage 2's on EVENTS.
	Backlog func(context.Context) (uint64, error)
	// Signal reads a number's pacing signal (KV wahook_pacing).
	Signal func(ctx context.Context, phoneNumberID string) (schema.PacingSignal, error)
	// Now is the clock that tells a signal written after the drain;
	// time.Now if nil.
	Now func() time.Time
}

// PacingResult is the pacing signal of each number compared with the
// ledger.
type PacingResult struct {
	// Numbers is the numbers with traffic; Exact those whose signal's
	// rates (1, 10 and 60 s, inbound and outbound) equal the ledger's.
	Numbers     int      `json:"numbers"`
	Exact       int      `json:"exact"`
	Differences []string `json:"differences,omitempty"`
	// PostedUnacked is the events posted without ever getting a 200: the
	// service may have stored and counted them, the ledger does not. With
	// any, a difference is not necessarily the service's.
	PostedUnacked uint64  `json:"posted_without_200"`
	WaitS         float64 `json:"wait_s"`
	// Inconclusive says why the signals, though equal to the ledger's
	// count, checked nothing: no number had traffic, or the drain ended
	// so late that the signals' 60 s windows hold none of the run.
	Inconclusive string `json:"inconclusive,omitempty"`
	// Partial says which rates held none of the run and so compared
	// nothing (the drain ended more than 10 s after the run's last event,
	// on a busy machine): the 60 s rates still did.
	Partial string `json:"partial,omitempty"`
}

// OK reports whether every number's signal matched, and the match checked
// something.
func (r *PacingResult) OK() bool { return r.Inconclusive == "" && r.Exact == r.Numbers }

// CheckPacing waits until the service has applied every event, then reads
// each number's next signal and compares its observed rates with what the
// ledger says of the same seconds (Ledger.Observed): exactly, since both
// count whole messages. It must run within a minute of the run's end,
// while stage 2 still rewrites the signals of numbers whose rates decay.
func CheckPacing(ctx context.Context, l *Ledger, cfg PacingCheckConfig) (*PacingResult, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for {
		n, err := cfg.Backlog(ctx)
		if err == nil && n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the service did not apply every event within %v (backlog %d, %v)", cfg.Timeout, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	drained := now()
	r := &PacingResult{PostedUnacked: l.unacked()}
	totals := l.Totals()
	for i, num := range l.Numbers() {
		if totals.PerNumber[i] == 0 {
			continue
		}
		r.Numbers++
		// A signal written after the drain counts every event.
		var sig schema.PacingSignal
		var err error
		for {
			if sig, err = cfg.Signal(ctx, num.PhoneNumberID); err == nil && sig.UpdatedAt.After(drained) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no signal of %s written after the drain (last %v, %v)", num.PhoneNumberID, sig.UpdatedAt, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		last := schema.PacingLastSecond(sig.UpdatedAt)
		switch end, lastEvent := time.Unix(last, 0).UTC().Format(time.RFC3339), time.Unix(totals.LastSecond, 0).UTC().Format(time.RFC3339); {
		case last-59 > totals.LastSecond && r.Inconclusive == "":
			r.Inconclusive = fmt.Sprintf("the signals' windows end at %s, more than 60 s after the run's last event (%s): their rates hold none of it; the service drained too late to check",
				end, lastEvent)
		case last-9 > totals.LastSecond && r.Partial == "":
			// The 60 s rates still hold the run's last minute, on both
			// sides: compared exactly all the same.
			r.Partial = fmt.Sprintf("the signals' windows end at %s, more than 10 s after the run's last event (%s): their 1 s and 10 s rates hold none of it, the 60 s rates were compared",
				end, lastEvent)
		}
		if want := l.Observed(i, last); sig.Observed != want {
			r.Differences = append(r.Differences, fmt.Sprintf("%s, windows ending %s: got %+v, want %+v",
				num.PhoneNumberID, time.Unix(last, 0).UTC().Format(time.RFC3339), sig.Observed, want))
			continue
		}
		r.Exact++
	}
	if r.Numbers == 0 {
		r.Inconclusive = "no number had an event answered 200"
	}
	r.WaitS = time.Since(start).Seconds()
	return r, nil
}

// unacked counts the events posted that never got a 200.
func (l *Ledger) unacked() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for _, row := range l.out {
		for _, v := range row {
			for s := 0; s < numStatuses; s++ {
				if v&(1<<(s+4)) != 0 && v&(1<<s) == 0 {
					n++
				}
			}
		}
	}
	for _, s := range [][][]uint8{l.in, l.echo} {
		for _, row := range s {
			for _, v := range row {
				if v&2 != 0 && v&1 == 0 {
					n++
				}
			}
		}
	}
	return n
}

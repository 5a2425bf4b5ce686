package testutil

import (
	"testing"
	"time"
)

// The polling interval starts short, so that a condition that holds at
// once costs a millisecond, and grows to a ceiling, so that a slow one
// (a ClickHouse query, a process's /metrics) is not asked hundreds of
// times a second on a machine shared with other tests. A sleep is never
// shorter than the condition's last call took: one that takes a second
// (a round of Prometheus queries) is asked at most every two.
const (
	firstInterval = time.Millisecond
	maxInterval   = 100 * time.Millisecond
)

// Eventually calls cond until it reports ok, and fails t (Fatalf) if
// timeout passes first. cond reports, beside ok, the state it saw ("3 of
// 5 rows", the last status code): the failure message says what was
// awaited (what, "stage 1 to store 5 rows") and the state seen last.
// cond runs on the test's goroutine, so it may call t.Fatal itself, for
// instance when a process it waits on has exited.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	if ok, state := poll(timeout, cond); !ok {
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, state)
	}
}

// EventuallyErr is Eventually for a condition that holds when cond returns
// nil; its last error is the state in the failure message.
func EventuallyErr(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) {
		if err := cond(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// Poll calls cond until it holds or timeout passes, and reports whether it
// held: for a test that makes its own assertion afterwards (a count that
// must be exactly 2, not at least 2) or goes on either way.
func Poll(timeout time.Duration, cond func() bool) bool {
	ok, _ := poll(timeout, func() (bool, string) { return cond(), "" })
	return ok
}

// poll asks cond at least once, and once more at the deadline, so that a
// condition that comes true during the last sleep is not reported late.
func poll(timeout time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for interval := firstInterval; ; interval = min(2*interval, maxInterval) {
		start := time.Now()
		ok, state := cond()
		if ok {
			return true, state
		}
		took := time.Since(start)
		left := time.Until(deadline)
		if left <= 0 {
			return false, state
		}
		time.Sleep(min(max(interval, took), left))
	}
}

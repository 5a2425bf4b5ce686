package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeTB records a failure as testing.T does, ending the goroutine that
// called Fatalf: Eventually's failure is tested without failing this test.
type fakeTB struct {
	testing.TB // nil: a method not overridden here panics
	failed     bool
	msg        string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fake on a goroutine of its own, as Goexit needs, and
// waits for it.
func run(fn func(t testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// TestEventuallyReturnsOnceTheConditionHolds: a condition that holds at
// the third call returns at once, without failing, after three calls; one
// that holds at the first costs no sleep.
func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	start := time.Now()
	f := run(func(tb testing.TB) {
		Eventually(tb, time.Minute, "the third call", func() (bool, string) {
			calls++
			return calls == 3, fmt.Sprintf("call %d", calls)
		})
	})
	if f.failed || calls != 3 {
		t.Fatalf("failed %v (%q) after %d calls, want success after 3", f.failed, f.msg, calls)
	}
	// Two sleeps of the growing interval (1 ms, 2 ms), far from the minute.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %v", d)
	}
	calls = 0
	f = run(func(tb testing.TB) {
		EventuallyErr(tb, time.Minute, "no error", func() error { calls++; return nil })
	})
	if f.failed || calls != 1 {
		t.Fatalf("failed %v after %d calls, want success at the first", f.failed, calls)
	}
}

// TestEventuallyFailsWithWhatAndTheLastState: on timeout the test fails,
// and the message names what was awaited and the state seen last, after a
// call at the deadline.
func TestEventuallyFailsWithWhatAndTheLastState(t *testing.T) {
	calls := 0
	start := time.Now()
	f := run(func(tb testing.TB) {
		Eventually(tb, 50*time.Millisecond, "5 rows in ClickHouse", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("%d rows", calls)
		})
		t.Error("Eventually returned after its timeout")
	})
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("gave up after %v, before its timeout", d)
	}
	if !f.failed {
		t.Fatal("no failure on timeout")
	}
	for _, want := range []string{"timed out after 50ms", "waiting for 5 rows in ClickHouse", fmt.Sprintf("last seen: %d rows", calls)} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("message %q lacks %q", f.msg, want)
		}
	}
	if calls < 3 {
		t.Errorf("%d calls in 50 ms: the interval did not start short", calls)
	}

	f = run(func(tb testing.TB) {
		EventuallyErr(tb, 10*time.Millisecond, "the server to answer", func() error {
			return errors.New("connection refused")
		})
	})
	if !f.failed || !strings.Contains(f.msg, "waiting for the server to answer; last seen: connection refused") {
		t.Errorf("EventuallyErr's failure: %v %q", f.failed, f.msg)
	}
}

// TestPoll: Poll reports whether the condition held, and never fails.
func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(time.Minute, func() bool { calls++; return calls == 2 }) || calls != 2 {
		t.Errorf("Poll of a condition that holds at the second call: %d calls", calls)
	}
	if Poll(10*time.Millisecond, func() bool { return false }) {
		t.Error("Poll of a condition that never holds reported true")
	}
}

// TestSlowConditionAskedLessOften: a condition that takes 30 ms is asked
// after sleeps of at least as long, not every 1, 2, 4 ms.
func TestSlowConditionAskedLessOften(t *testing.T) {
	calls := 0
	Poll(300*time.Millisecond, func() bool { calls++; time.Sleep(30 * time.Millisecond); return false })
	// 30 ms of call and at least 30 ms of sleep: about 5 calls; without
	// the rule, 7 or 8.
	if calls > 6 {
		t.Errorf("%d calls of a 30 ms condition in 300 ms", calls)
	}
}

// TestIntervalGrowsToItsCeiling: the sleeps double from 1 ms and stop at
// 100 ms, so a slow condition is not asked too often.
func TestIntervalGrowsToItsCeiling(t *testing.T) {
	calls := 0
	start := time.Now()
	Poll(time.Second, func() bool { calls++; return false })
	// 1+2+4+...+64 = 127 ms for 8 calls, then one each 100 ms: about 17
	// calls in a second; a busy machine makes fewer, never more.
	if calls > 20 || calls < 2 {
		t.Errorf("%d calls in %v, want about 17", calls, time.Since(start))
	}
}

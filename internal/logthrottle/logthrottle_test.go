package logthrottle

import (
	"sync"
	"testing"
	"time"
)

// TestThrottle: the first occurrence is due at once; the next ones within
// the interval are counted, not due; the first after it is due with the
// count of all since the last line. Concurrent notes lose no count.
func TestThrottle(t *testing.T) {
	l := Throttle{Every: 200 * time.Millisecond}
	if n, due := l.Note(); !due || n != 1 {
		t.Fatalf("first note: %d, %v; want 1, true", n, due)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, due := l.Note(); due && time.Since(start) < 150*time.Millisecond {
				t.Error("a note within the interval was due")
			}
		}()
	}
	wg.Wait()
	if time.Since(start) >= 150*time.Millisecond {
		t.Skip("the machine took the whole interval for 100 notes")
	}
	time.Sleep(250 * time.Millisecond)
	if n, due := l.Note(); !due || n != 101 {
		t.Fatalf("note after the interval: %d, %v; want 101, true", n, due)
	}
	if _, due := l.Note(); due {
		t.Fatal("a note right after a line was due")
	}
}

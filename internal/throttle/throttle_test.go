package throttle

import (
	"sync"
	"testing"
	"time"
)

// TestThrottle: the first occurrence goes through; the next ones within
// the interval are counted, not let through, even concurrently, with no
// count lost; the first after the interval goes through with the count of
// all since the last. The interval is an hour, and its end is made by
// moving the last one's time back: nothing depends on the machine's speed.
func TestThrottle(t *testing.T) {
	l := Throttle{Every: time.Hour}
	if n, due := l.Note(); !due || n != 1 {
		t.Fatalf("first note: %d, %v; want 1, true", n, due)
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, due := l.Note(); due {
				t.Error("a note within the interval went through")
			}
		}()
	}
	wg.Wait()
	l.at.Add(-int64(time.Hour)) // the interval has passed
	if n, due := l.Note(); !due || n != 101 {
		t.Fatalf("note after the interval: %d, %v; want 101, true", n, due)
	}
	if _, due := l.Note(); due {
		t.Fatal("a note right after one went through went through too")
	}
}

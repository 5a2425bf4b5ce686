package deadline

import (
	"context"
	"testing"
	"time"
)

func TestBy(t *testing.T) {
	var d Deadline
	t0 := time.Now().Add(time.Hour)
	first := d.By(context.Background(), t0)
	if at, ok := first.Deadline(); !ok || !at.Equal(t0) {
		t.Fatalf("deadline %v %v, want %v", at, ok, t0)
	}
	// A later time keeps the context: it ends earlier than asked.
	if got := d.By(context.Background(), t0.Add(time.Minute)); got != first {
		t.Fatal("a later time made a new context")
	}
	if got := d.By(context.Background(), t0); got != first {
		t.Fatal("the same time made a new context")
	}
	// An earlier time replaces it, and ends the one replaced.
	t1 := t0.Add(-time.Minute)
	second := d.By(context.Background(), t1)
	if second == first {
		t.Fatal("an earlier time kept the context")
	}
	if at, _ := second.Deadline(); !at.Equal(t1) {
		t.Fatalf("deadline %v, want %v", at, t1)
	}
	if first.Err() == nil {
		t.Fatal("the replaced context did not end")
	}
	// An ended context is replaced even for a later time.
	past := d.By(context.Background(), time.Now().Add(-time.Second))
	if past.Err() != context.DeadlineExceeded {
		t.Fatalf("a deadline in the past: %v", past.Err())
	}
	if second.Err() == nil {
		t.Fatal("the replaced context did not end")
	}
	if got := d.By(context.Background(), t0); got == past || got.Err() != nil {
		t.Fatal("an ended context was returned again")
	}
	// The parent's end ends it.
	parent, cancel := context.WithCancel(context.Background())
	var p Deadline
	c := p.By(parent, t0)
	cancel()
	if c.Err() != context.Canceled {
		t.Fatalf("after the parent's end: %v", c.Err())
	}
	// Stop ends the last context.
	last := d.By(context.Background(), t0)
	d.Stop()
	if last.Err() == nil {
		t.Fatal("Stop did not end the last context")
	}
	d.Stop() // twice is harmless
}

// The point of Deadline: a read loop's waits until one time cost no
// allocation after the first.
func TestByAllocates(t *testing.T) {
	var d Deadline
	at := time.Now().Add(time.Hour)
	d.By(context.Background(), at)
	if n := testing.AllocsPerRun(100, func() { d.By(context.Background(), at.Add(time.Second)) }); n != 0 {
		t.Fatalf("%v allocations per reuse, want 0", n)
	}
	d.Stop()
}

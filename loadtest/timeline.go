package loadtest

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Timeline holds a latency histogram per second of a run, by intended send
// time, for the latency-over-time chart. It is safe for concurrent use.
type Timeline struct {
	start time.Time
	slots []timelineSlot
}

type timelineSlot struct {
	mu     sync.Mutex
	h      *hdrhistogram.Histogram // microseconds, 2 significant digits
	non200 uint64                  // answers other than 200
	errors uint64                  // no answer
}

// NewTimeline returns a timeline of seconds seconds from start; later
// requests count in the last second.
func NewTimeline(start time.Time, seconds int) *Timeline {
	return &Timeline{start: start, slots: make([]timelineSlot, max(seconds, 1))}
}

func (t *Timeline) slot(intended time.Time) *timelineSlot {
	i := int(intended.Sub(t.start) / time.Second)
	return &t.slots[max(0, min(i, len(t.slots)-1))]
}

// Record adds an answered request: its intended send time, its latency in
// microseconds and its HTTP status.
func (t *Timeline) Record(intended time.Time, us int64, status int) {
	s := t.slot(intended)
	s.mu.Lock()
	if s.h == nil {
		s.h = hdrhistogram.New(1, 60_000_000, 2)
	}
	record(s.h, us)
	if status != 200 {
		s.non200++
	}
	s.mu.Unlock()
}

// RecordError adds a request that got no answer.
func (t *Timeline) RecordError(intended time.Time) {
	s := t.slot(intended)
	s.mu.Lock()
	s.errors++
	s.mu.Unlock()
}

// Second is the latency of the requests due in one second of a run.
type Second struct {
	Second   int     `json:"s"` // from the run's start
	Requests int64   `json:"requests"`
	Non200   uint64  `json:"non_200,omitempty"`
	Errors   uint64  `json:"errors,omitempty"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// Seconds returns the seconds up to the last one with a request.
func (t *Timeline) Seconds() []Second {
	var out []Second
	last := -1
	for i := range t.slots {
		s := &t.slots[i]
		s.mu.Lock()
		sec := Second{Second: i, Non200: s.non200, Errors: s.errors}
		if s.h != nil {
			sec.Requests = s.h.TotalCount()
			sec.P50Ms = float64(s.h.ValueAtQuantile(50)) / 1000
			sec.P99Ms = float64(s.h.ValueAtQuantile(99)) / 1000
			sec.MaxMs = float64(s.h.Max()) / 1000
		}
		s.mu.Unlock()
		if sec.Requests > 0 || sec.Errors > 0 {
			last = i
		}
		out = append(out, sec)
	}
	return out[:last+1]
}

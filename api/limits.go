package api

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limit is a fixed window: at most Requests per Window, counted per key (a
// client IP or a token). Zero Requests is no limit.
type Limit struct {
	Requests int
	Window   time.Duration
}

func (l Limit) String() string {
	if l.Requests <= 0 {
		return "off"
	}
	return fmt.Sprintf("%d/%s", l.Requests, l.Window)
}

// ParseLimit reads "600/60s" (requests per window) or "off".
func ParseLimit(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" {
		return Limit{}, nil
	}
	n, w, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("limit %q: want REQUESTS/WINDOW, e.g. 600/60s, or off", s)
	}
	req, err := strconv.Atoi(n)
	if err != nil || req < 1 {
		return Limit{}, fmt.Errorf("limit %q: %q is not a positive number of requests", s, n)
	}
	win, err := time.ParseDuration(w)
	if err != nil || win < time.Second {
		return Limit{}, fmt.Errorf("limit %q: window %q is not a duration of a second or more", s, w)
	}
	return Limit{Requests: req, Window: win}, nil
}

// Limits are the two layers of limits on /api/v1: every request counts
// against the global limits, and against the limits of its group (reports:
// the queries; send results: the intake of sending services). The webhook
// endpoint is not behind any of them.
type Limits struct {
	GlobalIP         Limit
	GlobalToken      Limit
	ReportsIP        Limit
	ReportsToken     Limit
	SendResultsIP    Limit
	SendResultsToken Limit
}

// DefaultLimits are 600 requests a minute per IP in all, 240 of them
// reports, and for send results 120 a minute per IP and 300 per token.
func DefaultLimits() Limits {
	return Limits{
		GlobalIP:         Limit{600, time.Minute},
		ReportsIP:        Limit{240, time.Minute},
		SendResultsIP:    Limit{120, time.Minute},
		SendResultsToken: Limit{300, time.Minute},
	}
}

// maxKeys bounds the keys a window remembers; past it, new keys share one
// counter (so a flood of spoofed addresses cannot exhaust memory).
const maxKeys = 1 << 20

// window counts requests per key in aligned fixed windows: the window of t
// is [k*W, (k+1)*W) with k = t / W, the same for every key, so all counts
// reset at once and a window's map is dropped whole when the next begins.
type window struct {
	name  string
	limit Limit
	now   func() time.Time

	mu     sync.Mutex
	idx    int64
	counts map[string]int
}

func newWindow(name string, l Limit, now func() time.Time) *window {
	if l.Requests <= 0 {
		return nil
	}
	return &window{name: name, limit: l, now: now, counts: map[string]int{}}
}

// verdict is the outcome of taking one request from a window.
type verdict struct {
	name      string
	ok        bool
	limit     int
	remaining int
	reset     time.Duration // until the window ends
}

// take counts one request of key and says whether it is within the limit.
// A refused request is not counted.
func (w *window) take(key string) verdict {
	now := w.now()
	win := int64(w.limit.Window)
	idx := now.UnixNano() / win
	reset := time.Duration((idx+1)*win - now.UnixNano())
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx != w.idx {
		w.idx, w.counts = idx, make(map[string]int, len(w.counts))
	}
	if _, ok := w.counts[key]; !ok && len(w.counts) >= maxKeys {
		key = "\x00overflow"
	}
	n := w.counts[key]
	if n >= w.limit.Requests {
		return verdict{name: w.name, limit: w.limit.Requests, reset: reset}
	}
	w.counts[key] = n + 1
	return verdict{name: w.name, ok: true, limit: w.limit.Requests, remaining: w.limit.Requests - n - 1, reset: reset}
}

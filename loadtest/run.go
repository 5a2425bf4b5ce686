package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"github.com/wahook/wahook/schema"
)

// Config is one load run.
type Config struct {
	// URL is the webhook endpoint, e.g. http://127.0.0.1:8080/webhook.
	URL string
	// Secret signs every body, as Meta signs with the app secret.
	Secret []byte
	// Rate is the arrival rate in requests per second (open loop). Zero runs
	// closed loop: each connection sends its next request when the last is
	// answered, which finds the saturation throughput.
	Rate float64
	// Duration bounds the run; requests still unanswered at its end are
	// waited for up to Timeout.
	Duration time.Duration
	// Connections is the most requests in flight at once.
	Connections int
	// Timeout is the client timeout of one request.
	Timeout time.Duration
	// Body returns the i-th body; nil uses StatusBody with BodyBytes.
	Body func(i uint64) []byte
	// BodyBytes is the approximate size of the default bodies.
	BodyBytes int
}

// DefaultConfig returns a 10 s closed-loop run over 64 connections.
func DefaultConfig() Config {
	return Config{Duration: 10 * time.Second, Connections: 64, Timeout: 5 * time.Second, BodyBytes: 900}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "" || err != nil || u.Host == "":
		return fmt.Errorf("url %q: want http://host:port/webhook", c.URL)
	case !isLoopback(u.Hostname()):
		return fmt.Errorf("url %q: load runs only against this machine (loopback addresses)", c.URL)
	case len(c.Secret) == 0:
		return errors.New("an app secret is required to sign the bodies")
	case c.Rate < 0:
		return errors.New("rate must not be negative")
	case c.Duration <= 0 || c.Duration > time.Hour:
		return errors.New("duration must be between 0 and 1h")
	case c.Connections < 1 || c.Connections > 10000:
		return errors.New("connections must be between 1 and 10000")
	case c.Timeout <= 0:
		return errors.New("timeout must be positive")
	}
	return nil
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "::1" || len(host) > 4 && host[:4] == "127."
}

// Result is what a run measured.
type Result struct {
	Config   Config
	Started  time.Time
	Elapsed  time.Duration // from the first send to the last answer
	Sent     uint64
	Statuses map[int]uint64 // answers by HTTP status
	Errors   uint64         // requests without an answer (timeout, refused)
	// Latency is in microseconds, from the intended send time to the answer.
	Latency *hdrhistogram.Histogram
}

// Rate is the achieved rate of answered requests per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	var n uint64
	for _, c := range r.Statuses {
		n += c
	}
	return float64(n) / r.Elapsed.Seconds()
}

// OK is the number of 200 answers.
func (r *Result) OK() uint64 { return r.Statuses[200] }

// Percentile returns the latency at percentile p (0-100).
func (r *Result) Percentile(p float64) time.Duration {
	return time.Duration(r.Latency.ValueAtQuantile(p)) * time.Microsecond
}

// ShareOver returns the share of answered requests slower than d.
func (r *Result) ShareOver(d time.Duration) float64 {
	total := r.Latency.TotalCount()
	if total == 0 {
		return 0
	}
	var over int64
	limit := d.Microseconds()
	for _, b := range r.Latency.Distribution() {
		if b.From > limit {
			over += b.Count
		}
	}
	return float64(over) / float64(total)
}

// MeetsMetaSLO is Meta's bar for high-volume numbers (WEBHOOKS.md 1.3): the
// median under 250 ms and fewer than 1% of requests over 1 s, every request
// answered 200.
func (r *Result) MeetsMetaSLO() bool {
	return r.Percentile(50) < 250*time.Millisecond && r.ShareOver(time.Second) < 0.01 &&
		r.Errors == 0 && r.OK() == r.Sent
}

// Run sends the traffic c describes and returns what it measured.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Body == nil {
		size := c.BodyBytes
		c.Body = func(i uint64) []byte { return StatusBody(i, size) }
	}
	u, _ := url.Parse(c.URL)
	client := &fasthttp.HostClient{
		Addr:                u.Host,
		MaxConns:            c.Connections,
		ReadTimeout:         c.Timeout,
		WriteTimeout:        c.Timeout,
		MaxIdleConnDuration: time.Minute,
	}
	res := &Result{Config: c, Statuses: map[int]uint64{}, Latency: hdrhistogram.New(1, 60_000_000, 3)}
	var (
		mu   sync.Mutex
		seq  atomic.Uint64
		sent atomic.Uint64
		errs atomic.Uint64
	)
	// Each worker keeps its own histogram and status counts, merged at the
	// end, so that recording takes no shared lock.
	type local struct {
		h        *hdrhistogram.Histogram
		statuses map[int]uint64
	}
	work := func(intended time.Time, l *local, req *fasthttp.Request, resp *fasthttp.Response) {
		i := seq.Add(1)
		b := c.Body(i)
		req.Header.Set(schema.SignatureHeader, schema.Sign(c.Secret, b))
		req.SetBodyRaw(b)
		sent.Add(1)
		err := client.DoTimeout(req, resp, c.Timeout)
		if err != nil {
			errs.Add(1)
			return
		}
		l.statuses[resp.StatusCode()]++
		_ = l.h.RecordValue(max(time.Since(intended).Microseconds(), 1))
	}
	runCtx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	res.Started = time.Now()
	var wg sync.WaitGroup
	locals := make([]*local, c.Connections)
	jobs := make(chan time.Time, 1<<16)
	for w := range locals {
		l := &local{h: hdrhistogram.New(1, 60_000_000, 3), statuses: map[int]uint64{}}
		locals[w] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(c.URL)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			if c.Rate == 0 {
				for runCtx.Err() == nil {
					work(time.Now(), l, req, resp)
				}
				return
			}
			for t := range jobs {
				work(t, l, req, resp)
			}
		}()
	}
	if c.Rate > 0 {
		schedule(runCtx, c.Rate, jobs)
		close(jobs)
	}
	wg.Wait()
	res.Elapsed = time.Since(res.Started)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range locals {
		res.Latency.Merge(l.h)
		for s, n := range l.statuses {
			res.Statuses[s] += n
		}
	}
	res.Sent, res.Errors = sent.Load(), errs.Load()
	return res, nil
}

// schedule puts the intended send time of each request on jobs, at rate per
// second, until ctx ends. It never waits for the server: when every
// connection is busy the jobs queue up with their intended times, and the
// wait counts in their latency (no coordinated omission). A full queue
// blocks the schedule, and the lost time still counts, since each job
// carries the time it was due.
func schedule(ctx context.Context, rate float64, jobs chan<- time.Time) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	// Ticks are coarse (about 1 ms), so each tick releases every request
	// that has come due since the last.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var n int64
	runtime.Gosched()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int64(now.Sub(start) / interval)
			for ; n < due; n++ {
				select {
				case jobs <- start.Add(time.Duration(n) * interval):
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

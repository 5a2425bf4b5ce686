package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"github.com/wahook/wahook/schema"
)

// Config is one load run.
type Config struct {
	// URL is the webhook endpoint, e.g. http://127.0.0.1:8080/webhook, or
	// several separated by commas: requests are spread over them in turn,
	// and a retry goes to the next one, as behind a load balancer.
	URL string
	// Secret signs every body, as Meta signs with the app secret.
	Secret []byte
	// Rate is the arrival rate in requests per second (open loop). Zero runs
	// closed loop: each connection sends its next request when the last is
	// answered, which finds the saturation throughput.
	Rate float64
	// Traffic, when set, sends the traffic of this model instead, open
	// loop at the model's own rates (Rate and Body are not used), and keeps
	// a ledger of what got a 200.
	Traffic *Model
	// Duration bounds the run; requests still unanswered at its end are
	// waited for up to Timeout.
	Duration time.Duration
	// Connections is the most requests in flight at once.
	Connections int
	// Timeout is the client timeout of one request.
	Timeout time.Duration
	// Attempts is how often one body is posted at most: a non-200 or no
	// answer is posted again after RetryBackoff, doubling each time, as Meta
	// retries (for days; a run only a few times). 1 posts each body once.
	Attempts     int
	RetryBackoff time.Duration
	// Body returns the i-th body; nil uses StatusBody with BodyBytes.
	Body func(i uint64) []byte
	// BodyBytes is the approximate size of the default bodies.
	BodyBytes int
	// MetricsURL is the service's Prometheus endpoint, read before and
	// after the run for the CPU time the service used
	// (process_cpu_seconds_total); "" derives it from URL (/metrics), "-"
	// skips it.
	MetricsURL string
}

// URLs returns the endpoints of URL, split at its commas.
func (c Config) URLs() []string {
	out := strings.Split(c.URL, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// DefaultConfig returns a 10 s closed-loop run over 64 connections, each
// body posted up to 3 times.
func DefaultConfig() Config {
	return Config{Duration: 10 * time.Second, Connections: 64, Timeout: 5 * time.Second, BodyBytes: 900,
		Attempts: 3, RetryBackoff: 100 * time.Millisecond}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	for _, one := range c.URLs() {
		u, err := url.Parse(one)
		switch {
		case one == "" || err != nil || u.Host == "":
			return fmt.Errorf("url %q: want http://host:port/webhook", one)
		case !isLoopback(u.Hostname()):
			return fmt.Errorf("url %q: load runs only against this machine (loopback addresses)", one)
		}
	}
	switch {
	case len(c.Secret) == 0:
		return errors.New("an app secret is required to sign the bodies")
	case c.Rate < 0:
		return errors.New("rate must not be negative")
	case c.Rate > 1e6:
		return errors.New("rate must be at most 1000000 per second")
	case c.Duration <= 0 || c.Duration > time.Hour:
		return errors.New("duration must be between 0 and 1h")
	case c.Connections < 1 || c.Connections > 10000:
		return errors.New("connections must be between 1 and 10000")
	case c.Timeout <= 0:
		return errors.New("timeout must be positive")
	case c.Attempts < 1 || c.Attempts > 10:
		return errors.New("attempts must be between 1 and 10")
	case c.Attempts > 1 && (c.RetryBackoff <= 0 || c.RetryBackoff > 10*time.Second):
		return errors.New("retry backoff must be between 0 and 10s")
	}
	if c.Traffic != nil {
		if err := c.Traffic.Validate(); err != nil {
			return fmt.Errorf("traffic model: %w", err)
		}
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
	Sent     uint64        // requests, retries included
	Statuses map[int]uint64
	Errors   uint64 // requests without an answer (timeout, refused)
	Retried  uint64 // requests that posted a body again after a non-200 or no answer
	GaveUp   uint64 // bodies that never got a 200 within Attempts
	// Latency is in microseconds, from the intended send time to the answer.
	Latency *hdrhistogram.Histogram
	// SendLag is in microseconds, from the intended send time of a body's
	// first attempt to the moment the generator hands it to its HTTP client,
	// in open-loop and traffic runs (nil in closed loop): the part of
	// Latency spent in the generator (waiting for the next tick, for a free
	// connection, for a core; building and signing the body). When it is a
	// large part of Latency, bodies queued in the generator: too few
	// connections for the rate times the service's latency, or a generator
	// short of CPU.
	SendLag  *hdrhistogram.Histogram
	Timeline *Timeline
	// Traffic and Ledger are set when the run sent a traffic model.
	Traffic *Traffic
	Ledger  *Ledger
	// ServerCPU is the CPU time the service used during the run, in
	// seconds, from its /metrics; negative when unknown. The work the
	// run's requests left queued (stage 1's backlog) is done after it:
	// CPUSinceStart, once the service has drained, counts that too.
	ServerCPU float64
	// metricsURL and cpuBefore are where ServerCPU was read and what it
	// read before the load ("-" and -1: not read).
	metricsURL string
	cpuBefore  float64
	// Interrupted is set when the run ended before its duration because
	// its context was cancelled (the command got SIGINT or SIGTERM): the
	// figures cover only Elapsed.
	Interrupted bool
}

// OKRate is the achieved rate of 200 answers per second: the rate to
// compare between runs, since a service that refuses (503 while JetStream
// is away) answers faster than one that stores.
func (r *Result) OKRate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK()) / r.Elapsed.Seconds()
}

// Rate is the achieved rate of answered requests per second, whatever the
// answer.
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
	return percentile(r.Latency, p)
}

func percentile(h *hdrhistogram.Histogram, p float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(p)) * time.Microsecond
}

// ShareOver returns the share of answered requests slower than d.
func (r *Result) ShareOver(d time.Duration) float64 { return shareOver(r.Latency, d) }

func shareOver(h *hdrhistogram.Histogram, d time.Duration) float64 {
	total := h.TotalCount()
	if total == 0 {
		return 0
	}
	var over int64
	limit := d.Microseconds()
	for _, b := range h.Distribution() {
		if b.From > limit {
			over += b.Count
		}
	}
	return float64(over) / float64(total)
}

// MeetsMetaSLO is Meta's bar for high-volume numbers (docs/meta-webhooks.md 1.3): the
// median under 250 ms and fewer than 1% of requests over 1 s, every request
// answered 200.
func (r *Result) MeetsMetaSLO() bool {
	return r.Percentile(50) < 250*time.Millisecond && r.ShareOver(time.Second) < 0.01 &&
		r.Errors == 0 && r.OK() == r.Sent
}

// newLatencyHistogram records microseconds from 1 µs to 60 s, to 3
// significant digits.
func newLatencyHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, 3_600_000_000, 3) }

// record records v microseconds in h, at least 1 and at most what h
// tracks: a value past it was dropped (RecordValue's error ignored), and
// the slowest answers of a run, those of a generator far behind its
// schedule, were missing from its percentiles and counts.
func record(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, 1), h.HighestTrackableValue()))
}

// job is one body to post: when it was due, and the model's POST or the
// sequence number of a default body.
type job struct {
	at   time.Time
	post *Post
}

// Run sends the traffic c describes and returns what it measured.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Body == nil {
		size := c.BodyBytes
		c.Body = func(i uint64) []byte { return StatusBody(i, size, time.Now().Unix()) }
	}
	res := &Result{Config: c, Statuses: map[int]uint64{}, Latency: newLatencyHistogram(), ServerCPU: -1}
	var traffic *Traffic
	if c.Traffic != nil {
		var err error
		if traffic, err = NewTraffic(*c.Traffic, time.Now()); err != nil {
			return nil, err
		}
		// The history before the run is made now, so that it costs the
		// run's first requests nothing.
		traffic.Due(-1)
		res.Traffic, res.Ledger = traffic, NewLedger(traffic)
	}
	urls := c.URLs()
	metricsURL := c.MetricsURL
	if metricsURL == "" && len(urls) > 1 {
		metricsURL = "-" // the CPU of one instance among several says little
	}
	if metricsURL == "" {
		u, _ := url.Parse(urls[0])
		metricsURL = u.Scheme + "://" + u.Host + "/metrics"
	}
	cpuBefore := -1.0
	if metricsURL != "-" {
		cpuBefore = scrapeCPU(ctx, metricsURL)
	}
	clients := make([]*fasthttp.HostClient, len(urls))
	for i, one := range urls {
		u, _ := url.Parse(one)
		clients[i] = &fasthttp.HostClient{
			Addr:                u.Host,
			MaxConns:            c.Connections,
			ReadTimeout:         c.Timeout,
			WriteTimeout:        c.Timeout,
			MaxIdleConnDuration: time.Minute,
			// One attempt a call: fasthttp sent a POST again by itself
			// when the connection closed before an answer, to the same
			// endpoint and counted nowhere; retries are the run's own.
			MaxIdemponentCallAttempts: 1,
		}
	}
	var (
		next                        atomic.Uint64 // the endpoint of the next body, in turn
		seq                         atomic.Uint64
		sent, errs, retried, gaveUp atomic.Uint64
	)
	// Each worker keeps its own histogram and status counts, merged at the
	// end, so that recording takes no shared lock.
	type local struct {
		h, lag   *hdrhistogram.Histogram
		statuses map[int]uint64
		buf      []byte
	}
	runCtx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	res.Started = time.Now()
	res.Timeline = NewTimeline(res.Started, int(c.Duration/time.Second)+30)
	// post sends one body until it gets a 200 or its attempts run out; it
	// returns whether it got a 200.
	post := func(j job, l *local, req *fasthttp.Request, resp *fasthttp.Response) bool {
		var b []byte
		if j.post != nil {
			l.buf = traffic.Body(l.buf[:0], j.post)
			b = l.buf
			res.Ledger.Posted(j.post)
		} else {
			b = c.Body(seq.Add(1))
		}
		req.Header.Set(schema.SignatureHeader, schema.Sign(c.Secret, b))
		req.SetBodyRaw(b)
		intended := j.at
		if l.lag != nil {
			record(l.lag, time.Since(intended).Microseconds())
		}
		first := 0
		if len(urls) > 1 {
			first = int(next.Add(1) % uint64(len(urls)))
		}
		for attempt := 1; ; attempt++ {
			sent.Add(1)
			e := (first + attempt - 1) % len(urls)
			if len(urls) > 1 {
				req.SetRequestURI(urls[e])
			}
			err := clients[e].DoTimeout(req, resp, c.Timeout)
			if err != nil {
				errs.Add(1)
				res.Timeline.RecordError(intended)
			} else {
				code := resp.StatusCode()
				us := max(time.Since(intended).Microseconds(), 1)
				l.statuses[code]++
				record(l.h, us)
				res.Timeline.Record(intended, us, code)
				if code == fasthttp.StatusOK {
					if j.post != nil {
						res.Ledger.Acked(j.post)
					}
					return true
				}
			}
			if attempt >= c.Attempts {
				gaveUp.Add(1)
				return false
			}
			select {
			case <-time.After(c.RetryBackoff << (attempt - 1)):
			case <-ctx.Done():
				gaveUp.Add(1)
				return false
			}
			retried.Add(1)
			intended = time.Now()
		}
	}
	var wg sync.WaitGroup
	locals := make([]*local, c.Connections)
	jobs := make(chan job, 1<<16)
	closedLoop := c.Rate == 0 && traffic == nil
	if !closedLoop {
		res.SendLag = newLatencyHistogram()
	}
	for w := range locals {
		l := &local{h: newLatencyHistogram(), statuses: map[int]uint64{}}
		if !closedLoop {
			l.lag = newLatencyHistogram()
		}
		locals[w] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(urls[0])
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			if closedLoop {
				for runCtx.Err() == nil {
					post(job{at: time.Now()}, l, req, resp)
				}
				return
			}
			for j := range jobs {
				post(j, l, req, resp)
			}
		}()
	}
	switch {
	case traffic != nil:
		scheduleTraffic(runCtx, traffic, res.Started, jobs)
		close(jobs)
	case c.Rate > 0:
		schedule(runCtx, c.Rate, jobs)
		close(jobs)
	}
	wg.Wait()
	res.Elapsed = time.Since(res.Started)
	// A signal after the duration, while the last answers drain, cut
	// nothing short.
	res.Interrupted = ctx.Err() != nil && res.Elapsed < c.Duration
	for _, client := range clients {
		client.CloseIdleConnections()
	}
	for _, l := range locals {
		res.Latency.Merge(l.h)
		if l.lag != nil {
			res.SendLag.Merge(l.lag)
		}
		for s, n := range l.statuses {
			res.Statuses[s] += n
		}
	}
	res.Sent, res.Errors, res.Retried, res.GaveUp = sent.Load(), errs.Load(), retried.Load(), gaveUp.Load()
	res.metricsURL, res.cpuBefore = metricsURL, cpuBefore
	if cpuBefore >= 0 {
		if after := scrapeCPU(ctx, metricsURL); after >= cpuBefore {
			res.ServerCPU = after - cpuBefore
		}
	}
	return res, nil
}

// CPUSinceStart is the CPU time the service has used since just before
// the load began, read from its /metrics now; negative when unknown (no
// /metrics, or a service restarted since). Read after the service has
// drained (the end-to-end check's wait), it is the whole cost of the run's
// requests, the backlog they left included.
func (r *Result) CPUSinceStart(ctx context.Context) float64 {
	if r.cpuBefore < 0 || r.metricsURL == "" || r.metricsURL == "-" {
		return -1
	}
	now := scrapeCPU(ctx, r.metricsURL)
	if now < r.cpuBefore {
		return -1
	}
	return now - r.cpuBefore
}

// schedule puts the intended send time of each request on jobs, at rate per
// second, until ctx ends. It never waits for the server: when every
// connection is busy the jobs queue up with their intended times, and the
// wait counts in their latency (no coordinated omission). A full queue
// blocks the schedule, and the lost time still counts, since each job
// carries the time it was due.
func schedule(ctx context.Context, rate float64, jobs chan<- job) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	tick := time.NewTicker(paceTick(interval))
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
				case jobs <- job{at: start.Add(time.Duration(n) * interval)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// paceTick is how often an open loop with requests interval apart releases
// the ones due: about two intervals, from 100 µs to 1 ms (174 µs at 11.5k
// req/s). A request leaves up to a tick after its intended time
// (Result.SendLag), and requests leave in bursts of a tick's worth.
//
// Against wahook serve at 11.5k req/s, 5 interleaved pairs of 30 s runs,
// 1 ms ticks against 200 µs: p50 1.8-2.1 ms against 0.7-0.9 (of which 1.1
// ms against 0.37 waited before sending), p99 8.9 / 9.4 / 8.3 / 7.5 / 6.2
// ms against 7.7 / 8.0 / 8.1 / 5.9 / 8.0. Smoother arrivals share fewer
// wake-ups: wahook used 0.65-0.82 cores against 0.83-0.96 over those runs;
// perf stat, one 8 s sample at 1 ms and one at 174 µs ticks: wahook 71
// against 87 CPU-µs per request, bare Fiber 23 against 32, this generator
// 35-41 against 46. Bursts of 11 had made a request look cheaper than it
// is when requests arrive spread out.
func paceTick(interval time.Duration) time.Duration {
	return min(max(2*interval, 100*time.Microsecond), time.Millisecond)
}

// scheduleTraffic puts the POSTs of g on jobs as they come due, until ctx
// ends; like schedule, it never waits for the server, and each job carries
// the time it was due.
func scheduleTraffic(ctx context.Context, g *Traffic, start time.Time, jobs chan<- job) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			posts := g.Due(now.Sub(start))
			for i := range posts {
				select {
				case jobs <- job{at: start.Add(posts[i].At), post: &posts[i]}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

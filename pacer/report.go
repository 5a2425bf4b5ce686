package pacer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// reporter batches send results and reports them to wahook: published on
// wahook.raw._send_results and acknowledged by JetStream, or posted to
// POST /api/v1/send-results. A failed report is tried again with a backoff;
// a full queue drops results (counted) rather than block the senders; a
// result wahook refuses holds up none of the others: held and tried again
// while wahook may take it later, else dropped (counted and logged).
type reporter struct {
	cfg  Config
	js   jetstream.JetStream
	http *http.Client
	// shownURL is ReportHTTPURL as errors show it: its scheme and host.
	shownURL string

	mu      sync.Mutex
	queue   []schema.SendResult
	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}

	reported, dropped, failures, invalid atomic.Int64
	heldCount                            atomic.Int64 // len(held), for Stats
	// run's goroutine's own
	// Each log line at most once per 10 s.
	failLog, refusedLog, heldLog, invalidLog every
	closeFails                               int // failed reports since the reporter began closing
	// held are the results wahook refused for now (a number it does not
	// know yet, or not allowed to the token), tried again every heldRetry
	// for up to heldFor after their first refusal.
	held     []item
	heldNext time.Time
}

// item is a result to report, and when wahook first refused it for now
// (zero: never).
type item struct {
	res   schema.SendResult
	since time.Time
}

// heldRetry and heldFor: how often, and how long after their first
// refusal, held results are tried again (variables for tests).
var (
	heldRetry = 10 * time.Second
	heldFor   = 10 * time.Minute
)

func newReporter(cfg Config, js jetstream.JetStream) *reporter {
	// A redirect is not followed (send answers it): the client would
	// send the API token on to the same host over plain http too (the
	// check of ReportHTTPURL is of the URL given), and wahook's
	// send-results never redirects.
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return &reporter{cfg: cfg, js: js, http: client, shownURL: shownURL(cfg.ReportHTTPURL),
		kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
}

// refusedHere counts a result not queued because wahook would refuse it,
// and logs which field, at most once per 10 s.
func (r *reporter) refusedHere(err error) {
	r.invalid.Add(1)
	if r.invalidLog.due(10 * time.Second) {
		r.cfg.Logger.Error("pacer: a send result wahook would refuse; not reported", "error", err.Error(),
			"invalid_results", r.invalid.Load())
	}
}

func (r *reporter) add(res schema.SendResult) {
	r.mu.Lock()
	if len(r.queue) >= r.cfg.ReportQueue {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	r.queue = append(r.queue, res)
	full := len(r.queue) >= r.cfg.ReportBatch
	r.mu.Unlock()
	if full {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// run sends batches until close, then what is left.
func (r *reporter) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-r.closing:
			r.flush(ctx)
			return
		case <-ctx.Done():
			// Closed without the time to report (Close's context ended):
			// what is left is dropped, and counted.
			r.dropAll()
			return
		case <-t.C:
		case <-r.kick:
		}
		r.flush(ctx)
	}
}

// dropAll drops and counts every result queued or held.
func (r *reporter) dropAll() {
	r.mu.Lock()
	left := len(r.queue)
	r.queue = r.queue[:0]
	r.mu.Unlock()
	r.dropped.Add(int64(left + len(r.held)))
	r.held = nil
	r.heldCount.Store(0)
}

// closeTries is how many failed reports in all the reporter makes once it
// is closing before it drops what is left.
const closeTries = 3

// flush sends the queued results in batches, each until wahook takes it,
// then the held ones when their time has come (or the reporter closes).
// When it gives up (ctx ended, or the reporter is closing and its tries
// are spent) every result still queued or held is dropped and counted.
func (r *reporter) flush(ctx context.Context) {
	for {
		r.mu.Lock()
		n := min(len(r.queue), r.cfg.ReportBatch)
		batch := make([]item, n)
		for i, res := range r.queue[:n] {
			batch[i].res = res
		}
		r.mu.Unlock()
		if n == 0 {
			break
		}
		ok := r.deliver(ctx, batch)
		r.take(n)
		if !ok {
			r.dropAll()
			return
		}
	}
	if len(r.held) == 0 || (time.Now().Before(r.heldNext) && !r.isClosing()) {
		return
	}
	r.heldNext = time.Now().Add(heldRetry)
	held := r.held
	r.held = nil
	r.heldCount.Store(0)
	// Held results were refused by number: each number's go in documents
	// of their own (one post per number a round; mixed, each refusal
	// would split them again).
	groups := byNumber(held)
	for gi, g := range groups {
		for len(g) > 0 {
			n := min(len(g), r.cfg.ReportBatch)
			if !r.deliver(ctx, g[:n]) {
				left := len(g) - n
				for _, rest := range groups[gi+1:] {
					left += len(rest)
				}
				r.dropped.Add(int64(left))
				r.dropAll()
				return
			}
			g = g[n:]
		}
	}
}

// deliver reports batch, trying again with a backoff while wahook cannot
// take it, and counts each result as reported or dropped, or holds it. A
// batch of several numbers wahook refuses for what is in it is sent again
// split: the number of the result wahook named, and the rest. A number's
// results refused for now (a number wahook does not know yet, or not
// allowed to the token) are held together, to be tried again for up to
// heldFor; refused for good (a result it finds wrong, a document too
// large), they are sent again in halves, and those refused alone dropped. It returns false, with what
// was not sent counted as dropped, when it gives up: ctx ended, or the
// reporter is closing and has failed closeTries times.
func (r *reporter) deliver(ctx context.Context, batch []item) bool {
	results := make([]schema.SendResult, len(batch))
	for i := range batch {
		results[i] = batch[i].res
	}
	body, err := json.Marshal(schema.SendResults{Results: results})
	if err != nil {
		r.dropped.Add(int64(len(batch)))
		r.cfg.Logger.Error("pacer: send results not encoded; dropped", "results", len(batch), "error", err.Error())
		return true
	}
	backoff := 100 * time.Millisecond
	for {
		err := r.send(ctx, body)
		if err == nil {
			r.reported.Add(int64(len(batch)))
			return true
		}
		var ref *refusedError
		if errors.As(err, &ref) {
			// Refusals for now are of a number (one wahook does not know
			// yet, or one more than the token may report for): the batch
			// is split first, into the number of the result wahook named
			// and the rest, and a number's results refused for now are
			// held together; only a refusal for good (a wrong result) is
			// narrowed down in halves.
			if groups := splitRefused(batch, ref); len(groups) > 1 {
				for i, g := range groups {
					if !r.deliver(ctx, g) {
						for _, rest := range groups[i+1:] {
							r.dropped.Add(int64(len(rest)))
						}
						return false
					}
				}
				return true
			}
			if len(batch) == 1 || ref.forNow {
				for _, it := range batch {
					r.refusedAlone(it, ref)
				}
				return true
			}
			h := len(batch) / 2
			if !r.deliver(ctx, batch[:h]) {
				r.dropped.Add(int64(len(batch) - h))
				return false
			}
			return r.deliver(ctx, batch[h:])
		}
		r.failures.Add(1)
		r.logFailure(err, len(batch))
		closing := r.isClosing()
		if closing {
			r.closeFails++
		}
		if ctx.Err() != nil || r.closeFails >= closeTries {
			r.dropped.Add(int64(len(batch)))
			return false
		}
		wake := r.closing // a close ends the wait: its tries come at once
		if closing {
			wake = nil
			backoff = min(backoff, 250*time.Millisecond)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-wake:
		}
		t.Stop()
		backoff = min(2*backoff, 5*time.Second)
	}
}

// splitRefused splits a refused batch of several numbers: into the number
// of the result wahook named (results[i]...) and the rest, or, when it
// named none, by number. One group: the batch is of one number.
func splitRefused(batch []item, ref *refusedError) [][]item {
	if rest, ok := strings.CutPrefix(ref.parameter, "results["); ok {
		if end := strings.IndexByte(rest, ']'); end > 0 {
			if i, err := strconv.Atoi(rest[:end]); err == nil && i >= 0 && i < len(batch) {
				var named, others []item
				for _, it := range batch {
					if it.res.PhoneNumberID == batch[i].res.PhoneNumberID {
						named = append(named, it)
					} else {
						others = append(others, it)
					}
				}
				if len(others) == 0 {
					return [][]item{named}
				}
				return [][]item{named, others}
			}
		}
	}
	return byNumber(batch)
}

// byNumber splits batch by phone number id, in the order of first
// appearance.
func byNumber(batch []item) [][]item {
	var groups [][]item
	at := map[string]int{}
	for _, it := range batch {
		i, ok := at[it.res.PhoneNumberID]
		if !ok {
			i = len(groups)
			at[it.res.PhoneNumberID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// refusedAlone drops a result wahook refused, or holds it when wahook may
// take it later (ReportQueue results held at most).
func (r *reporter) refusedAlone(it item, ref *refusedError) {
	now := time.Now()
	if it.since.IsZero() {
		it.since = now
	}
	if !ref.forNow || now.Sub(it.since) >= heldFor || r.isClosing() || len(r.held) >= r.cfg.ReportQueue {
		r.dropped.Add(1)
		r.logRefused(ref)
		return
	}
	if len(r.held) == 0 && r.heldNext.Before(now) {
		r.heldNext = now.Add(heldRetry)
	}
	r.held = append(r.held, it)
	r.heldCount.Store(int64(len(r.held)))
	if r.heldLog.due(10 * time.Second) {
		r.cfg.Logger.Warn("pacer: wahook refuses a send result for now; trying again", "status", ref.status, "code", ref.code,
			"parameter", ref.parameter, "message", ref.message, "held", len(r.held), "retry", heldRetry.String(), "for_up_to", heldFor.String())
	}
}

func (r *reporter) isClosing() bool {
	select {
	case <-r.closing:
		return true
	default:
		return false
	}
}

func (r *reporter) take(n int) {
	r.mu.Lock()
	r.queue = append(r.queue[:0], r.queue[n:]...)
	r.mu.Unlock()
}

// refusedError is wahook refusing a report for what is in it: an answer of
// 413, or a 4xx whose error names the results or the body. Trying it again
// as it is fails the same way, for good (a result it finds wrong), or
// for now (forNow: 403 or 404, a number the token may not report for, or
// that wahook has seen no webhook of yet; not a 404 of a result's waba_id).
type refusedError struct {
	status    int
	code      string
	parameter string
	message   string
	forNow    bool
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("send-results answered %d %s: %s: %s", e.status, e.code, e.parameter, e.message)
}

// refused reads wahook's error answer: a *refusedError when it refuses the
// document's content, else nil.
func refused(status int, body []byte) error {
	var doc struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Parameter string `json:"parameter"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &doc)
	e := doc.Error
	if status == http.StatusRequestEntityTooLarge || (status/100 == 4 &&
		(e.Parameter == "body" || e.Parameter == "results" || strings.HasPrefix(e.Parameter, "results["))) {
		// A 404 naming a result's waba_id is that result's own: a WABA
		// the token's tenant does not own. Refused for good.
		forNow := (status == http.StatusForbidden || status == http.StatusNotFound) && !strings.HasSuffix(e.Parameter, ".waba_id")
		return &refusedError{status: status, code: e.Code, parameter: e.Parameter, message: e.Message, forNow: forNow}
	}
	return nil
}

func (r *reporter) logRefused(e *refusedError) {
	if !r.refusedLog.due(10 * time.Second) {
		return
	}
	r.cfg.Logger.Error("pacer: wahook refused a send result; dropped", "status", e.status, "code", e.code,
		"parameter", e.parameter, "message", e.message)
}

func (r *reporter) logFailure(err error, n int) {
	if !r.failLog.due(10 * time.Second) {
		return
	}
	r.cfg.Logger.Warn("pacer: reporting send results failed; retrying", "results", n, "error", err.Error())
}

func (r *reporter) send(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r.cfg.ReportHTTPURL != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.ReportHTTPURL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if r.cfg.APIToken != "" {
			req.Header.Set("Authorization", "Bearer "+r.cfg.APIToken)
		}
		resp, err := r.http.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				// The client's error quotes the URL, a user name or a
				// query with a token in it too.
				ue.URL = r.shownURL
			}
			return err
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 == 3 {
			return fmt.Errorf("send-results at %s answered %d, a redirect: not followed, since the API token would go with it; give the final URL as ReportHTTPURL", r.shownURL, resp.StatusCode)
		}
		if resp.StatusCode/100 != 2 {
			if err := refused(resp.StatusCode, answer); err != nil {
				return err
			}
			return fmt.Errorf("send-results answered %d", resp.StatusCode)
		}
		return nil
	}
	if r.js == nil {
		return errors.New("no JetStream")
	}
	m := &nats.Msg{Subject: schema.SubjectSendResults, Data: body, Header: nats.Header{}}
	m.Header.Set(schema.HeaderMsgID, schema.RawMsgID(body))
	m.Header.Set(schema.HeaderApp, schema.SendResultsApp)
	m.Header.Set(schema.HeaderReceivedAt, schema.FormatReceivedAt(time.Now()))
	_, err := r.js.PublishMsg(ctx, m)
	return err
}

// close reports what is queued and held (within ctx) and stops; it
// returns ctx's error if ctx ended first (run then stops once its context
// is cancelled, dropping what is left).
func (r *reporter) close(ctx context.Context) error {
	close(r.closing)
	defer r.http.CloseIdleConnections()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// every throttles a log line: due at most once per period. It is safe for
// concurrent use.
type every struct {
	mu   sync.Mutex
	last time.Time
}

func (e *every) due(period time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < period {
		return false
	}
	e.last = now
	return true
}

package pacer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
// a full queue drops results (counted) rather than block the senders.
type reporter struct {
	cfg  Config
	js   jetstream.JetStream
	http *http.Client

	mu      sync.Mutex
	queue   []schema.SendResult
	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}

	reported, dropped, failures atomic.Int64
	lastLog                     time.Time
}

func newReporter(cfg Config, js jetstream.JetStream) *reporter {
	return &reporter{cfg: cfg, js: js, http: &http.Client{Timeout: 10 * time.Second},
		kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
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
			r.flush(ctx, true)
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
		r.flush(ctx, false)
	}
}

// flush sends the queued results in batches; each batch is tried until it
// is acknowledged, the reporter closes (final: a few tries) or ctx ends.
func (r *reporter) flush(ctx context.Context, final bool) {
	for {
		r.mu.Lock()
		n := min(len(r.queue), r.cfg.ReportBatch)
		batch := append([]schema.SendResult(nil), r.queue[:n]...)
		r.mu.Unlock()
		if n == 0 {
			return
		}
		body, err := json.Marshal(schema.SendResults{Results: batch})
		if err != nil {
			r.take(n)
			r.dropped.Add(int64(n))
			continue
		}
		backoff := 100 * time.Millisecond
		for try := 1; ; try++ {
			err = r.send(ctx, body)
			if err == nil {
				break
			}
			r.failures.Add(1)
			r.logFailure(err, n)
			if ctx.Err() != nil || (final && try >= 3) {
				r.take(n)
				r.dropped.Add(int64(n))
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
		r.take(n)
		r.reported.Add(int64(n))
	}
}

func (r *reporter) take(n int) {
	r.mu.Lock()
	r.queue = append(r.queue[:0], r.queue[n:]...)
	r.mu.Unlock()
}

func (r *reporter) logFailure(err error, n int) {
	now := time.Now()
	if now.Sub(r.lastLog) < 10*time.Second {
		return
	}
	r.lastLog = now
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
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
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

// close reports what is queued (within ctx) and stops.
func (r *reporter) close(ctx context.Context) error {
	close(r.closing)
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.http.CloseIdleConnections()
	if n := r.dropped.Load(); n > 0 {
		return fmt.Errorf("pacer: %d send results could not be reported", n)
	}
	return nil
}

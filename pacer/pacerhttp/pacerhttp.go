// Package pacerhttp serves a pacer.Pacer over HTTP with JSON bodies, so
// that sending services written in any language get the same pacing as a
// Go service that links the pacer: each sender asks POST /v1/wait before a
// send and tells POST /v1/outcome its result after it. `wahook pace` runs
// it as a sidecar beside the sending service; docs/pacer.md describes the
// routes.
//
// It uses net/http rather than Fiber: a Wait is held for as long as the
// number's pace asks, and net/http ends the request's context when its
// client goes away, so that the turn of a sender that gave up goes to the
// next one instead of being kept for a send that never comes.
package pacerhttp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// Config configures the handler.
type Config struct {
	// Token, when set, is asked of every route but /healthz as
	// "Authorization: Bearer <token>".
	Token string
	// DefaultWait is how long a wait lasts when the request gives no
	// timeout_ms (30 s); MaxWait the longest one may ask for (5 min).
	DefaultWait time.Duration
	MaxWait     time.Duration
	// Registerer, when set, gets the metrics (wahook_pace_*): the waits by
	// result and how long they were held, the outcomes by action, the
	// requests refused, and the pacer's own counters.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{DefaultWait: 30 * time.Second, MaxWait: 5 * time.Minute}
}

// maxBody is the largest request body read: a send result is well under it.
const maxBody = 64 << 10

// WaitRequest is the body of POST /v1/wait.
type WaitRequest struct {
	PhoneNumberID string `json:"phone_number_id"`
	Recipient     string `json:"recipient,omitempty"`
	TimeoutMS     int64  `json:"timeout_ms,omitempty"`
}

// The results of a wait.
const (
	WaitSend     = "send"     // send now
	WaitStopped  = "stopped"  // the number is stopped until Until (Reason): do not send from it
	WaitCooldown = "cooldown" // the recipient is in a cool-down until Until (with the pacer's CooldownNoWait, wahook pace --pace-cooldown-no-wait): send to others meanwhile
	WaitTimeout  = "timeout"  // timeout_ms passed before the turn came: nothing was taken, ask again
)

// WaitResponse is the answer of POST /v1/wait.
type WaitResponse struct {
	Result string     `json:"result"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
	// Local is true for a cool-down of the pacer's own pair rule, false
	// for one wahook wrote after a 131056.
	Local bool `json:"local,omitempty"`
}

// OutcomeRequest is the body of POST /v1/outcome: a send result as
// wahook's POST /api/v1/send-results takes it, and which send of the
// message it was.
type OutcomeRequest struct {
	schema.SendResult
	// ErrorCode is the result's error_code as given, in place of the send
	// result's: given as 0 it is Meta's code 0 (an invalid token: stop the
	// campaign), absent it is none.
	ErrorCode *int32 `json:"error_code,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
}

// OutcomeResponse is the answer of POST /v1/outcome: what to do with the
// message (pacer.Decision).
type OutcomeResponse struct {
	Action  pacer.Action      `json:"action"`
	Retry   bool              `json:"retry"`
	AfterMS int64             `json:"after_ms"`
	Code    int32             `json:"code,omitempty"`
	Class   schema.ErrorClass `json:"class,omitempty"`
	Verdict schema.Verdict    `json:"verdict,omitempty"`
	Reason  string            `json:"reason,omitempty"`
}

// RateResponse is the answer of GET /v1/rate.
type RateResponse struct {
	PhoneNumberID string               `json:"phone_number_id"`
	MPS           float64              `json:"mps"`
	Fallback      bool                 `json:"fallback"`
	Signal        *schema.PacingSignal `json:"signal,omitempty"`
	// Account is the state of the number's WABA (a ban, restrictions),
	// when the pacer knows the WABA and Meta has sent one.
	Account *schema.AccountState `json:"account,omitempty"`
}

// Error is the body of every answer but 200.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Handler serves a pacer's routes.
type Handler struct {
	p       *pacer.Pacer
	cfg     Config
	mux     *http.ServeMux
	closing context.Context // ended by Close
	close   context.CancelFunc
	m       *metrics // nil without Config.Registerer
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.m == nil {
		h.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	h.mux.ServeHTTP(rec, r)
	if rec.status >= 400 && rec.status < 500 {
		// The route the mux matched (r.Pattern, "METHOD /path" or a
		// method's 405), not the path asked for: a bounded label.
		route := "other"
		if _, path, _ := strings.Cut(r.Pattern, " "); path != "" {
			route = path
		} else if r.Pattern != "/" && r.Pattern != "" {
			route = r.Pattern
		}
		h.m.refusedOn(route)
	}
}

// statusWriter keeps the status an answer was written with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Close answers the waits held now, and every later one, 503: before the
// HTTP server's Shutdown, which would otherwise wait for their turns. The
// outcomes are still taken (the pacer reports them when it is closed, after
// the server).
func (h *Handler) Close() { h.close() }

// New returns the handler of p's routes.
func New(p *pacer.Pacer, cfg Config) *Handler {
	def := DefaultConfig()
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = def.DefaultWait
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = def.MaxWait
	}
	cfg.DefaultWait = min(cfg.DefaultWait, cfg.MaxWait)
	h := &Handler{p: p, cfg: cfg, mux: http.NewServeMux()}
	h.closing, h.close = context.WithCancel(context.Background())
	if cfg.Registerer != nil {
		h.m = newMetrics(cfg.Registerer, p)
	}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	h.mux.HandleFunc("POST /v1/wait", h.auth(h.wait))
	h.mux.HandleFunc("POST /v1/outcome", h.auth(h.outcome))
	h.mux.HandleFunc("GET /v1/rate", h.auth(h.rate))
	h.mux.HandleFunc("GET /v1/stats", h.auth(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, p.Stats()) }))
	for route, method := range map[string]string{"/v1/wait": "POST", "/v1/outcome": "POST", "/v1/rate": "GET, HEAD", "/v1/stats": "GET, HEAD", "/healthz": "GET, HEAD"} {
		h.mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", method)
			writeJSON(w, http.StatusMethodNotAllowed, Error{Error: r.Method + " " + route + ": use " + method})
		})
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, Error{Error: "no such route: POST /v1/wait, POST /v1/outcome, GET /v1/rate, GET /v1/stats, GET /healthz"})
	})
	return h
}

func (h *Handler) auth(next http.HandlerFunc) http.HandlerFunc {
	if h.cfg.Token == "" {
		return next
	}
	// Digests compared, so that the time taken does not tell the token's
	// length either.
	want := sha256.Sum256([]byte(h.cfg.Token))
	return func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeJSON(w, http.StatusUnauthorized, Error{Error: "a valid token is required: Authorization: Bearer <token>"})
			return
		}
		next(w, r)
	}
}

func (h *Handler) wait(w http.ResponseWriter, r *http.Request) {
	var req WaitRequest
	if !decode(w, r, &req) {
		return
	}
	if !validNumber(w, req.PhoneNumberID) {
		return
	}
	if len(req.Recipient) > 256 {
		writeJSON(w, http.StatusBadRequest, Error{Error: "longer than 256 bytes", Field: "recipient"})
		return
	}
	timeout := h.cfg.DefaultWait
	switch {
	case req.TimeoutMS < 0:
		writeJSON(w, http.StatusBadRequest, Error{Error: "must not be negative", Field: "timeout_ms"})
		return
	case req.TimeoutMS > h.cfg.MaxWait.Milliseconds():
		writeJSON(w, http.StatusBadRequest, Error{Error: fmt.Sprintf("at most %d (%v)", h.cfg.MaxWait.Milliseconds(), h.cfg.MaxWait), Field: "timeout_ms"})
		return
	case req.TimeoutMS > 0:
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	// The request's context ends when the client goes away: the pacer then
	// gives its turn to the next.
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	// Close ends it too.
	ctx, cancelClosing := context.WithCancelCause(ctx)
	defer cancelClosing(nil)
	defer context.AfterFunc(h.closing, func() { cancelClosing(pacer.ErrClosed) })()
	start := time.Now()
	err := pacer.ErrClosed
	if h.closing.Err() == nil {
		h.m.holding(1)
		err = h.p.Wait(ctx, req.PhoneNumberID, req.Recipient)
		h.m.holding(-1)
		if err != nil && errors.Is(context.Cause(ctx), pacer.ErrClosed) {
			err = pacer.ErrClosed
		}
	}
	var stop *pacer.StopError
	var cool *pacer.CooldownError
	result := resultGone
	switch {
	case err == nil:
		result = WaitSend
		writeJSON(w, http.StatusOK, WaitResponse{Result: WaitSend})
	case errors.As(err, &stop):
		result = WaitStopped
		until := stop.Until.UTC()
		writeJSON(w, http.StatusOK, WaitResponse{Result: WaitStopped, Until: &until, Reason: stop.Reason})
	case errors.As(err, &cool):
		result = WaitCooldown
		until := cool.Until.UTC()
		writeJSON(w, http.StatusOK, WaitResponse{Result: WaitCooldown, Until: &until, Local: cool.Local})
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		result = WaitTimeout
		writeJSON(w, http.StatusOK, WaitResponse{Result: WaitTimeout})
	case errors.Is(err, pacer.ErrClosed):
		result = resultClosed
		writeJSON(w, http.StatusServiceUnavailable, Error{Error: "the pacer is shutting down"})
	default:
		// The client went away: no one reads the answer.
		writeJSON(w, http.StatusServiceUnavailable, Error{Error: err.Error()})
	}
	h.m.answered(result, time.Since(start).Seconds())
}

func (h *Handler) outcome(w http.ResponseWriter, r *http.Request) {
	var req OutcomeRequest
	if !decode(w, r, &req) {
		return
	}
	if !validNumber(w, req.PhoneNumberID) {
		return
	}
	if req.Attempt < 0 {
		writeJSON(w, http.StatusBadRequest, Error{Error: "must not be negative", Field: "attempt"})
		return
	}
	if req.WabaID != "" && !meta.ValidWabaID(req.WabaID) {
		// The pacer keeps a number's WABA (its bans stop the number).
		writeJSON(w, http.StatusBadRequest, Error{Error: "a WABA id: 1 to 64 digits (letters, '-' and '_' are taken too)", Field: "waba_id"})
		return
	}
	res := req.SendResult
	if req.ErrorCode != nil {
		res.ErrorCode = *req.ErrorCode
		if res.Status == "" {
			res.Status = schema.SendFailed
		}
	}
	if res.Timestamp.Unix() <= 0 {
		res.Timestamp = schema.Timestamp{} // none: Outcome takes now
	}
	// Refused: what would make a wrong decision. A status Outcome does not
	// know, or "failed" without a code, would be taken for Meta's code 0
	// (an invalid token: stop the campaign). What is wrong only for the
	// report (a field too long, an accepted send without its wamid) is
	// decided all the same, and not reported (stats: report_invalid), as
	// Outcome does for a Go service.
	switch {
	case res.Status != "" && res.Status != schema.SendAccepted && res.Status != schema.SendFailed:
		writeJSON(w, http.StatusBadRequest, Error{Error: `must be "accepted" or "failed"`, Field: "status"})
		return
	case res.Status == schema.SendFailed && req.ErrorCode == nil:
		writeJSON(w, http.StatusBadRequest, Error{Error: "required when failed (Meta's code 0 too: give it as 0)", Field: "error_code"})
		return
	case res.Status == schema.SendAccepted && res.ErrorCode != 0:
		writeJSON(w, http.StatusBadRequest, Error{Error: "only with failed", Field: "error_code"})
		return
	case res.ErrorCode < 0:
		writeJSON(w, http.StatusBadRequest, Error{Error: "must be Meta's error code, a positive integer", Field: "error_code"})
		return
	}
	d := h.p.Outcome(pacer.Result{SendResult: res, Attempt: req.Attempt})
	h.m.decided(d.Action)
	writeJSON(w, http.StatusOK, OutcomeResponse{
		Action: d.Action, Retry: d.Retry, AfterMS: d.After.Milliseconds(),
		Code: d.Code, Class: d.Class, Verdict: d.Verdict, Reason: d.Reason,
	})
}

func (h *Handler) rate(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("phone_number_id")
	if !validNumber(w, id) {
		return
	}
	mps, fallback := h.p.Rate(id)
	out := RateResponse{PhoneNumberID: id, MPS: mps, Fallback: fallback}
	if s, ok := h.p.Signal(id); ok {
		out.Signal = &s
	}
	if a, ok := h.p.Account(id); ok {
		out.Account = &a
	}
	writeJSON(w, http.StatusOK, out)
}

// validNumber answers 400 unless id is a phone number id.
func validNumber(w http.ResponseWriter, id string) bool {
	if meta.ValidNumberID(id) {
		return true
	}
	writeJSON(w, http.StatusBadRequest, Error{Error: "required: a phone number id, 1 to 32 digits", Field: "phone_number_id"})
	return false
}

// decode reads a JSON body into v, answering 400 (or 413, 415) when it
// cannot: a field the route does not know is refused by name, so that a
// misspelt one is not taken as absent. The Content-Type must say JSON: a
// web page can send a body without one, or as text, to a sidecar on the
// browser's machine without asking first (no CORS preflight), and make it
// wait or stop a number.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeJSON(w, http.StatusUnsupportedMediaType, Error{Error: "the body must be JSON (Content-Type: application/json)"})
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Only white space after the value (More is false before a
		// stray '}' or ']').
		if _, end := dec.Token(); end != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err == nil {
		return true
	}
	var tooLarge *http.MaxBytesError
	var field *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		writeJSON(w, http.StatusRequestEntityTooLarge, Error{Error: fmt.Sprintf("the body is larger than %d bytes", maxBody)})
	case errors.As(err, &field):
		// The embedded send result's fields are the body's own.
		writeJSON(w, http.StatusBadRequest, Error{Error: "wrong type: " + field.Type.String() + " expected", Field: strings.TrimPrefix(field.Field, "SendResult.")})
	case errors.Is(err, io.EOF):
		writeJSON(w, http.StatusBadRequest, Error{Error: "the body is empty: a JSON object is expected"})
	default:
		writeJSON(w, http.StatusBadRequest, Error{Error: "the body is not a valid request: " + err.Error()})
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

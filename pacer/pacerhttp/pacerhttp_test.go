package pacerhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/pacer/pacerhttp"
)

const number = "100000000000201"

// server serves a pacer without NATS (no signal: every number at its
// fallback rate, here 1 message per second with a depth of one).
func server(t *testing.T, token string, edit func(*pacer.Config)) *httptest.Server {
	s, _ := serverAndHandler(t, token, edit)
	return s
}

func serverAndHandler(t *testing.T, token string, edit func(*pacer.Config)) (*httptest.Server, *pacerhttp.Handler) {
	return serverWith(t, token, edit, nil)
}

func serverWith(t *testing.T, token string, edit func(*pacer.Config), reg prometheus.Registerer) (*httptest.Server, *pacerhttp.Handler) {
	t.Helper()
	cfg := pacer.DefaultConfig()
	cfg.NoReport = true
	cfg.FallbackTierMPS, cfg.FallbackShare = 1, 1
	cfg.Logger = slog.New(slog.DiscardHandler)
	if edit != nil {
		edit(&cfg)
	}
	p, err := pacer.New(context.Background(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hcfg := pacerhttp.DefaultConfig()
	hcfg.Token = token
	hcfg.MaxWait = time.Minute
	hcfg.Registerer = reg
	h := pacerhttp.New(p, hcfg)
	s := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		s.Close()
		_ = p.Close(context.Background())
	})
	return s, h
}

func call(t *testing.T, ctx context.Context, s *httptest.Server, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRefusals: every wrong request is refused with its status and, where
// a field is wrong, the field's name; nothing is taken from the pacer.
func TestRefusals(t *testing.T) {
	s := server(t, "", nil)
	ctx := context.Background()
	for _, c := range []struct {
		method, path, ctype, body string
		status                    int
		want                      string
	}{
		{"POST", "/v1/wait", "application/json", "", 400, "the body is empty"},
		{"POST", "/v1/wait", "application/json", `{}`, 400, `"field":"phone_number_id"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"12ab"}`, 400, `"field":"phone_number_id"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":1}`, 400, `"field":"phone_number_id"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number":"` + number + `"}`, 400, `unknown field \"phone_number\"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `","timeout_ms":-1}`, 400, `"field":"timeout_ms"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `","timeout_ms":60001}`, 400, `"field":"timeout_ms"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `","recipient":"` + strings.Repeat("1", 257) + `"}`, 400, `"field":"recipient"`},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `"} {}`, 400, "more than one JSON value"},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `"}}`, 400, "more than one JSON value"},
		{"POST", "/v1/wait", "application/json", `{"phone_number_id":"` + number + `"}]`, 400, "more than one JSON value"},
		{"POST", "/v1/wait", "text/plain", `{"phone_number_id":"` + number + `"}`, 415, "must be JSON"},
		// A web page's request without a preflight: no Content-Type.
		{"POST", "/v1/wait", "", `{"phone_number_id":"` + number + `"}`, 415, "must be JSON"},
		{"POST", "/v1/outcome", "", `{"phone_number_id":"` + number + `","error_code":131048}`, 415, "must be JSON"},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","status":"accepted","message_id":"wamid.1","waba_id":"` + strings.Repeat("2", 5000) + `"}`, 400, `"field":"waba_id"`},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","status":"accepted","message_id":"wamid.1","waba_id":"1.2"}`, 400, `"field":"waba_id"`},
		{"POST", "/v1/wait", "application/json", `{"recipient":"` + strings.Repeat("1", 70<<10) + `"}`, 413, "larger than"},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","attempt":-1}`, 400, `"field":"attempt"`},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","error_code":"x"}`, 400, `"field":"error_code"`},
		// Results that would read as Meta's code 0 (an expired token) and
		// stop the campaign: refused, not decided.
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","status":"failed"}`, 400, `"field":"error_code"`},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","status":"ACCEPTED","message_id":"wamid.1"}`, 400, `"field":"status"`},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","status":"accepted","error_code":131026}`, 400, `"field":"error_code"`},
		{"POST", "/v1/outcome", "application/json", `{"phone_number_id":"` + number + `","error_code":-5}`, 400, `"field":"error_code"`},
		{"GET", "/v1/rate", "", "", 400, `"field":"phone_number_id"`},
		{"GET", "/v1/nothing", "", "", 404, "no such route"},
		{"GET", "/v1/wait", "", "", 405, "use POST"},
		{"POST", "/v1/rate", "application/json", "", 405, "use GET"},
	} {
		req, _ := http.NewRequestWithContext(ctx, c.method, s.URL+c.path, strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s %.80s: %d %s; want %d with %s", c.method, c.path, c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
	// None of them took the number's one token.
	if code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","timeout_ms":100}`); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Errorf("the first valid wait: %d %s", code, body)
	}
}

// TestToken: with a token, every route but /healthz asks for it.
func TestToken(t *testing.T) {
	const token = "pace-token-0123456789"
	s := server(t, token, nil)
	ctx := context.Background()
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		if code, body := call(t, ctx, s, "GET", "/v1/rate?phone_number_id="+number, tok, ""); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d %s", tok, code, body)
		}
	}
	if code, body := call(t, ctx, s, "GET", "/v1/rate?phone_number_id="+number, token, ""); code != 200 || !strings.Contains(body, `"fallback":true`) {
		t.Errorf("with the token: %d %s", code, body)
	}
	// The scheme's name without regard to case (RFC 9110).
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/rate?phone_number_id="+number, nil)
	req.Header.Set("Authorization", "bearer "+token)
	if resp, err := s.Client().Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("with the token after \"bearer\": %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, body := call(t, ctx, s, "GET", "/v1/stats", token, ""); code != 200 || !strings.Contains(body, `"fallback_numbers":1`) {
		t.Errorf("stats: %d %s", code, body)
	}
	if code, _ := call(t, ctx, s, "GET", "/healthz", "", ""); code != 200 {
		t.Errorf("healthz without a token: %d", code)
	}
}

// TestWaitPaces: waits go at the number's rate; one whose timeout_ms
// passes first is answered timeout, and one whose client goes away gives
// its turn to the next instead of keeping it.
func TestWaitPaces(t *testing.T) {
	// A turn every 4 s: a quarter of the fallback's 1 mps.
	s := server(t, "", func(c *pacer.Config) { c.Share = 0.25 })
	ctx := context.Background()
	wait := func(ctx context.Context, timeoutMS int) (int, string) {
		return call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","recipient":"15551230001","timeout_ms":`+itoa(timeoutMS)+`}`)
	}
	if code, body := wait(ctx, 100); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Fatalf("the first wait: %d %s", code, body)
	}
	first := time.Now()
	if code, body := wait(ctx, 200); code != 200 || !strings.Contains(body, `"result":"timeout"`) {
		t.Fatalf("a wait of 200 ms: %d %s", code, body)
	}
	// A client that gives up before its turn (4 s after the first send):
	// the next takes that turn, not the one after it (8 s).
	gone, cancel := context.WithCancel(ctx)
	left := make(chan struct{})
	go func() {
		defer close(left)
		wait(gone, 30_000)
	}()
	time.Sleep(200 * time.Millisecond) // it is queued
	cancel()
	<-left
	code, body := wait(ctx, 30_000)
	if took := time.Since(first); code != 200 || !strings.Contains(body, `"result":"send"`) || took > 6*time.Second {
		t.Fatalf("the wait after the one that left: %d %s %v after the first send; want send at the turn of the one that left (4 s), not the next (8 s)", code, body, took)
	}
}

// TestOutcomeAndHolds: the decision after a send, and the waits that a
// stop or a recipient's cool-down answers at once.
func TestOutcomeAndHolds(t *testing.T) {
	s := server(t, "", func(c *pacer.Config) { c.CooldownNoWait = true; c.FallbackTierMPS = 80 })
	ctx := context.Background()
	outcome := func(body string) pacerhttp.OutcomeResponse {
		t.Helper()
		code, b := call(t, ctx, s, "POST", "/v1/outcome", "", body)
		var d pacerhttp.OutcomeResponse
		if code != 200 || json.Unmarshal([]byte(b), &d) != nil {
			t.Fatalf("outcome %s: %d %s", body, code, b)
		}
		return d
	}
	if d := outcome(`{"phone_number_id":"` + number + `","status":"accepted","message_id":"wamid.1"}`); d.Action != pacer.ActionDone || d.Retry {
		t.Errorf("accepted: %+v", d)
	}
	// What is wrong only for the report is decided all the same: a zero
	// timestamp (now), an accepted send without its wamid.
	if d := outcome(`{"phone_number_id":"` + number + `","error_code":130429,"timestamp":0}`); d.Action != pacer.ActionRetry || d.Class != "throughput" {
		t.Errorf("130429 with a zero timestamp: %+v", d)
	}
	if d := outcome(`{"phone_number_id":"` + number + `","status":"accepted"}`); d.Action != pacer.ActionDone {
		t.Errorf("accepted without a message_id: %+v", d)
	}
	// Neither a status, a message_id nor an error_code: the send's answer
	// was lost, and the message is tried again.
	if d := outcome(`{"phone_number_id":"` + number + `","attempt":1}`); d.Action != pacer.ActionRetry || d.AfterMS < 500 {
		t.Errorf("a send without an answer: %+v", d)
	}
	d := outcome(`{"phone_number_id":"` + number + `","error_code":131056,"recipient":"15551230002","attempt":1}`)
	if d.Action != pacer.ActionRetry || !d.Retry || d.AfterMS < 5900 || d.Verdict != "wait_recipient" {
		t.Errorf("131056: %+v", d)
	}
	code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","recipient":"15551230002"}`)
	var w pacerhttp.WaitResponse
	if code != 200 || json.Unmarshal([]byte(body), &w) != nil || w.Result != pacerhttp.WaitCooldown || w.Until == nil || time.Until(*w.Until) < 4*time.Second {
		t.Errorf("a wait for the recipient in a cool-down: %d %s", code, body)
	}
	if code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","recipient":"15551230003"}`); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Errorf("another recipient: %d %s", code, body)
	}
	if d := outcome(`{"phone_number_id":"` + number + `","error_code":131048,"timestamp":"2026-12-07T10:00:00Z"}`); d.Action != pacer.ActionStopNumber || d.Class != "quality" || d.Code != 131048 {
		t.Errorf("131048: %+v", d)
	}
	// Meta's code 0, given as 0: an invalid token stops the campaign.
	if d := outcome(`{"phone_number_id":"100000000000202","status":"failed","error_code":0}`); d.Action != pacer.ActionStopCampaign || d.Class != "auth" {
		t.Errorf("code 0: %+v", d)
	}
	code, body = call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`"}`)
	w = pacerhttp.WaitResponse{}
	if code != 200 || json.Unmarshal([]byte(body), &w) != nil || w.Result != pacerhttp.WaitStopped || w.Until == nil || !strings.Contains(w.Reason, "131048") {
		t.Errorf("a wait on the stopped number: %d %s", code, body)
	}
}

// TestCloseAnswersHeldWaits: Close answers the waits held (503) at once,
// so that the server's shutdown does not wait for their turns, and the
// outcomes are still taken.
func TestCloseAnswersHeldWaits(t *testing.T) {
	s, h := serverAndHandler(t, "", func(c *pacer.Config) { c.Share = 0.05 }) // a turn every 20 s
	ctx := context.Background()
	if code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`"}`); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Fatalf("the first wait: %d %s", code, body)
	}
	type answer struct {
		code int
		body string
	}
	held := make(chan answer, 1)
	go func() {
		code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","timeout_ms":50000}`)
		held <- answer{code, body}
	}()
	time.Sleep(200 * time.Millisecond) // it is held
	h.Close()
	select {
	case a := <-held:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting down") {
			t.Errorf("the held wait after Close: %d %s", a.code, a.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held wait was not answered by Close")
	}
	if code, body := call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","timeout_ms":50000}`); code != http.StatusServiceUnavailable {
		t.Errorf("a wait after Close: %d %s", code, body)
	}
	if code, body := call(t, ctx, s, "POST", "/v1/outcome", "", `{"phone_number_id":"`+number+`","status":"accepted","message_id":"wamid.2"}`); code != 200 {
		t.Errorf("an outcome after Close: %d %s", code, body)
	}
}

// TestMetrics: the waits by result, the outcomes by action and the
// requests refused by route are counted, and the pacer's own counters are
// read at each scrape.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := serverWith(t, "", nil, reg)
	ctx := context.Background()
	call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`"}`)                 // send
	call(t, ctx, s, "POST", "/v1/wait", "", `{"phone_number_id":"`+number+`","timeout_ms":50}`) // timeout: 1 mps
	call(t, ctx, s, "POST", "/v1/wait", "", `{}`)                                               // refused
	call(t, ctx, s, "GET", "/v1/nothing", "", "")                                               // refused, route other
	call(t, ctx, s, "POST", "/v1/outcome", "", `{"phone_number_id":"`+number+`","error_code":131026}`)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[name] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"wahook_pace_waits_total,result=send":               1,
		"wahook_pace_waits_total,result=timeout":            1,
		"wahook_pace_waits_total,result=stopped":            0,
		"wahook_pace_wait_seconds":                          1,
		"wahook_pace_waits_held":                            0,
		"wahook_pace_outcomes_total,action=drop":            1,
		"wahook_pace_requests_refused_total,route=/v1/wait": 1,
		"wahook_pace_requests_refused_total,route=other":    1,
		"wahook_pace_fallback_numbers":                      1,
		"wahook_pace_report_invalid_total":                  0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor/stage2"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestPaceSidecar runs wahook pace against a NATS with wahook's buckets and
// RAW stream: a sender in any language paces its sends by the signal in
// wahook_pacing over HTTP, is told what to do after an error, and its
// results reach wahook on RAW.
func TestPaceSidecar(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := stage2.EnsureBuckets(ctx, js, 1, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: schema.StreamRaw, Subjects: []string{schema.RawSubject(">")}}); err != nil {
		t.Fatal(err)
	}
	const number = "109876543210778"
	sig, _ := json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: number, UpdatedAt: time.Now().UTC(),
		TierMPS: 80, Advice: schema.AdviceSlowDown, RecommendedMPS: 5, Reason: "test"})
	kv, err := js.KeyValue(ctx, schema.BucketPacing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, schema.PacingKey(number), sig); err != nil {
		t.Fatal(err)
	}

	listen, metricsListen := freeAddr(t), freeAddr(t)
	rctx, rcancel := context.WithCancel(ctx)
	var out, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"pace", "--nats-url", srv.URL(), "--pace-listen", listen, "--pace-token", e2eToken,
			"--phone-hash-key", "pace-test-key-0123456789", "--metrics-listen", metricsListen, "--pace-replies", "--log-level", "warn"}, &out, &logs)
	}()
	stopped := false
	defer func() {
		if !stopped {
			rcancel()
			<-done
		}
	}()
	do := func(method, path, token, body string) (int, string) {
		return httpDo(ctx, method, "http://"+listen+path, token, body)
	}
	testutil.Eventually(t, 30*time.Second, "wahook pace to answer /healthz", func() (bool, string) {
		select {
		case code := <-done:
			done <- code
			return true, ""
		default:
		}
		code, body := do(http.MethodGet, "/healthz", "", "")
		return code == 200, fmt.Sprintf("%d %s\n%s", code, body, logs.String())
	})
	if code, body := do(http.MethodGet, "/v1/rate?phone_number_id="+number, "", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s", code, body)
	}
	if code, body := do(http.MethodGet, "/v1/rate?phone_number_id="+number, e2eToken, ""); code != 200 ||
		!strings.Contains(body, `"mps":5,`) || !strings.Contains(body, `"fallback":false`) {
		t.Errorf("the rate of a number with a signal of 5 mps: %d %s", code, body)
	}
	if code, body := do(http.MethodPost, "/v1/wait", e2eToken, `{"phone_number_id":"`+number+`","recipient":"15551230001"}`); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Errorf("wait: %d %s", code, body)
	}
	res := `{"phone_number_id":"` + number + `","status":"failed","error_code":131048,"recipient":"15551230001","timestamp":` + fmt.Sprint(time.Now().Unix()) + `,"attempt":1}`
	if code, body := do(http.MethodPost, "/v1/outcome", e2eToken, res); code != 200 || !strings.Contains(body, `"action":"stop_number"`) || !strings.Contains(body, `"class":"quality"`) {
		t.Errorf("outcome of 131048: %d %s", code, body)
	}
	if code, body := do(http.MethodPost, "/v1/wait", e2eToken, `{"phone_number_id":"`+number+`"}`); code != 200 || !strings.Contains(body, `"result":"stopped"`) || !strings.Contains(body, `"until":`) {
		t.Errorf("wait after 131048: %d %s", code, body)
	}
	// The result reached wahook's RAW stream, as the pacer reports it.
	testutil.Eventually(t, 30*time.Second, "the send result on RAW", func() (bool, string) {
		st, err := js.Stream(ctx, schema.StreamRaw)
		if err != nil {
			return false, err.Error()
		}
		m, err := st.GetLastMsgForSubject(ctx, schema.RawSubject(schema.SendResultsApp))
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(m.Data), `"error_code":131048`), string(m.Data)
	})
	// The metrics, on their own listener.
	resp, err := http.Get("http://" + metricsListen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`wahook_pace_waits_total{result="send"} 1`, `wahook_pace_waits_total{result="stopped"} 1`,
		`wahook_pace_outcomes_total{action="stop_number"} 1`, `wahook_pace_requests_refused_total{route="/v1/rate"} 1`, "go_goroutines"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// WABAs Meta restricted (stage 2 writes their states): a sender of
	// replies (--pace-replies) is stopped by a restriction of replies, not
	// by one of business-initiated messages. The pacer learns each number's
	// WABA from its results.
	accounts, err := js.KeyValue(ctx, schema.BucketAccounts)
	if err != nil {
		t.Fatal(err)
	}
	for waba, typ := range map[string]string{"209374655180301": schema.RestrictBusinessInitiated, "209374655180302": schema.RestrictCustomerInitiated} {
		st, _ := json.Marshal(schema.AccountState{Version: schema.AccountVersion, WabaID: waba, UpdatedAt: time.Now().UTC(),
			Restrictions: []schema.AccountRestriction{{Type: typ}}})
		if _, err := accounts.Put(ctx, schema.AccountKey(waba), st); err != nil {
			t.Fatal(err)
		}
	}
	for number, waba := range map[string]string{"109876543210801": "209374655180301", "109876543210802": "209374655180302"} {
		res := `{"phone_number_id":"` + number + `","waba_id":"` + waba + `","status":"accepted","message_id":"wamid.r` + number + `","attempt":1}`
		if code, body := do(http.MethodPost, "/v1/outcome", e2eToken, res); code != 200 {
			t.Fatalf("outcome: %d %s", code, body)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the number of the WABA whose replies are restricted stopped", func() (bool, string) {
		code, body := do(http.MethodPost, "/v1/wait", e2eToken, `{"phone_number_id":"109876543210802"}`)
		return code == 200 && strings.Contains(body, `"result":"stopped"`) && strings.Contains(body, schema.RestrictCustomerInitiated), body
	})
	if code, body := do(http.MethodPost, "/v1/wait", e2eToken, `{"phone_number_id":"109876543210801"}`); code != 200 || !strings.Contains(body, `"result":"send"`) {
		t.Errorf("a reply from a number of a WABA restricted from business-initiated messages: %d %s", code, body)
	}
	if code, body := do(http.MethodGet, "/v1/rate?phone_number_id=109876543210802", e2eToken, ""); code != 200 ||
		!strings.Contains(body, `"account":{"version":1,"waba_id":"209374655180302"`) || !strings.Contains(body, schema.RestrictCustomerInitiated) {
		t.Errorf("the rate of a number of a restricted WABA, with its state: %d %s", code, body)
	}
	// A wait held by a pause an hour long does not hold up the shutdown:
	// it is answered 503 at once, and the command exits 0.
	paused := "109876543210779"
	until := time.Now().Add(time.Hour).UTC()
	sig, _ = json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: paused, UpdatedAt: time.Now().UTC(),
		TierMPS: 80, Advice: schema.AdvicePause, MaintenanceUntil: &until, Reason: "test"})
	if _, err := kv.Put(ctx, schema.PacingKey(paused), sig); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the pause read", func() (bool, string) {
		_, body := do(http.MethodGet, "/v1/rate?phone_number_id="+paused, e2eToken, "")
		return strings.Contains(body, `"advice":"pause"`), body
	})
	type answer struct {
		code int
		body string
	}
	held := make(chan answer, 1)
	go func() {
		code, body := do(http.MethodPost, "/v1/wait", e2eToken, `{"phone_number_id":"`+paused+`","timeout_ms":120000}`)
		held <- answer{code, body}
	}()
	time.Sleep(300 * time.Millisecond) // it is held
	start := time.Now()
	rcancel()
	stopped = true
	if code := <-done; code != 0 {
		t.Errorf("wahook pace exited %d:\n%s\n%s", code, out.String(), logs.String())
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("wahook pace took %v to stop with a wait held", took)
	}
	if a := <-held; a.code != http.StatusServiceUnavailable {
		t.Errorf("the wait held at the shutdown: %d %s", a.code, a.body)
	}
}

// TestPaceRefusesOpenListenWithoutToken: a --pace-listen beyond loopback
// needs a --pace-token, or anyone who reaches it could hold a number's
// turns or report results in its name.
func TestPaceRefusesOpenListenWithoutToken(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--pace-listen", "0.0.0.0:8095"}, 2},
		{[]string{"--pace-listen", ":8095"}, 2}, // every interface
		{[]string{"--pace-listen", "LocalHost:8095", "--check"}, 0},
		{[]string{"--pace-listen", "10.0.0.5:8095", "--pace-token", "short"}, 2},
		{[]string{"--pace-listen", "0.0.0.0:8095", "--pace-token", e2eToken, "--check"}, 0},
		{[]string{"--pace-listen", "127.0.0.1:8095", "--check"}, 0},
		{[]string{"--pace-listen", "[::1]:8095", "--check"}, 0},
		{[]string{"--pace-listen", "127.0.0.1:8095", "--pace-share", "0", "--check"}, 2},
	} {
		var out, errs strings.Builder
		args := append([]string{"pace", "--nats-url", "nats://127.0.0.1:1"}, c.args...)
		if code := run(context.Background(), args, &out, &errs); code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.code, out.String(), errs.String())
		}
	}
}

// httpDo sends a request with a bearer token (none when empty) and a JSON
// body (none when empty); it returns the status and the body, or 0 and the
// error.
func httpDo(ctx context.Context, method, url, token, body string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// TestRunScript runs the README's first command, scripts/run.sh, as a new
// user does: no WAHOOK_* setting but the ClickHouse to use (without it the
// script installs and starts its own on port 9000, which a test cannot
// hold), and the listeners moved to free ports with flags, as the README
// allows. The script builds wahook, says which demo secrets it uses and
// where the dashboard is, and the system it starts answers Meta's
// handshake with the demo verify token, stores a webhook signed with the
// demo app secret, decodes it into ClickHouse, and shows it through the
// query API to the demo API token.
func TestRunScript(t *testing.T) {
	ch := schematest.ClickHouse(t)
	listen, apiListen, natsListen := freeAddr(t), freeAddr(t), freeAddr(t)
	cmd := exec.Command("../../scripts/run.sh", "--listen", listen, "--api-listen", apiListen,
		"--nats-listen", natsListen, "--data-dir", t.TempDir(), "--flush-interval", "100ms")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WAHOOK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "WAHOOK_CLICKHOUSE_DSN="+ch.DSN)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// The script's go build runs in its process group; the group goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	base, apiBase := "http://"+listen, "http://"+apiListen
	// The first build of the binary takes a while on a cold cache.
	testutil.Eventually(t, 5*time.Minute, "run.sh's wahook to answer /readyz", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("run.sh ended: %s", logs.String())
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, logs.String())
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("%d\n%s", resp.StatusCode, logs.String())
	})
	for _, want := range []string{
		"using the demo secret 'demo-app-secret'",
		"using 'demo-verify-token'",
		"takes 'Authorization: Bearer demo-api-token-change-me'",
		"dashboard on " + apiBase + "/",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("run.sh did not say %q:\n%s", want, logs.String())
		}
	}

	// Meta's handshake, with the verify token the script printed.
	resp, err := http.Get(base + "/webhook?hub.mode=subscribe&hub.verify_token=demo-verify-token&hub.challenge=1158201444")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1158201444" {
		t.Fatalf("handshake: %d %q", resp.StatusCode, b)
	}

	// A failed status of now, signed with the demo app secret.
	now := time.Now().UTC()
	body := fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"209374655180223","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"447700900123","phone_number_id":"120447163309875"},"statuses":[{"id":"wamid.run-script-%d","status":"failed","timestamp":"%d","recipient_id":"447700900456","errors":[{"code":131048,"title":"Spam rate limit hit"}]}]},"field":"messages"}]}]}`,
		now.UnixNano(), now.Unix())
	if r, err := http.DefaultClient.Do(signedRequest(base+"/webhook", "wrong-secret", body)); err != nil || r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a body signed with another secret: %v %v, want 401", r, err)
	} else {
		r.Body.Close()
	}
	r, err := http.DefaultClient.Do(signedRequest(base+"/webhook", "demo-app-secret", body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("a body signed with the demo secret: %d\n%s", r.StatusCode, logs.String())
	}

	// Through the query API, with the demo token: the failure by its code.
	q := url.Values{"origin": {"status"}, "group_by": {"code"},
		"from": {now.Add(-time.Hour).Format(time.RFC3339)}, "to": {now.Add(time.Hour).Format(time.RFC3339)}}
	apiGet := func(path, token string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, apiBase+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := apiGet("/api/v1/failures?"+q.Encode(), ""); code != http.StatusUnauthorized {
		t.Fatalf("the API without a token: %d %s", code, b)
	}
	testutil.Eventually(t, 30*time.Second, "the failure in /api/v1/failures", func() (bool, string) {
		code, b := apiGet("/api/v1/failures?"+q.Encode(), "demo-api-token-change-me")
		if code != 200 {
			return false, fmt.Sprintf("%d %s", code, b)
		}
		var f struct {
			Rows []struct {
				Code     int32
				Failures uint64
			}
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		return len(f.Rows) == 1 && f.Rows[0].Code == 131048 && f.Rows[0].Failures == 1, string(b)
	})
	if code, b := apiGet("/", ""); code != 200 || !strings.Contains(string(b), "<html") {
		t.Errorf("the dashboard at %s/: %d %.200s", apiBase, code, b)
	}
}

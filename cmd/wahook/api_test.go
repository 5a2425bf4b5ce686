package main

import (
	"strings"
	"testing"
)

func TestAPIConfiguration(t *testing.T) {
	t.Setenv("WAHOOK_API_TOKEN", "")
	if code, _, errOut := runCmd(t, "api", "--check"); code != 2 || !strings.Contains(errOut, "no API token") {
		t.Fatalf("no token: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "api", "--check", "--api-token", "short"); code != 2 || !strings.Contains(errOut, "16 characters") {
		t.Fatalf("short token: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "api", "--check", "--api-token", "a-long-enough-token", "--api-limit-reports", "lots"); code != 2 || !strings.Contains(errOut, "--api-limit-reports") {
		t.Fatalf("bad limit: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "api", "--check", "--api-token", "a-long-enough-token", "--number-tier", "123"); code != 2 || !strings.Contains(errOut, "--number-tier") {
		t.Fatalf("bad tier: code %d, %q", code, errOut)
	}
	t.Setenv("WAHOOK_API_TOKEN", "first-token-0123456789,second-token-0123456789")
	if code, out, errOut := runCmd(t, "api", "--check", "--api-limit-global", "100/10s", "--number-tier", "123=20"); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("valid: code %d, %q %q", code, out, errOut)
	}
	code, out, _ := runCmd(t, "api", "--config-dump")
	if code != 0 || strings.Contains(out, "first-token") || !strings.Contains(out, "api-token=(redacted),(redacted)\n") ||
		!strings.Contains(out, "api-limit-global=600/1m0s\n") || !strings.Contains(out, "api-limit-send-results-token=300/1m0s\n") {
		t.Fatalf("dump (code %d):\n%s", code, out)
	}
	// serve checks the API's flags only when a token turns it on.
	t.Setenv("WAHOOK_APP_SECRET", "s1")
	if code, _, errOut := runCmd(t, "serve", "--check", "--api-limit-global", "bad"); code != 2 || !strings.Contains(errOut, "--api-limit-global") {
		t.Fatalf("serve with a bad API limit: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "report", "nothing"); code != 2 || !strings.Contains(errOut, "funnel") {
		t.Fatalf("unknown report: code %d, %q", code, errOut)
	}
}

// TestEmptyListenRefused: an empty --api-listen (api, and serve with a
// token) or process's --listen is a usage error, as the webhook's --listen
// is. Before, WAHOOK_API_LISTEN= or WAHOOK_LISTEN= passed --check and the
// listener took every interface on a random port ([::]:34095).
func TestEmptyListenRefused(t *testing.T) {
	t.Setenv("WAHOOK_API_TOKEN", "first-token-0123456789")
	t.Setenv("WAHOOK_APP_SECRET", "s1")
	t.Setenv("WAHOOK_PHONE_HASH_KEY", "k")
	t.Setenv("WAHOOK_API_LISTEN", "")
	t.Setenv("WAHOOK_LISTEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"api", "--check"}, "--api-listen (WAHOOK_API_LISTEN) must not be empty"},
		{[]string{"serve", "--check", "--listen", ":8080"}, "--api-listen (WAHOOK_API_LISTEN) must not be empty"},
		{[]string{"process", "--check", "--nats-url", "nats://127.0.0.1:4222"}, "--listen (WAHOOK_LISTEN) must not be empty"},
	} {
		if code, _, errOut := runCmd(t, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// Without a token serve runs no API: its address is not asked for.
	t.Setenv("WAHOOK_API_TOKEN", "")
	if code, out, errOut := runCmd(t, "serve", "--check", "--listen", ":8080"); code != 0 {
		t.Fatalf("serve without the API: code %d, %q %q", code, out, errOut)
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// syncBuffer is a bytes.Buffer safe for a goroutine writing and a test
// reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestUsageAndVersion(t *testing.T) {
	if code, out, _ := runCmd(t); code != 2 || !strings.Contains(out, "serve") {
		t.Fatalf("no command: code %d, usage %q", code, out)
	}
	if code, _, errOut := runCmd(t, "nosuch"); code != 2 || !strings.Contains(errOut, `unknown command "nosuch"`) {
		t.Fatalf("unknown command: code %d, %q", code, errOut)
	}
	for _, name := range []string{"serve", "ingest", "process", "migrate", "replay", "loadtest", "version"} {
		if code, _, errOut := runCmd(t, name, "-h"); code != 0 {
			t.Errorf("%s -h: code %d, %s", name, code, errOut)
		}
	}
	if code, out, _ := runCmd(t, "version"); code != 0 || !strings.HasPrefix(out, "wahook ") {
		t.Fatalf("version: code %d, %q", code, out)
	}
}

func TestCheckAndEnvironment(t *testing.T) {
	t.Setenv("WAHOOK_APP_SECRET", "")
	if code, _, errOut := runCmd(t, "serve", "--check"); code != 2 || !strings.Contains(errOut, "no app secret") {
		t.Fatalf("no secret: code %d, %q; want 2 naming the missing secret", code, errOut)
	}
	t.Setenv("WAHOOK_APP_SECRET", "s1,shop=s2")
	if code, out, errOut := runCmd(t, "serve", "--check"); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("valid config: code %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--app-secret", "bad name!=x=y", "--ack-timeout", "0s"); code != 2 || !strings.Contains(errOut, "ack timeout") {
		t.Fatalf("bad ack timeout: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Fatalf("unknown flag: code %d, %q; want 2", code, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--raw-replicas", "9"); code != 2 || !strings.Contains(errOut, "replicas") {
		t.Fatalf("bad replicas: code %d, %q", code, errOut)
	}
	// More replicas than the embedded server's one copy: refused at the
	// check (the start-up retried the stream for ever, never listening);
	// with NATS servers of one's own, taken.
	for _, flag := range []string{"--raw-replicas", "--events-replicas", "--kv-replicas"} {
		if code, _, errOut := runCmd(t, "serve", "--check", flag, "3"); code != 2 || !strings.Contains(errOut, flag+" 3: the embedded NATS server keeps one copy") {
			t.Errorf("%s 3 on the embedded server: code %d, %q; want 2", flag, code, errOut)
		}
		if code, out, errOut := runCmd(t, "serve", "--check", "--nats-url", "nats://127.0.0.1:4222", flag, "3"); code != 0 || !strings.Contains(out, "configuration ok") {
			t.Errorf("%s 3 with --nats-url: code %d, %q %q; want 0", flag, code, out, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--raw-duplicate-window", "1s"); code != 2 || !strings.Contains(errOut, "shorter than the ack timeout") {
		t.Fatalf("stream window under the ack timeout: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--dedupe-window", "500ms"); code != 2 || !strings.Contains(errOut, "dedupe window") {
		t.Fatalf("bad dedupe window: code %d, %q", code, errOut)
	}
	if code, out, errOut := runCmd(t, "serve", "--check", "--dedupe-window", "0"); code != 0 {
		t.Fatalf("dedupe off: code %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "ingest", "--check"); code != 2 || !strings.Contains(errOut, "--nats-url is required") {
		t.Fatalf("ingest without nats: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--check", "--jetstream-sync", "sometimes"); code != 2 || !strings.Contains(errOut, "jetstream-sync") {
		t.Fatalf("bad sync: code %d, %q", code, errOut)
	}
	// The embedded server's own flags with --nats-url, where no embedded
	// server runs: refused on the command line (they were ignored in
	// silence, a store limit bounding nothing); at their defaults, or by
	// variable (a migrate beside a serve inherits serve's), taken.
	for _, c := range [][]string{
		{"serve", "--check", "--nats-url", "nats://127.0.0.1:1", "--jetstream-max-store", "1000000000"},
		{"serve", "--check", "--nats-url", "nats://127.0.0.1:1", "--nats-listen", ""},
		{"migrate", "--nats-url", "nats://127.0.0.1:1", "--clickhouse-dsn", "", "--jetstream-sync", "always"},
		{"replay", "--nats-url", "nats://127.0.0.1:1", "--since", "1h", "--jetstream-sync", "1s"},
	} {
		flag := c[len(c)-2]
		if code, _, errOut := runCmd(t, c...); code != 2 || !strings.Contains(errOut, flag+" is for the embedded NATS server") {
			t.Errorf("%s %s with --nats-url: code %d, %q; want 2 naming %s", c[0], flag, code, errOut, flag)
		}
	}
	t.Run("by variable", func(t *testing.T) {
		t.Setenv(EnvName("nats-listen"), "127.0.0.1:14222")
		t.Setenv(EnvName("jetstream-sync"), "always")
		if code, out, errOut := runCmd(t, "serve", "--check", "--nats-url", "nats://127.0.0.1:1"); code != 0 {
			t.Errorf("WAHOOK_NATS_LISTEN and WAHOOK_JETSTREAM_SYNC with --nats-url: code %d, %q %q; want 0", code, out, errOut)
		}
	})
	if code, out, errOut := runCmd(t, "serve", "--check", "--nats-url", "nats://127.0.0.1:1", "--data-dir", t.TempDir()); code != 0 {
		t.Errorf("--data-dir with --nats-url: code %d, %q %q; want 0", code, out, errOut)
	}
	// A body limit the embedded server cannot carry fails the check (it
	// passed, and serve then refused to start once NATS was up); with
	// external servers it is checked against theirs once connected.
	if code, _, errOut := runCmd(t, "serve", "--check", "--body-limit", "16777216"); code != 2 || !strings.Contains(errOut, "max_payload of 8388608") {
		t.Fatalf("body limit over the embedded max_payload: code %d, %q", code, errOut)
	}
	if code, out, errOut := runCmd(t, "serve", "--check", "--body-limit", "16777216", "--nats-url", "nats://127.0.0.1:1"); code != 0 {
		t.Fatalf("body limit with external NATS: code %d, %q %q", code, out, errOut)
	}
}

func TestConfigDumpRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("verify-me-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secretFile, []byte("topsecret-a\nshop=topsecret-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WAHOOK_APP_SECRET", "")
	os.Unsetenv("WAHOOK_APP_SECRET")
	t.Setenv("WAHOOK_APP_SECRET_FILE", secretFile)
	t.Setenv("WAHOOK_VERIFY_TOKEN_FILE", tokenFile)
	t.Setenv("WAHOOK_LISTEN", "127.0.0.1:9999")
	code, out, errOut := runCmd(t, "serve", "--config-dump", "--data-dir", "/srv/wahook")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, secret := range []string{"verify-me-secret", "topsecret-a", "topsecret-b"} {
		if strings.Contains(out, secret) {
			t.Fatalf("dump shows secret %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		"listen=127.0.0.1:9999\n",                 // from the environment
		"data-dir=/srv/wahook\n",                  // from the flag
		"verify-token=(redacted)\n",               // from the _FILE variable
		"app-secret=(redacted),shop=(redacted)\n", // app names kept
		"dedupe-window=2m0s\n",
		"dedupe-max-entries=4000000\n",
		"raw-duplicate-window=2s\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("dump lacks %q:\n%s", want, out)
		}
	}
	// The flag wins over the environment.
	_, out, _ = runCmd(t, "serve", "--config-dump", "--listen", ":7000")
	if !strings.Contains(out, "listen=:7000\n") {
		t.Fatalf("flag did not win over WAHOOK_LISTEN:\n%s", out)
	}
}

// TestLoadtestConfigDumpRedactsURLs: loadtest's --config-dump hides the
// ClickHouse DSN and NATS URLs its checks are given, and loadtest
// campaign's --nats-url, as serve's dump hides its own. Before, they were
// printed whole: check-clickhouse-dsn=clickhouse://default:PW@...
func TestLoadtestConfigDumpRedactsURLs(t *testing.T) {
	for _, args := range [][]string{
		{"loadtest", "--config-dump", "--check-clickhouse-dsn", "clickhouse://default:S3CRET1@127.0.0.1:9000/wahook",
			"--check-nats-url", "nats://u:S3CRET2@127.0.0.1:4222", "--check-pacing-nats-url", "nats://u:S3CRET3@127.0.0.1:4222"},
		{"loadtest", "campaign", "--config-dump", "--nats-url", "nats://u:S3CRET4@127.0.0.1:4222"},
	} {
		code, out, errOut := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("%v: code %d: %s", args, code, errOut)
		}
		if strings.Contains(out, "S3CRET") {
			t.Fatalf("%v: the dump shows a password:\n%s", args, out)
		}
		if !strings.Contains(out, "nats-url=(redacted)\n") {
			t.Fatalf("%v: the dump lacks the redacted NATS URL:\n%s", args, out)
		}
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
}

// TestServeLifecycle runs "wahook serve" in-process: embedded JetStream, a
// signed fixture stored, readiness, and an ordered shutdown on cancel.
func TestServeLifecycle(t *testing.T) {
	ch := schematest.ClickHouse(t)
	dataDir := t.TempDir()
	listen, natsListen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", dataDir,
			"--app-secret", "wahook-fixture-app-secret", "--verify-token", "tok", "--log-format", "console",
			"--clickhouse-dsn", ch.DSN, "--flush-interval", "100ms"}, io.Discard, &stderr)
	}()
	base := "http://" + listen
	waitReady(t, base, &stderr)
	b, err := os.ReadFile("../../testdata/webhooks/status_failed_131048.json")
	if err != nil {
		t.Fatalf("shared fixtures: %v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/webhook", bytes.NewReader(b))
	req.Header.Set(schema.SignatureHeader, "sha256=b07d013d8a99ad3c79987b328274a4bc0fc21f52c767bb7c22e9afbb6373869c")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("post fixture: %v %v", resp, err)
	}
	resp.Body.Close()

	// Another client reaches the embedded server on --nats-listen and finds
	// the body in the RAW stream.
	nc, err := nats.Connect("nats://" + natsListen)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	var m *jetstream.RawStreamMsg
	s, err := js.Stream(cctx, schema.StreamRaw)
	if err == nil {
		m, err = s.GetLastMsgForSubject(cctx, schema.RawSubject(schema.DefaultApp))
	}
	ccancel()
	nc.Close()
	if err != nil || !bytes.Equal(m.Data, b) {
		t.Fatalf("fixture not in %s: %v", schema.StreamRaw, err)
	}

	// A second embedded server must not open the running one's store.
	if code, _, errOut := runCmd(t, "migrate", "--data-dir", dataDir, "--clickhouse-dsn", ""); code != 2 || !strings.Contains(errOut, "in use by another wahook") {
		t.Fatalf("migrate on a store in use: code %d, %q; want 2 and a clear refusal", code, errOut)
	}

	// Stage 1 writes the fixture's failed status to ClickHouse: HTTP -> RAW
	// -> stage 1 -> ClickHouse in one process.
	testutil.Eventually(t, 20*time.Second, "the fixture's 131048 in ClickHouse", func() (bool, string) {
		var n uint64
		err := ch.Conn.QueryRow(ctx, "SELECT count() FROM "+ch.Database+".errors WHERE code = 131048 AND origin = 'status'").Scan(&n)
		return err == nil && n == 1, fmt.Sprintf("%d rows, %v\n%s", n, err, stderr.String())
	})

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not stop within 40s of cancel")
	}
	log := stderr.String()
	order := []string{"http stopped, in-flight requests answered", "pending publishes acknowledged",
		"stage 1 stopped, last batch written", "nats connection drained", "embedded nats-server stopped"}
	last := -1
	if strings.Contains(log, "shutdown step failed") {
		t.Fatalf("a shutdown step failed:\n%s", log)
	}
	for _, s := range order {
		i := strings.Index(log, `"step": "`+s+`"`)
		if i < 0 || i < last {
			t.Fatalf("shutdown step %q missing or out of order:\n%s", s, log)
		}
		last = i
	}
	if _, err := net.DialTimeout("tcp", listen, 200*time.Millisecond); err == nil {
		t.Fatal("listener still open after serve returned")
	}
	if _, err := os.Stat(filepath.Join(dataDir, "jetstream")); err != nil {
		t.Fatalf("store not under --data-dir: %v", err)
	}

	// migrate provisions against the same store without a server running.
	code, out, errOut := runCmd(t, "migrate", "--data-dir", dataDir, "--log-level", "error", "--clickhouse-dsn", ch.DSN)
	if code != 0 || !strings.Contains(out, "stream WAHOOK_RAW: 1 messages") || !strings.Contains(out, "clickhouse database "+ch.Database+" migrated") {
		t.Fatalf("migrate: code %d, %q %q", code, out, errOut)
	}
}

// TestHelpGroupsFlags: --help groups a service's flags by concern, every
// one of them in a section; migrate takes only what it uses (it took 43
// flags, app secrets among them).
func TestHelpGroupsFlags(t *testing.T) {
	for _, c := range []struct {
		cmd      string
		sections []string
		without  []string
	}{
		{"serve", []string{"webhook endpoint:", "storing bodies:", "RAW stream:", "NATS:", "embedded NATS server:", "ClickHouse:", "stage 1: bodies to rows and events:", "EVENTS stream:", "funnel resolver:", "stage 2: pacing signal:", "query API:", "logging:"}, nil},
		{"migrate", []string{"RAW stream:", "NATS:", "ClickHouse:", "EVENTS stream:"}, []string{"--app-secret", "--listen ", "--batch-rows", "--api-token", "--funnel-interval"}},
		{"ingest", []string{"webhook endpoint:", "storing bodies:", "RAW stream:", "NATS:"}, []string{"--clickhouse-dsn", "--batch-rows"}},
	} {
		_, _, errOut := runCmd(t, c.cmd, "-h")
		for _, s := range c.sections {
			if !strings.Contains(errOut, "\n"+s+"\n") {
				t.Errorf("%s -h: no section %q:\n%s", c.cmd, s, errOut)
			}
		}
		if strings.Contains(errOut, "\nother:\n") {
			t.Errorf("%s -h: flags outside any section:\n%s", c.cmd, errOut[strings.Index(errOut, "\nother:\n"):])
		}
		for _, w := range c.without {
			if strings.Contains(errOut, "  "+w) {
				t.Errorf("%s takes %s, which it does not use", c.cmd, strings.TrimSpace(w))
			}
		}
		if !strings.Contains(errOut, "(WAHOOK_") {
			t.Errorf("%s -h does not name the environment variables", c.cmd)
		}
	}
}

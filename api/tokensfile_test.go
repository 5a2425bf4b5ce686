package api

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const (
	fileToken  = "file-token-0123456789"
	fixedToken = "fixed-token-0123456789"
)

// tokensFileServer is a server with fixedToken on its flags and the tokens
// file file, on the clock c; it returns the server, its warnings and a
// reading of wahook_api_tokens_file_valid (-1: no such gauge).
func tokensFileServer(t *testing.T, file string, c *clock) (*Server, *observer.ObservedLogs, func() float64) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Tokens = []string{fixedToken}
	cfg.TokensFile = file
	core, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	s, err := newServer(cfg, nil, reg, zap.New(core), c.now)
	if err != nil {
		t.Fatal(err)
	}
	valid := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "wahook_api_tokens_file_valid" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	return s, logs, valid
}

// writeAt writes the tokens file with the modification time at, as a
// writer at that time would.
func writeAt(t *testing.T, file, content string, at time.Time) {
	t.Helper()
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, at, at); err != nil {
		t.Fatal(err)
	}
}

// scopeOf is the WABAs token sees ("*": every one), "refused" when it is
// not accepted.
func scopeOf(s *Server, token string) string {
	_, c := match(s.credentials(), token)
	switch {
	case c == nil:
		return "refused"
	case c.tenant == nil:
		return "*"
	}
	return c.tenant.key()
}

// A tokens file removed revokes its tokens (keeping them would fail
// open), said once in the log and by the gauge; put back, they work again.
// One that does not parse keeps the tokens read before (failing closed
// would lock every tenant out over a typo), said once and by the gauge.
func TestTokensFileRemovedOrBroken(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	file := filepath.Join(t.TempDir(), "tokens")
	writeAt(t, file, "acme:"+fileToken+":waba=waba-1\n", start)
	s, logs, valid := tokensFileServer(t, file, c)
	if got := scopeOf(s, fileToken); got != "waba-1" {
		t.Fatalf("file token at the start: %s", got)
	}
	if v := valid(); v != 1 {
		t.Errorf("gauge %v at the start, want 1", v)
	}
	step := func() { c.set(c.now().Add(time.Second)) }

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		step()
		if got := scopeOf(s, fileToken); got != "refused" {
			t.Errorf("file token after the file was removed: %s", got)
		}
		if got := scopeOf(s, fixedToken); got != "*" {
			t.Errorf("flag token after the file was removed: %s", got)
		}
	}
	if n := logs.FilterMessage("tokens file removed: its tokens are refused").Len(); n != 1 {
		t.Errorf("%d warnings of the removed file, want 1: %v", n, logs.All())
	}
	if v := valid(); v != 0 {
		t.Errorf("gauge %v with the file removed, want 0", v)
	}

	step()
	writeAt(t, file, "acme:"+fileToken+":waba=waba-2\n", c.now())
	if got := scopeOf(s, fileToken); got != "waba-2" {
		t.Errorf("file token once the file is back: %s", got)
	}
	if v := valid(); v != 1 {
		t.Errorf("gauge %v with the file back, want 1", v)
	}

	step()
	writeAt(t, file, "acme:"+fileToken+":wabas=waba-3\n", c.now())
	for range 3 {
		step()
		if got := scopeOf(s, fileToken); got != "waba-2" {
			t.Errorf("file token with a typo in the file: %s, want the scope read before", got)
		}
	}
	if n := logs.FilterMessage("tokens file not read; the tokens read before stay").Len(); n != 1 {
		t.Errorf("%d warnings of the file that does not parse, want 1: %v", n, logs.All())
	}
	if v := valid(); v != 0 {
		t.Errorf("gauge %v with a file that does not parse, want 0", v)
	}
	step()
	writeAt(t, file, "acme:"+fileToken+":waba=waba-3\n", c.now())
	if got := scopeOf(s, fileToken); got != "waba-3" {
		t.Errorf("file token once the typo is fixed: %s", got)
	}
	if v := valid(); v != 1 {
		t.Errorf("gauge %v once the typo is fixed, want 1", v)
	}
}

// A tokens file read while it is written, its last line cut short, is not
// taken: "NAME:TOKEN" cut from "NAME:TOKEN:waba=ID" would see every WABA.
// A last line without a newline applies once the file is unchanged at the
// next check; at the start (a secret written without one) at once.
func TestTokensFileReadMidWrite(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	file := filepath.Join(t.TempDir(), "tokens")
	writeAt(t, file, "acme:"+fileToken+":waba=waba-1", start)
	s, _, _ := tokensFileServer(t, file, c)
	if got := scopeOf(s, fileToken); got != "waba-1" {
		t.Fatalf("file without a last newline at the start: %s", got)
	}
	step := func() { c.set(c.now().Add(time.Second)) }

	step()
	writeAt(t, file, "acme:"+fileToken, c.now()) // cut before ":waba=waba-2\n"
	step()
	if got := scopeOf(s, fileToken); got != "waba-1" {
		t.Errorf("file cut mid-line: the token sees %s, want the scope read before (waba-1)", got)
	}
	writeAt(t, file, "acme:"+fileToken+":waba=waba-2", c.now()) // the write goes on
	step()
	if got := scopeOf(s, fileToken); got != "waba-1" {
		t.Errorf("file changed since the last check: the token sees %s, want waba-1", got)
	}
	step()
	if got := scopeOf(s, fileToken); got != "waba-2" {
		t.Errorf("file unchanged since the last check: the token sees %s, want waba-2", got)
	}

	step()
	writeAt(t, file, "acme:"+fileToken+":waba=waba-1,waba-3\n", c.now())
	if got := scopeOf(s, fileToken); got != "waba-1,waba-3" {
		t.Errorf("file ending in a newline: the token sees %s, want waba-1,waba-3 at once", got)
	}
}

// The gauge follows the file on an idle API: each scrape checks it, as a
// request does (it moved only when a request came, so an idle API's alert
// neither fired nor cleared). A good copy of the file moved back over a
// broken one, its size and time kept, is the file applied: valid again.
func TestTokensFileGaugeOnIdleAPI(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	good := "acme:" + fileToken + ":waba=waba-1\n"
	writeAt(t, file, good, start)
	_, _, valid := tokensFileServer(t, file, c)
	step := func() { c.set(c.now().Add(time.Second)) }

	step()
	writeAt(t, file, "acme:"+fileToken+":wabas=waba-1\n", c.now()) // a typo
	step()
	if v := valid(); v != 0 {
		t.Errorf("gauge %v with a file that does not parse and no request since, want 0", v)
	}
	step()
	writeAt(t, file, good, start) // the kept copy back: the stamp applied
	step()
	if v := valid(); v != 1 {
		t.Errorf("gauge %v with the file applied back and no request since, want 1", v)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	step()
	if v := valid(); v != 0 {
		t.Errorf("gauge %v with the file removed and no request since, want 0", v)
	}
}

// A file emptied by a rewrite in place is not taken at once: it applies
// once unchanged at the next check, like a cut last line.
func TestTokensFileEmptiedMidWrite(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	file := filepath.Join(t.TempDir(), "tokens")
	writeAt(t, file, "acme:"+fileToken+":waba=waba-1\n", start)
	s, _, _ := tokensFileServer(t, file, c)
	step := func() { c.set(c.now().Add(time.Second)) }

	step()
	writeAt(t, file, "", c.now()) // truncated, the new content to come
	step()
	if got := scopeOf(s, fileToken); got != "waba-1" {
		t.Errorf("file emptied mid-write: the token is %s, want the scope read before (waba-1)", got)
	}
	step()
	if got := scopeOf(s, fileToken); got != "refused" {
		t.Errorf("file empty and unchanged since the last check: the token is %s, want refused", got)
	}
}

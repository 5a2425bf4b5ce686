package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]Limit{
		"600/60s": {600, time.Minute},
		"240/1m":  {240, time.Minute},
		"5/1h":    {5, time.Hour},
		"off":     {},
	} {
		got, err := ParseLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"600", "x/60s", "0/60s", "10/0s", "10/abc", "-1/60s", "10/500ms"} {
		if _, err := ParseLimit(bad); err == nil {
			t.Errorf("ParseLimit(%q) accepted", bad)
		}
	}
}

// clock is a settable time for the windows.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func TestWindowEdges(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start.Add(15 * time.Second)}
	w := newWindow("test", Limit{3, time.Minute}, c.now)
	for i := 0; i < 3; i++ {
		if v := w.take("a"); !v.ok || v.remaining != 2-i || v.reset != 45*time.Second {
			t.Fatalf("request %d: %+v", i, v)
		}
	}
	if v := w.take("a"); v.ok || v.reset != 45*time.Second {
		t.Fatalf("4th request: %+v", v)
	}
	if v := w.take("b"); !v.ok {
		t.Fatal("another key shares the count")
	}
	c.set(start.Add(time.Minute - time.Nanosecond))
	if v := w.take("a"); v.ok || v.reset != time.Nanosecond {
		t.Fatalf("last instant of the window: %+v", v)
	}
	c.set(start.Add(time.Minute))
	if v := w.take("a"); !v.ok || v.remaining != 2 {
		t.Fatalf("next window: %+v", v)
	}
}

// limitServer is an API whose windows run on c, with a client IP per
// X-Forwarded-For (the test's connection is a trusted proxy).
func limitServer(t *testing.T, c *clock, limits Limits) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Tokens = []string{"token-one-0123456789", "token-two-0123456789"}
	cfg.Limits = limits
	cfg.TrustedProxies = []string{"0.0.0.0"}
	s, err := newServer(cfg, nil, nil, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func call(t *testing.T, s *Server, path, ip, token string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("X-Forwarded-For", ip)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.App().Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Reports per IP answer 429 at the window's edge with Retry-After and
// reset with the next window; other IPs and the global limit count apart.
func TestLimitsPerIP(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start.Add(20 * time.Second)}
	s := limitServer(t, c, Limits{GlobalIP: Limit{5, time.Minute}, ReportsIP: Limit{3, time.Minute}})
	const tok = "token-one-0123456789"
	for i := 0; i < 3; i++ {
		code, h, b := call(t, s, "/api/v1/error-codes", "192.0.2.1", tok)
		if code != 200 || h.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) || h.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("request %d: %d %v %s", i, code, h, b)
		}
	}
	code, h, b := call(t, s, "/api/v1/error-codes", "192.0.2.1", tok)
	var e struct{ Error Error }
	_ = json.Unmarshal([]byte(b), &e)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "40" || e.Error.Code != CodeRateLimited {
		t.Fatalf("over the reports limit: %d Retry-After %q %s", code, h.Get("Retry-After"), b)
	}
	if code, _, _ := call(t, s, "/api/v1/error-codes", "192.0.2.2", tok); code != 200 {
		t.Fatalf("another IP: %d", code)
	}
	// The global limit counts the refused report too (5 per IP): the
	// OpenAPI document, outside reports, gets one more, then 429.
	if code, _, _ := call(t, s, "/api/v1/openapi.json", "192.0.2.1", ""); code != 200 {
		t.Fatalf("openapi within the global limit: %d", code)
	}
	if code, h, _ := call(t, s, "/api/v1/openapi.json", "192.0.2.1", ""); code != 429 || h.Get("Retry-After") != "40" {
		t.Fatalf("over the global limit: %d %v", code, h)
	}
	// Unauthenticated requests count against the global limit too.
	for i := 0; i < 5; i++ {
		call(t, s, "/api/v1/error-codes", "192.0.2.3", "")
	}
	if code, _, _ := call(t, s, "/api/v1/error-codes", "192.0.2.3", tok); code != 429 {
		t.Fatalf("token guessing is not limited: %d", code)
	}
	c.set(start.Add(time.Minute))
	if code, h, _ := call(t, s, "/api/v1/error-codes", "192.0.2.1", tok); code != 200 || h.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("after the window: %d %v", code, h)
	}
	// Health is never limited.
	for i := 0; i < 10; i++ {
		if code, _, _ := call(t, s, "/healthz", "192.0.2.1", ""); code != 200 {
			t.Fatalf("healthz: %d", code)
		}
	}
}

// The per-IP limits count the address a trusted proxy saw: the rightmost
// entry of X-Forwarded-For that is not itself a trusted proxy. The entries
// to its left are the client's to write; before, the leftmost was taken, and
// a new made-up address per request passed every per-IP limit.
func TestLimitsPerIPForgedForwardedFor(t *testing.T) {
	c := &clock{t: time.Date(2026, 3, 14, 10, 0, 20, 0, time.UTC)}
	cfg := DefaultConfig()
	cfg.Tokens = []string{"token-one-0123456789"}
	cfg.Limits = Limits{ReportsIP: Limit{2, time.Minute}}
	cfg.TrustedProxies = []string{"0.0.0.0", "10.0.0.0/8"}
	s, err := newServer(cfg, nil, nil, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	const tok = "token-one-0123456789"
	for i := range 2 {
		// The client wrote the first entry; the proxies added the others.
		xff := fmt.Sprintf("203.0.113.%d, 198.51.100.7, 10.1.2.3", i)
		if code, _, b := call(t, s, "/api/v1/error-codes", xff, tok); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, b)
		}
	}
	if code, _, _ := call(t, s, "/api/v1/error-codes", "203.0.113.99, 198.51.100.7, 10.1.2.3", tok); code != http.StatusTooManyRequests {
		t.Errorf("a third report from 198.51.100.7 behind a made-up address: %d, want 429", code)
	}
	if code, _, _ := call(t, s, "/api/v1/error-codes", "198.51.100.8", tok); code != 200 {
		t.Errorf("another client: %d", code)
	}
	// An entry that is no address ends the trust: the last address before
	// it (here the trusted proxy that sent it) is the client.
	ip := s.clientOf(netip.MustParseAddr("0.0.0.0"), [][]byte{[]byte("198.51.100.7, garbage"), []byte("10.1.2.3")})
	if ip != "10.1.2.3" {
		t.Errorf("client behind a malformed entry: %q, want the proxy that added it, 10.1.2.3", ip)
	}
	// Entries with a port, as some proxies write them.
	for xff, want := range map[string]string{"203.0.113.9, 198.51.100.7:5555": "198.51.100.7", "[2001:db8::1]:443, 10.1.2.3:80": "2001:db8::/64"} {
		if ip := s.clientOf(netip.MustParseAddr("0.0.0.0"), [][]byte{[]byte(xff)}); ip != want {
			t.Errorf("X-Forwarded-For %q: client %q, want %q", xff, ip, want)
		}
	}
	// An IPv6 client counts by its /64: a new address of it on each
	// request passed every per-IP limit.
	for i := range 3 {
		if ip := s.clientOf(netip.MustParseAddr(fmt.Sprintf("2001:db8:7:8::%x", i+1)), nil); ip != "2001:db8:7:8::/64" {
			t.Errorf("IPv6 client 2001:db8:7:8::%x: %q, want its /64", i+1, ip)
		}
	}
	if ip := s.clientOf(netip.MustParseAddr("2001:db8:7:9::1"), nil); ip != "2001:db8:7:9::/64" {
		t.Errorf("another /64: %q", ip)
	}
	// A trusted CIDR written IPv4-mapped matches IPv4 proxies.
	cfg.TrustedProxies = []string{"0.0.0.0", "::ffff:192.168.0.0/112"}
	s2, err := newServer(cfg, nil, nil, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if ip := s2.clientOf(netip.MustParseAddr("0.0.0.0"), [][]byte{[]byte("198.51.100.7, 192.168.3.4")}); ip != "198.51.100.7" {
		t.Errorf("behind a proxy of an IPv4-mapped CIDR: %q, want 198.51.100.7", ip)
	}
}

func TestLimitsPerToken(t *testing.T) {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	s := limitServer(t, c, Limits{GlobalToken: Limit{2, time.Minute}})
	for i, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		if code, _, _ := call(t, s, "/api/v1/error-codes", ip, "token-one-0123456789"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if code, h, _ := call(t, s, "/api/v1/error-codes", "192.0.2.3", "token-one-0123456789"); code != 429 || h.Get("Retry-After") != "60" {
		t.Fatalf("third request of the token from a third IP: %d", code)
	}
	if code, _, _ := call(t, s, "/api/v1/error-codes", "192.0.2.3", "token-two-0123456789"); code != 200 {
		t.Fatalf("the other token: %d", code)
	}
}

func TestDefaultLimits(t *testing.T) {
	l := DefaultLimits()
	if l.GlobalIP != (Limit{600, time.Minute}) || l.ReportsIP != (Limit{240, time.Minute}) ||
		l.SendResultsIP != (Limit{120, time.Minute}) || l.SendResultsToken != (Limit{300, time.Minute}) {
		t.Fatalf("%+v", l)
	}
}

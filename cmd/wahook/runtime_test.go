package main

import (
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// TestPprofListen serves the profiling endpoints and stops them; the
// command line (/debug/pprof/cmdline) is not served. Before, it was: with
// --pprof-listen, anyone who reached it read --app-secret and --verify-token
// given as flags.
func TestPprofListen(t *testing.T) {
	args := os.Args
	os.Args = append(append([]string{}, args...), "--app-secret", "S3CRET-APP", "--verify-token", "S3CRET-TOKEN")
	defer func() { os.Args = args }()
	if p, err := (&runtimeOptions{}).start(zap.NewNop()); p != nil || err != nil {
		t.Fatalf("off by default: %v, %v", p, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := (&runtimeOptions{addr: addr}).start(zap.NewNop())
	if err != nil || p == nil {
		t.Fatalf("start: %v, %v", p, err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := get("/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(b, "goroutine") {
		t.Fatalf("goroutine profile: %d %q", code, b)
	}
	if code, b := get("/debug/pprof/cmdline"); code != http.StatusNotFound || strings.Contains(b, "S3CRET") {
		t.Fatalf("cmdline: %d %q; want 404 without the command line", code, b)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("still serving after stop")
	}
}

func TestMemoryLimit(t *testing.T) {
	noEnv := func(string) string { return "" }
	noCgroup := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false},
		{"auto", 0, false},
		{"off", -1, false},
		{"900MiB", 900 << 20, false},
		{"2GiB", 2 << 30, false},
		{"1048576", 1 << 20, false},
		{"512KiB", 512 << 10, false},
		{"100B", 100, false},
		{"0", 0, true},
		{"-1GiB", 0, true},
		{"1GB", 0, true},
		{"lots", 0, true},
		{"9000000TiB", 0, true},
	} {
		o := runtimeOptions{memLimit: c.in}
		got, _, err := o.memoryLimit(noEnv, noCgroup)
		if c.bad {
			if !errors.Is(err, errUsage) || !errors.Is(o.validate(), errUsage) {
				t.Errorf("--memory-limit %q: %v, want a usage error", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want || o.validate() != nil {
			t.Errorf("--memory-limit %q: %d, %v, want %d", c.in, got, err, c.want)
		}
	}

	// auto: 90% of a cgroup's limit; GOMEMLIMIT first; a size or off over
	// both.
	cgroup := func() (uint64, error) { return 2 << 30, nil }
	env := envOf("GOMEMLIMIT", "500MiB")
	for _, c := range []struct {
		in     string
		getenv func(string) string
		want   int64
		from   string
	}{
		{"auto", noEnv, int64(2<<30) * 9 / 10, "90% of the cgroup's memory limit"},
		{"", noEnv, int64(2<<30) * 9 / 10, "90% of the cgroup's memory limit"},
		{"auto", env, 0, "GOMEMLIMIT"},
		{"1GiB", env, 1 << 30, "--memory-limit"},
		{"off", env, -1, "off"},
	} {
		got, from, err := (&runtimeOptions{memLimit: c.in}).memoryLimit(c.getenv, cgroup)
		if err != nil || got != c.want || from != c.from {
			t.Errorf("--memory-limit %q with a 2 GiB cgroup: %d (%s), %v; want %d (%s)", c.in, got, from, err, c.want, c.from)
		}
	}
	if got, _, err := (&runtimeOptions{memLimit: "auto"}).memoryLimit(noEnv, func() (uint64, error) { return 0, memlimit.ErrNoCgroup }); got != 0 || err != nil {
		t.Errorf("auto without a cgroup: %d, %v; want none", got, err)
	}
	// A cgroup whose limit cannot be read: none, and a warning (start goes
	// on), never a usage error.
	got, _, err := (&runtimeOptions{memLimit: "auto"}).memoryLimit(noEnv, func() (uint64, error) { return 0, errors.New("permission denied") })
	if got != 0 || !errors.Is(err, errCgroupLimit) || errors.Is(err, errUsage) {
		t.Errorf("auto with an unreadable cgroup: %d, %v; want none and errCgroupLimit", got, err)
	}
}

// TestMemoryLimitSet: start sets the runtime's limit from --memory-limit.
func TestMemoryLimitSet(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	for _, c := range []struct {
		in   string
		want int64
	}{{"700MiB", 700 << 20}, {"off", math.MaxInt64}} {
		if _, err := (&runtimeOptions{memLimit: c.in}).start(zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("--memory-limit %s: the runtime's limit is %d, want %d", c.in, got, c.want)
		}
	}
}

func TestGCPercent(t *testing.T) {
	noEnv := func(string) string { return "" }
	gogc := envOf("GOGC", "200")
	for _, c := range []struct {
		in       string
		embedded bool
		getenv   func(string) string
		want     int
		from     string
		bad      bool
	}{
		{in: "auto", embedded: true, getenv: noEnv, want: embeddedGCPercent, from: "the embedded NATS server's default"},
		{in: "", embedded: true, getenv: noEnv, want: embeddedGCPercent, from: "the embedded NATS server's default"},
		{in: "auto", getenv: noEnv, want: 0, from: ""},
		{in: "auto", embedded: true, getenv: gogc, want: 0, from: "GOGC"},
		{in: "80", embedded: true, getenv: gogc, want: 80, from: "--gc-percent"},
		{in: "300", getenv: noEnv, want: 300, from: "--gc-percent"},
		{in: "0", getenv: noEnv, bad: true},
		{in: "-50", getenv: noEnv, bad: true},
		{in: "off", getenv: noEnv, bad: true},
		{in: "50%", getenv: noEnv, bad: true},
	} {
		o := runtimeOptions{gcPercent: c.in, embedded: c.embedded}
		got, from, err := o.gcPercentOf(c.getenv)
		if c.bad {
			if !errors.Is(err, errUsage) || !errors.Is(o.validate(), errUsage) {
				t.Errorf("--gc-percent %q: %v, want a usage error", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want || from != c.from || o.validate() != nil {
			t.Errorf("--gc-percent %q (embedded %v): %d (%s), %v; want %d (%s)", c.in, c.embedded, got, from, err, c.want, c.from)
		}
	}
}

// TestGCPercentSet: start sets the collector's GOGC from --gc-percent, and
// from auto in a process that runs the embedded NATS server.
func TestGCPercentSet(t *testing.T) {
	withoutGCEnv(t)
	before, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(before); debug.SetMemoryLimit(limit) })
	for _, c := range []struct {
		o    runtimeOptions
		want int
	}{
		{runtimeOptions{memLimit: "off", gcPercent: "70"}, 70},
		{runtimeOptions{memLimit: "off", gcPercent: "auto", embedded: true}, embeddedGCPercent},
		{runtimeOptions{memLimit: "off", gcPercent: "auto"}, embeddedGCPercent}, // left as it was
		{runtimeOptions{memLimit: "off", gcPercent: "120"}, 120},
	} {
		if _, err := c.o.start(zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("%+v: GOGC is %d, want %d", c.o, got, c.want)
		}
		debug.SetGCPercent(c.want)
	}
}

// withoutGCEnv unsets GOGC and WAHOOK_GC_PERCENT for the test (and the
// children it starts), so that --gc-percent auto decides; both are
// restored at its end.
func withoutGCEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"GOGC", "WAHOOK_GC_PERCENT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// envOf is a getenv whose environment holds key=value alone.
func envOf(key, value string) func(string) string {
	return func(k string) string {
		if k == key {
			return value
		}
		return ""
	}
}

package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/zap"
)

func TestPprofListen(t *testing.T) {
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
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(b) == 0 {
		t.Fatalf("cmdline: %d %q", resp.StatusCode, b)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("still serving after stop")
	}
}

func TestMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false},
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
		got, err := o.memoryLimit()
		if c.bad {
			if !errors.Is(err, errUsage) {
				t.Errorf("--memory-limit %q: %v, want a usage error", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("--memory-limit %q: %d, %v, want %d", c.in, got, err, c.want)
		}
	}
}

package main

import (
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/zap"
)

func TestPprofListen(t *testing.T) {
	if p, err := (&pprofOptions{}).start(zap.NewNop()); p != nil || err != nil {
		t.Fatalf("off by default: %v, %v", p, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := (&pprofOptions{addr: addr}).start(zap.NewNop())
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

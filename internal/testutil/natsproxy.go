package testutil

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// NATSProxy is a TCP proxy to a NATS server that can drop what its
// clients publish on subjects with a given prefix, as a network or a
// server that dies can lose a request: a pull request lost so is never
// answered. Everything else passes, both ways.
type NATSProxy struct {
	// URL is the proxy's address for nats.Connect.
	URL     string
	drop    atomic.Pointer[[]byte]
	dropped atomic.Int64
	stalled atomic.Bool
}

// StartNATSProxy starts a proxy to the server at serverURL (nats://host:port)
// that runs until the test ends.
func StartNATSProxy(t testing.TB, serverURL string) *NATSProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(serverURL, "nats://")
	p := &NATSProxy{URL: "nats://" + ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				s.Close()
				return
			}
			conns = append(conns, c, s)
			wg.Add(2)
			mu.Unlock()
			go func() { defer wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
			go func() { defer wg.Done(); p.forward(c, s); s.Close() }()
		}
	}()
	return p
}

// Drop drops, from now on, what clients publish on subjects beginning
// with prefix; "" passes everything again.
func (p *NATSProxy) Drop(prefix string) {
	b := []byte(prefix)
	p.drop.Store(&b)
}

// Stall stops (true) or resumes (false) reading what clients send, as a
// network that silently stops delivering does (no reset, no close): once
// the sockets' buffers fill, a client's writes block.
func (p *NATSProxy) Stall(on bool) { p.stalled.Store(on) }

// Dropped is how many messages the proxy has dropped.
func (p *NATSProxy) Dropped() int64 { return p.dropped.Load() }

// forward copies a client's protocol to the server op by op, leaving out
// the publications to drop.
func (p *NATSProxy) forward(c, s net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(s, 64<<10)
	for {
		for p.stalled.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		line = bytes.Clone(line)
		var payload []byte
		// PUB <subject> [reply] <size> and HPUB <subject> [reply] <header size> <total size>
		if f := bytes.Fields(line); len(f) >= 3 && (bytes.EqualFold(f[0], []byte("PUB")) || bytes.EqualFold(f[0], []byte("HPUB"))) {
			size, err := strconv.Atoi(string(f[len(f)-1]))
			if err != nil {
				return
			}
			payload = make([]byte, size+2) // and its \r\n
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			if d := p.drop.Load(); d != nil && len(*d) > 0 && bytes.HasPrefix(f[1], *d) {
				p.dropped.Add(1)
				if r.Buffered() == 0 && w.Flush() != nil {
					return
				}
				continue
			}
		}
		// An op read while the proxy was being stalled (its read had begun
		// before) waits too: nothing passes once Stall(true) returns.
		for p.stalled.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := w.Write(line); err != nil {
			return
		}
		if _, err := w.Write(payload); err != nil {
			return
		}
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

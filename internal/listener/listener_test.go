package listener

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wahook/wahook/internal/testutil"
)

// flaky returns the errors in errs from its first Accepts, then accepts
// from the real listener.
type flaky struct {
	net.Listener
	errs []error
}

func (f *flaky) Accept() (net.Conn, error) {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return f.Listener.Accept()
}

// Accept waits out running out of descriptors instead of returning the
// error, which ended fasthttp's accept loop and the endpoint with it.
func TestAcceptWaitsOutEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: &osSyscallError{syscall.EMFILE}}
	var waited []time.Duration
	g := Guard(&flaky{Listener: ln, errs: []error{emfile, emfile, syscall.ENFILE}}, Config{
		OnAcceptError: func(err error, in time.Duration) { waited = append(waited, in) },
	})
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	c, err := g.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	c.Close()
	if fmt.Sprint(waited) != "[5ms 10ms 20ms]" {
		t.Fatalf("waits: %v", waited)
	}
	ln.Close()
	if _, err := g.Accept(); err == nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
}

type osSyscallError struct{ errno syscall.Errno }

func (e *osSyscallError) Error() string { return "accept4: " + e.errno.Error() }
func (e *osSyscallError) Unwrap() error { return e.errno }

// Connections past a bound are closed at once; those within are served,
// and a closed one frees its place.
func TestBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		reason string
	}{
		{"total", Config{MaxConns: 3}, RefusedTotal},
		{"per ip", Config{MaxConnsPerIP: 3}, RefusedPerIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			refused := map[string]int{}
			count := func(r string) int { mu.Lock(); defer mu.Unlock(); return refused[r] }
			cfg := tc.cfg
			cfg.OnRefused = func(r string) { mu.Lock(); refused[r]++; mu.Unlock() }
			g := Guard(ln, cfg)
			defer g.Close()
			accepted := make(chan net.Conn, 10)
			go func() {
				for {
					c, err := g.Accept()
					if err != nil {
						close(accepted)
						return
					}
					accepted <- c
				}
			}()
			for i := 0; i < 3; i++ {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			var served []net.Conn
			for len(served) < 3 {
				served = append(served, <-accepted)
			}
			// The two past the bound are closed by the server (a reset may
			// come before the dial returns).
			for i := 0; i < 2; i++ {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					continue
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatal("a connection past the bound was not closed")
				}
			}
			testutil.Poll(5*time.Second, func() bool { return count(tc.reason) >= 2 })
			if n := count(tc.reason); n != 2 || Open(g) != 3 {
				t.Fatalf("refused %d, open %d", n, Open(g))
			}
			served[0].Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case got := <-accepted:
				got.Close()
			case <-time.After(5 * time.Second):
				t.Fatal("a freed place was not given to the next connection")
			}
		})
	}
}

// fakeConn is an accepted connection from ra.
type fakeConn struct {
	net.Conn
	ra net.Addr
}

func (f fakeConn) RemoteAddr() net.Addr { return f.ra }
func (f fakeConn) Close() error         { return nil }

// fakeListener accepts the connections put in next.
type fakeListener struct {
	net.Listener
	next chan net.Conn
}

func (l fakeListener) Accept() (net.Conn, error) { return <-l.next, nil }

// TestPerIPv6Prefix: the per-IP bound counts an IPv6 client by its /64.
// Counted by address, 50 addresses of one /64 opened 50 connections under
// a bound of 2; an IPv4 address mapped into IPv6 counts as itself.
func TestPerIPv6Prefix(t *testing.T) {
	ln := fakeListener{next: make(chan net.Conn, 64)}
	var refused int
	g := Guard(ln, Config{MaxConnsPerIP: 2, OnRefused: func(string) { refused++ }})
	addrs := []string{"192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7"} // one IPv4 address, three times
	for i := range 50 {
		addrs = append(addrs, fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	addrs = append(addrs, "2001:db8:1:3::1") // another /64
	for i, a := range addrs {
		ln.next <- fakeConn{ra: &net.TCPAddr{IP: net.ParseIP(a), Port: 1000 + i}}
	}
	admitted := 0
	// Accept returns only admitted connections: 2 of the IPv4 address, 2
	// of the 50, the other /64's; the rest are refused on the way.
	for range 5 {
		if _, err := g.Accept(); err != nil {
			t.Fatal(err)
		}
		admitted++
	}
	if refused != 49 || Open(g) != 5 {
		t.Fatalf("per-IP bound 2: %d admitted, %d refused, %d open; want 5, 49, 5 (50 addresses of one /64 count as one client)", admitted, refused, Open(g))
	}
	for _, c := range []struct{ addr, key string }{
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"::ffff:203.0.113.9", "203.0.113.9"},
		{"198.51.100.1", "198.51.100.1"},
	} {
		if k := remoteKey(fakeConn{ra: &net.TCPAddr{IP: net.ParseIP(c.addr)}}); k != c.key {
			t.Errorf("%s counts as %q, want %q", c.addr, k, c.key)
		}
	}
}

// Package listener guards the HTTP listeners of wahook's endpoints (the
// webhook and the query API) against running out of file descriptors and
// against connection floods.
//
// fasthttp's accept loop, under Fiber, returns on any accept error but a
// timeout, and with it Serve: one flood of idle connections that used up
// the descriptors (EMFILE) stopped the endpoint for good. Guard's Accept
// instead waits and tries again on the errors that pass once descriptors
// or buffers free up, as net/http's Server does (5 ms doubling to 1 s),
// and it bounds the connections open at once, in all and per remote IP: a
// connection past a bound is closed as soon as it is accepted, before any
// byte is read, and the listener goes on.
package listener

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Config bounds the connections of one listener; 0 is no bound.
type Config struct {
	// MaxConns bounds the connections open at once.
	MaxConns int
	// MaxConnsPerIP bounds the connections open at once from one remote
	// IPv4 address, or one IPv6 /64 (a host is given a /64 at least, and
	// picks its addresses in it at will). Behind a load balancer every
	// connection comes from its address: raise it or set 0 there.
	MaxConnsPerIP int
	// OnRefused is called with "total" or "per_ip" for each connection
	// closed for a bound; OnAcceptError with each accept error waited out.
	// Either may be nil. They run on the accepting goroutine.
	OnRefused     func(reason string)
	OnAcceptError func(err error, retryIn time.Duration)
}

// Reasons given to Config.OnRefused.
const (
	RefusedTotal = "total"
	RefusedPerIP = "per_ip"
)

// Retry bounds of the accept backoff.
const (
	retryMin = 5 * time.Millisecond
	retryMax = time.Second
)

// Guard returns ln with cfg's bounds and the accept retry.
func Guard(ln net.Listener, cfg Config) net.Listener {
	return &guarded{Listener: ln, cfg: cfg, perIP: map[string]int{}}
}

type guarded struct {
	net.Listener
	cfg Config

	mu    sync.Mutex
	open  int
	perIP map[string]int
}

// Accept returns the next connection within the bounds. It returns an
// error only when the listener is closed, or on an error that waiting
// cannot mend.
func (g *guarded) Accept() (net.Conn, error) {
	wait := time.Duration(0)
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			wait = min(max(2*wait, retryMin), retryMax)
			if g.cfg.OnAcceptError != nil {
				g.cfg.OnAcceptError(err, wait)
			}
			time.Sleep(wait)
			continue
		}
		wait = 0
		if gc, ok := g.admit(c); ok {
			return gc, nil
		}
	}
}

// admit counts c in, or closes it when a bound is reached.
func (g *guarded) admit(c net.Conn) (net.Conn, bool) {
	ip := remoteKey(c)
	g.mu.Lock()
	reason := ""
	switch {
	case g.cfg.MaxConns > 0 && g.open >= g.cfg.MaxConns:
		reason = RefusedTotal
	case g.cfg.MaxConnsPerIP > 0 && g.perIP[ip] >= g.cfg.MaxConnsPerIP:
		reason = RefusedPerIP
	default:
		g.open++
		g.perIP[ip]++
	}
	g.mu.Unlock()
	if reason != "" {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: no TIME_WAIT for a refused flood
		}
		_ = c.Close()
		if g.cfg.OnRefused != nil {
			g.cfg.OnRefused(reason)
		}
		return nil, false
	}
	return &conn{Conn: c, g: g, ip: ip}, true
}

func (g *guarded) release(ip string) {
	g.mu.Lock()
	g.open--
	if g.perIP[ip]--; g.perIP[ip] <= 0 {
		delete(g.perIP, ip)
	}
	g.mu.Unlock()
}

// Open returns the connections open now; for tests and metrics.
func Open(ln net.Listener) int {
	g, ok := ln.(*guarded)
	if !ok {
		return -1
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

type conn struct {
	net.Conn
	g    *guarded
	ip   string
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.g.release(c.ip) })
	return c.Conn.Close()
}

// remoteKey is what MaxConnsPerIP counts c under (ClientKey).
func remoteKey(c net.Conn) string {
	var ip netip.Addr
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(a.IP)
	} else if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return c.RemoteAddr().String()
	}
	return ClientKey(ip)
}

// ClientKey is what a per-client bound counts address a under: an IPv4
// address (IPv4-mapped ones too) as itself, an IPv6 one by its /64. A host
// is given a /64 at least and picks its addresses in it: counted by
// address, one client opened every connection the listener takes, and
// passed every per-IP request limit with a new address each time.
func ClientKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.String()
		}
	}
	return a.String()
}

// temporary reports whether an accept error passes by waiting: too many
// open files (the process's or the system's), no buffer space or memory,
// or a connection aborted before it was accepted.
func temporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

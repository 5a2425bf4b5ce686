package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/listener"
)

// connFlags are the connection bounds of one HTTP listener.
type connFlags struct {
	cfg listener.Config
}

// Defaults of the connection bounds: Meta's webhook senders are a few
// addresses with a few connections each; a client of the API is a few
// dashboards and scripts.
const (
	defaultMaxConns      = 10_000
	defaultMaxConnsPerIP = 1_000
)

// register defines --PREFIXmax-conns and --PREFIXmax-conns-per-ip.
func (c *connFlags) register(f *flags, prefix, what string) {
	f.IntVar(&c.cfg.MaxConns, prefix+"max-conns", defaultMaxConns, "most connections open at once on "+what+"; past it a new one is closed at once (0: no bound)")
	f.IntVar(&c.cfg.MaxConnsPerIP, prefix+"max-conns-per-ip", defaultMaxConnsPerIP, "most connections open at once from one address (an IPv6 client: one /64) on "+what+" (0: no bound; raise it behind a load balancer)")
}

// listen listens on addr with the bounds of c and the accept retry of
// package listener, counting what it refuses and waits out as metrics
// named wahook_<subsystem>_connections_refused_total{reason} and
// wahook_<subsystem>_accept_errors_total, and logging accept errors once
// every 10 s at most.
func (c connFlags) listen(addr, subsystem string, reg prometheus.Registerer, log *zap.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wahook_" + subsystem + "_connections_refused_total",
		Help: "Connections closed as soon as accepted because a bound was reached (reason: total or per_ip).",
	}, []string{"reason"})
	acceptErrs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wahook_" + subsystem + "_accept_errors_total",
		Help: "Accept errors waited out (too many open files, no buffers): the listener tries again instead of stopping.",
	})
	refused.WithLabelValues(listener.RefusedTotal)
	refused.WithLabelValues(listener.RefusedPerIP)
	if reg != nil {
		reg.MustRegister(refused, acceptErrs)
	}
	var mu sync.Mutex
	var logged time.Time
	var since atomic.Int64
	cfg := c.cfg
	cfg.OnRefused = func(reason string) { refused.WithLabelValues(reason).Inc() }
	cfg.OnAcceptError = func(err error, in time.Duration) {
		acceptErrs.Inc()
		n := since.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if time.Since(logged) >= 10*time.Second {
			log.Warn("accept failed, trying again", zap.String("listener", subsystem), zap.Int64("errors", n), zap.Duration("in", in), zap.Error(err))
			logged = time.Now()
			since.Store(0)
		}
	}
	return listener.Guard(ln, cfg), nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// healthServer serves /healthz, /readyz and /metrics for a subcommand that
// has no webhook endpoint of its own (process).
type healthServer struct {
	srv      *http.Server
	stopping atomic.Bool
	// check tells, at each /readyz, whether the work can proceed now (nil:
	// not yet known, not ready).
	check atomic.Pointer[func(context.Context) error]
}

// setCheck sets what /readyz asks.
func (h *healthServer) setCheck(check func(context.Context) error) { h.check.Store(&check) }

// startHealth listens on addr; ready reports whether the work can proceed.
func startHealth(addr string, reg *prometheus.Registry, log *zap.Logger) (*healthServer, error) {
	h := &healthServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		check := h.check.Load()
		switch {
		case h.stopping.Load():
			http.Error(w, "not ready: stopping", http.StatusServiceUnavailable)
			return
		case check == nil:
			http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := (*check)(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server", zap.Error(err))
		}
	}()
	log.Info("health and metrics listening", zap.String("addr", ln.Addr().String()))
	return h, nil
}

func (h *healthServer) stop() {
	h.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

// startMetrics serves /metrics alone on addr (--metrics-listen), away from
// the public webhook listener. It stops when ctx ends.
func startMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *zap.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", zap.Error(err))
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	return nil
}

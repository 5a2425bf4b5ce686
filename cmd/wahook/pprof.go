package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// pprofOptions is --pprof-listen: Go's profiling endpoints
// (/debug/pprof/...), off by default. scripts/bench.sh takes a CPU profile
// through it for its cost breakdown (docs/performance.md).
type pprofOptions struct{ addr string }

func (o *pprofOptions) register(f *flags) {
	f.Section("profiling", func() {
		f.StringVar(&o.addr, "pprof-listen", "", "address of Go's profiling endpoints, /debug/pprof/ (empty: off); they reveal the process's internals, so keep it on loopback")
	})
}

// start serves the endpoints, when asked, until the returned part stops.
// They are registered on a mux of their own: importing net/http/pprof also
// registers them on http.DefaultServeMux, which nothing here serves.
func (o *pprofOptions) start(log *zap.Logger) (*part, error) {
	if o.addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen %s: %w", o.addr, err)
	}
	// No write timeout: a CPU profile answers after its seconds.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server", zap.Error(err))
		}
	}()
	log.Info("pprof listening", zap.String("addr", ln.Addr().String()))
	return &part{name: "pprof stopped", stop: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		return nil
	}}, nil
}

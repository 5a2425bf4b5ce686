package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// runtimeOptions are the Go runtime's flags of the long-running commands:
//
//   - --pprof-listen, Go's profiling endpoints (/debug/pprof/...), off by
//     default; scripts/bench.sh takes a CPU profile through it for its cost
//     breakdown (docs/performance.md);
//   - --memory-limit, the runtime's soft memory limit
//     (runtime/debug.SetMemoryLimit), which makes the garbage collector run
//     sooner as the process nears it instead of letting the heap grow to
//     twice what is live. "auto" (the default): GOMEMLIMIT when set, else
//     90% of the memory limit of the process's cgroup (a container's, a
//     systemd unit's MemoryMax), else none; "off": none, GOMEMLIMIT
//     notwithstanding;
//   - --gc-percent, the collector's GOGC (runtime/debug.SetGCPercent): how
//     far the heap may grow past what is live before the next collection.
//     "auto" (the default): GOGC when set, else embeddedGCPercent when the
//     process runs the embedded NATS server, else Go's 100.
type runtimeOptions struct {
	addr, memLimit, gcPercent string
	// embedded: this process runs the embedded NATS server (serve without
	// --nats-url); set before start.
	embedded bool
}

// embeddedGCPercent is --gc-percent auto's figure in a process that runs
// the embedded NATS server. About half of such a heap under load is the
// server's message block caches (byte buffers of the last ~10 s written to
// each stream, which it keeps for reads and wahook cannot size), and Go's
// 100 doubles them: over 12 minutes at 8,345 webhooks/s on 2 cores serve's
// peak RSS was 1,129 MiB with 100 and 910 MiB with 50, for ~4-5 CPU-µs more
// per webhook in the collector (docs/performance.md).
const embeddedGCPercent = 50

// autoMemoryRatio is the share of a cgroup's memory limit that "auto" gives
// the collector: the rest is room for what the heap does not count
// (stacks, the duplicate index's mapped tables, the runtime's own).
const autoMemoryRatio = 0.9

func (o *runtimeOptions) register(f *flags) {
	f.Section("profiling", func() {
		f.StringVar(&o.addr, "pprof-listen", "", "address of Go's profiling endpoints, /debug/pprof/ (empty: off); they reveal the process's internals, so keep it on loopback")
		f.StringVar(&o.memLimit, "memory-limit", "auto", "soft limit of the process's memory for Go's garbage collector, as GOMEMLIMIT takes it (900MiB, 2GiB); auto: GOMEMLIMIT if set, else 90% of the cgroup's (container's) memory limit, else none; off: none; the collector works harder near it rather than let the heap grow to twice what is live")
		f.StringVar(&o.gcPercent, "gc-percent", "auto", "how far the heap may grow past what is live before Go's garbage collector runs again, in percent of what is live (GOGC's figure; a smaller one: less memory, more CPU); auto: GOGC if set, else 50 in serve with the embedded NATS server (its stores' block caches are half the heap), else Go's 100")
	})
}

// validate reports a --memory-limit that is not a size, auto or off, and
// a --gc-percent that is not a positive whole number or auto.
func (o *runtimeOptions) validate() error {
	if _, _, err := o.memoryLimit(func(string) string { return "" }, func() (uint64, error) { return 0, memlimit.ErrNoLimit }); err != nil {
		return err
	}
	_, _, err := o.gcPercentOf(func(string) string { return "" })
	return err
}

// gcPercentOf is the GOGC --gc-percent sets and where it comes from: 0 to
// leave the runtime's as it is (GOGC, or Go's default). getenv is
// os.Getenv.
func (o *runtimeOptions) gcPercentOf(getenv func(string) string) (int, string, error) {
	switch o.gcPercent {
	case "", "auto":
		if getenv("GOGC") != "" {
			return 0, "GOGC", nil
		}
		if o.embedded {
			return embeddedGCPercent, "the embedded NATS server's default", nil
		}
		return 0, "", nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(o.gcPercent))
	if err != nil || n <= 0 {
		return 0, "", fmt.Errorf("%w: --gc-percent %q: use a positive whole number such as 50 or 100, or auto", errUsage, o.gcPercent)
	}
	return n, "--gc-percent", nil
}

// errCgroupLimit: "auto" found a cgroup but could not read its memory
// limit; serve starts without one and says so.
var errCgroupLimit = errors.New("the cgroup's memory limit could not be read")

// memoryLimit is the soft limit --memory-limit sets and where it comes
// from: 0 to leave the runtime's as it is (GOMEMLIMIT, or none), -1 for
// none at all. getenv and cgroup are os.Getenv and memlimit.FromCgroup.
func (o *runtimeOptions) memoryLimit(getenv func(string) string, cgroup func() (uint64, error)) (int64, string, error) {
	switch o.memLimit {
	case "", "auto":
		if getenv("GOMEMLIMIT") != "" {
			return 0, "GOMEMLIMIT", nil
		}
		limit, err := cgroup()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrNoCgroup), errors.Is(err, memlimit.ErrCgroupsNotSupported):
			return 0, "", nil // no cgroup, or no limit in it: none
		case err != nil:
			return 0, "", fmt.Errorf("%w: %w", errCgroupLimit, err)
		case limit == 0 || limit > math.MaxInt64:
			return 0, "", nil
		}
		return int64(float64(limit) * autoMemoryRatio), "90% of the cgroup's memory limit", nil
	case "off":
		return -1, "off", nil
	}
	n, err := parseByteSize(o.memLimit)
	if err != nil || n <= 0 {
		return 0, "", fmt.Errorf("%w: --memory-limit %q: use a positive size such as 900MiB or 2GiB, auto or off", errUsage, o.memLimit)
	}
	return n, "--memory-limit", nil
}

// parseByteSize reads a count of bytes with an optional unit, B, KiB,
// MiB, GiB or TiB (GOMEMLIMIT's syntax).
func parseByteSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<63-1)/mult {
		return 0, fmt.Errorf("%s: too large", s)
	}
	return n * mult, nil
}

// start sets the memory limit, when one was given, and serves the
// profiling endpoints, when asked, until the returned part stops. They are
// registered on a mux of their own: importing net/http/pprof also
// registers them on http.DefaultServeMux, which nothing here serves. The
// command line (/debug/pprof/cmdline) is not served: it may hold secrets.
func (o *runtimeOptions) start(log *zap.Logger) (*part, error) {
	n, from, err := o.memoryLimit(os.Getenv, memlimit.FromCgroup)
	if errors.Is(err, errCgroupLimit) {
		log.Warn("memory limit: none", zap.Error(err))
	} else if err != nil {
		return nil, err
	}
	switch {
	case n > 0:
		debug.SetMemoryLimit(n)
		log.Info("memory limit", zap.Int64("bytes", n), zap.String("from", from))
	case n < 0:
		debug.SetMemoryLimit(math.MaxInt64)
	case from != "":
		log.Info("memory limit", zap.Int64("bytes", debug.SetMemoryLimit(-1)), zap.String("from", from))
	}
	gc, gcFrom, err := o.gcPercentOf(os.Getenv)
	if err != nil {
		return nil, err
	}
	if gc > 0 {
		debug.SetGCPercent(gc)
		log.Info("garbage collector", zap.Int("gc_percent", gc), zap.String("from", gcFrom))
	}
	if o.addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	// Not pprof.Cmdline: the command line holds what was given as flags,
	// --app-secret and --verify-token among them.
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not served: the command line may hold secrets", http.StatusNotFound)
	})
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

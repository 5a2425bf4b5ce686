package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// memLimitOptions is --memory-limit: the Go runtime's soft memory limit
// (runtime/debug.SetMemoryLimit), which makes the garbage collector run
// sooner as the process nears it instead of letting the heap grow to twice
// what is live. Unset, GOMEMLIMIT applies, or none.
type memLimitOptions struct{ limit string }

func (o *memLimitOptions) register(f *flags) {
	f.Section("profiling", func() {
		f.StringVar(&o.limit, "memory-limit", "", "soft limit of the process's memory for Go's garbage collector, as GOMEMLIMIT takes it (900MiB, 2GiB; empty: GOMEMLIMIT, or none); the collector works harder near it rather than let the heap grow to twice what is live")
	})
}

// bytes parses the limit: 0 when unset.
func (o *memLimitOptions) bytes() (int64, error) {
	if o.limit == "" {
		return 0, nil
	}
	n, err := parseByteSize(o.limit)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: --memory-limit %q: use a positive size such as 900MiB or 2GiB", errUsage, o.limit)
	}
	return n, nil
}

// apply sets the limit, when one was given.
func (o *memLimitOptions) apply(log *zap.Logger) error {
	n, err := o.bytes()
	if err != nil || n == 0 {
		return err
	}
	debug.SetMemoryLimit(n)
	log.Info("memory limit", zap.Int64("bytes", n))
	return nil
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

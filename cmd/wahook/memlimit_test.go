package main

import (
	"errors"
	"testing"
)

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
		o := memLimitOptions{limit: c.in}
		got, err := o.bytes()
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

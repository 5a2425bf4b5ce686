package ingest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDupIndex measures what the duplicate index costs a request with
// a new body, a lookup that misses and the add after the ack, in an index
// held at its steady state for a rate and a window: filled with a window and
// a span of ids at that rate (it then holds 3 to 3.75 million at 25k
// bodies/s and 2 minutes), the fake clock moving on by 1/rate with each
// operation, so that generations rotate as they would (their cost per id
// does not depend on how fast the benchmark runs). It reports the bytes of
// the tables per id held after the fill. Bodies' hashes are stood in for by
// a cheap mix of a counter; with -cpu 2 the two goroutines share that
// counter and the clock, which costs more than the index at low rates.
func BenchmarkDupIndex(b *testing.B) {
	for _, bc := range []struct {
		name   string
		rate   int
		window time.Duration
	}{
		{"25k-per-s-2m", 25_000, 2 * time.Minute},
		{"2k-per-s-2m", 2_000, 2 * time.Minute},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x, c := newTestIndex(b, bc.window, 8_000_000)
			step := time.Second / time.Duration(bc.rate)
			// Fill the index: one window and a span of traffic.
			fill := int(bc.window/step) * dupGenerations / (dupGenerations - 1)
			var next atomic.Uint64
			for range fill {
				sum := mixSum(next.Add(1))
				x.add(&sum)
				c.advance(step)
			}
			held, bytes := x.stats()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					sum := mixSum(i)
					if x.seen(&sum) {
						b.Error("a new id was seen")
						return
					}
					x.add(&sum)
					c.advance(step)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(held), "ids")
			b.ReportMetric(float64(bytes)/float64(held), "bytes/id")
		})
	}
}

// mixSum fills a hash-like sum from i with splitmix64.
func mixSum(i uint64) (s [32]byte) {
	for j := 0; j < 4; j++ {
		i += 0x9e3779b97f4a7c15
		z := i
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(s[8*j:], z^(z>>31))
	}
	return s
}

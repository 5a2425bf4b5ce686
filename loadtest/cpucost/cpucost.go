package cpucost

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Part is one part of the system and the frames that are its own: a sample
// is the part's when a function name in its stack contains one of Match.
type Part struct {
	Name  string
	Match []string
}

// Other is where a sample no part claims goes.
const Other = "other"

// Parts are wahook serve's parts, in the order a sample is tried against
// them (the first that matches wins).
var Parts = []Part{
	// GC work is the runtime's even when a part's allocation paid for it
	// (an assist); the allocation itself stays with the part.
	{"Go runtime: GC", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination"}},
	{"funnel resolver", []string{"wahook/processor/funnel."}},
	{"stage 2 KV writes", []string{"wahook/processor/stage2.(*writer)."}},
	{"stage 2", []string{"wahook/processor/stage2.", "wahook/processor/pacing."}},
	{"ClickHouse insert (chwriter, client)", []string{"wahook/processor/chwriter.", "ClickHouse/clickhouse-go", "ClickHouse/ch-go"}},
	{"EVENTS publish", []string{"wahook/processor.(*eventPublisher)", "wahook/processor.(*ackWindow)", "wahook/processor.append", "wahook/processor.(*jsonObject)"}},
	{"stage 1 decode (normalizer)", []string{"wahook/processor.(*Normalizer)", "wahook/schema/meta."}},
	{"stage 1 other (fetch, batches, numbers, acks)", []string{"wahook/processor."}},
	{"ingest (HTTP, signature, publish)", []string{"wahook/ingest.", "valyala/fasthttp", "gofiber/fiber"}},
	{"nats-server: streams' stores", []string{"nats-server/v2/server.(*stream).", "nats-server/v2/server.(*fileStore)", "nats-server/v2/server.(*msgBlock)"}},
	{"nats-server: consumers", []string{"nats-server/v2/server.(*consumer)."}},
	{"nats-server: other (client I/O, routing)", []string{"nats-server/v2/server."}},
	{"NATS client, shared connection", []string{"nats-io/nats.go", "nats-io/nats%2ego"}},
	{"metrics and profiling", []string{"prometheus/client_golang", "net/http/pprof", "runtime/pprof"}},
	{"Go runtime: scheduler and other", []string{"runtime."}},
}

// Cost is the CPU time a profile gives each part.
type Cost struct {
	// Parts maps a part's name (or Other) to its CPU time.
	Parts map[string]time.Duration
	// Total is every sample's CPU time; Duration the profile's wall time.
	Total, Duration time.Duration
}

// Classify sums the profile's CPU samples by part.
func Classify(p *profile.Profile, parts []Part) (Cost, error) {
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return Cost{}, fmt.Errorf("cpucost: no cpu/nanoseconds sample type in the profile")
	}
	c := Cost{Parts: map[string]time.Duration{}, Duration: time.Duration(p.DurationNanos)}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[vi])
		c.Total += d
		c.Parts[partOf(s, parts)] += d
	}
	return c, nil
}

func partOf(s *profile.Sample, parts []Part) string {
	for _, pt := range parts {
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function == nil {
					continue
				}
				for _, m := range pt.Match {
					if strings.Contains(ln.Function.Name, m) {
						return pt.Name
					}
				}
			}
		}
	}
	return Other
}

// Read parses a profile file (gzipped or not).
func Read(r io.Reader) (*profile.Profile, error) { return profile.Parse(r) }

// Names are the parts' names in order, then Other.
func Names(parts []Part) []string {
	n := make([]string, 0, len(parts)+1)
	for _, p := range parts {
		n = append(n, p.Name)
	}
	return append(n, Other)
}

// Sorted are the names of c's parts, most CPU first.
func (c Cost) Sorted() []string {
	var n []string
	for k := range c.Parts {
		n = append(n, k)
	}
	sort.Slice(n, func(i, j int) bool {
		if c.Parts[n[i]] != c.Parts[n[j]] {
			return c.Parts[n[i]] > c.Parts[n[j]]
		}
		return n[i] < n[j]
	})
	return n
}

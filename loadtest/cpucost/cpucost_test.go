package cpucost

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// synthetic builds a CPU profile with one sample per stack (leaf first), each
// worth its count of 10 ms.
func synthetic(stacks map[int][]string) *profile.Profile {
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        int64(10 * time.Millisecond),
		DurationNanos: int64(time.Second),
	}
	funcs := map[string]*profile.Function{}
	for n, stack := range stacks {
		s := &profile.Sample{Value: []int64{int64(n), int64(n) * int64(10*time.Millisecond)}}
		for _, name := range stack {
			f := funcs[name]
			if f == nil {
				f = &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
				funcs[name] = f
				p.Function = append(p.Function, f)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

func TestClassify(t *testing.T) {
	const w = "github.com/wahook/wahook/"
	p := synthetic(map[int][]string{
		// The handler's publish into nats.go is ingest's.
		1: {"syscall.write", "github.com/nats-io/nats%2ego.(*Conn).publish", w + "ingest.(*Server).handleNotification", "github.com/valyala/fasthttp.(*Server).serveConn"},
		// A GC assist in the handler is the runtime's.
		2:  {"runtime.gcDrainN", "runtime.gcAssistAlloc", "runtime.mallocgc", w + "ingest.(*Server).handleNotification"},
		3:  {"runtime.memmove", "github.com/ClickHouse/ch-go/proto.(*ColStr).Append", w + "processor/chwriter.(*Writer).Write", w + "processor.(*Stage1).flush", w + "processor.(*Stage1).Run"},
		4:  {"encoding/json.checkValid", w + "processor/stage2.decodeEvent", w + "processor/stage2.(*Stage2).handle"},
		5:  {w + "processor/stage2.(*writer).write", w + "processor/stage2.(*Stage2).flush"},
		6:  {w + "schema/meta.Decode", w + "processor.(*Normalizer).Normalize", w + "processor.(*Stage1).add", w + "processor.(*Stage1).Run"},
		7:  {w + "processor.appendStatusEvent", w + "processor.(*eventPublisher).send", w + "processor.(*Stage1).flush"},
		8:  {"syscall.pwrite", "github.com/nats-io/nats-server/v2/server.(*msgBlock).writeMsgRecordLocked", "github.com/nats-io/nats-server/v2/server.(*stream).internalLoop"},
		9:  {"github.com/nats-io/nats-server/v2/server.(*consumer).loopAndGatherMsgs"},
		10: {"github.com/nats-io/nats-server/v2/server.(*client).readLoop"},
		11: {"github.com/ClickHouse/clickhouse-go/v2.(*connect).query", w + "processor/funnel.(*Resolver).netted"},
		12: {"runtime.findRunnable", "runtime.schedule"},
		13: {"github.com/nats-io/nats%2ego.(*Conn).flusher"},
		14: {"main.unknown"},
		15: {"github.com/prometheus/client_golang/prometheus.(*Registry).Gather"},
		16: {"time.Parse", w + "processor.SourceOf", w + "processor.(*Stage1).add"},
	})
	// Through the wire format, as the command reads it.
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Classify(p, Parts)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(n int) time.Duration { return time.Duration(n) * 10 * time.Millisecond }
	want := map[string]time.Duration{
		"ingest (HTTP, signature, publish)":             ms(1),
		"Go runtime: GC":                                ms(2),
		"ClickHouse insert (chwriter, client)":          ms(3),
		"stage 2":                                       ms(4),
		"stage 2 KV writes":                             ms(5),
		"stage 1 decode (normalizer)":                   ms(6),
		"EVENTS publish":                                ms(7),
		"nats-server: streams' stores":                  ms(8),
		"nats-server: consumers":                        ms(9),
		"nats-server: other (client I/O, routing)":      ms(10),
		"funnel resolver":                               ms(11),
		"Go runtime: scheduler and other":               ms(12),
		"NATS client, shared connection":                ms(13),
		Other:                                           ms(14),
		"metrics and profiling":                         ms(15),
		"stage 1 other (fetch, batches, numbers, acks)": ms(16),
	}
	for k, v := range want {
		if c.Parts[k] != v {
			t.Errorf("%s: %v, want %v", k, c.Parts[k], v)
		}
	}
	if len(c.Parts) != len(want) {
		t.Errorf("parts %v, want %v", c.Parts, want)
	}
	if c.Total != ms(136) || c.Duration != time.Second {
		t.Errorf("total %v over %v, want %v over 1s", c.Total, c.Duration, ms(136))
	}
	if s := c.Sorted(); s[0] != "stage 1 other (fetch, batches, numbers, acks)" || s[len(s)-1] != "ingest (HTTP, signature, publish)" {
		t.Errorf("sorted %v", s)
	}
	for _, n := range Names(Parts) {
		if _, ok := want[n]; !ok {
			t.Errorf("part %q untested", n)
		}
	}
}

func TestClassifyNeedsCPU(t *testing.T) {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}
	if _, err := Classify(p, Parts); err == nil {
		t.Fatal("a heap profile classified")
	}
}

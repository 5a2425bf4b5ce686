package stage2

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// BenchmarkStateMemory reports the heap stage 2 holds per active number:
// its entry in the numbers map, its pacing state with traffic in every
// second of the last minute, errors of several classes and a quality
// event, its subjects and its last signal. The de-duplication of event ids
// is per instance and sized by the event rate, not by the numbers; it is
// not included (about 16 bytes per event of the last 64 s).
//
//	go test ./processor/stage2 -run '^$' -bench StateMemory -benchtime 1x
func BenchmarkStateMemory(b *testing.B) {
	const numbers = 100_000
	tiers := pacing.DefaultTiers()
	now := t0.Add(61 * time.Second)
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		nums := make(map[string]*number)
		for k := 0; k < numbers; k++ {
			id := fmt.Sprintf("1065403522%05d", k)
			n := &number{id: id, p: pacing.NewNumber(id), subject: schema.PacingSubject(id),
				kvSubject: "$KV." + schema.BucketPacing + "." + schema.PacingKey(id)}
			for s := 0; s < 60; s++ {
				n.p.Apply(pacing.Event{At: t0.Unix() + int64(s), Outbound: true})
				n.p.Apply(pacing.Event{At: t0.Unix() + int64(s), Inbound: true})
			}
			for _, c := range []int32{130429, 131056, 131026, 131049} {
				n.p.Apply(pacing.Event{At: t0.Unix() + 59, Codes: []int32{c}, Recipient: "r"})
			}
			n.p.Apply(pacing.Event{At: t0.Unix(), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_10K"})
			n.last = n.p.Signal(now, tiers)
			nums[id] = n
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/numbers, "bytes/number")
		runtime.KeepAlive(nums)
	}
}

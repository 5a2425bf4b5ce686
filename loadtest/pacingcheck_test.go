package loadtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

// The ledger's rates count a message once, at its earliest acked status,
// and echoes and inbound messages by their own second; the pacing check
// passes a signal with those rates and names a number whose signal
// differs, and does not compare before the service has applied every
// event.
func TestPacingCheck(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS, m.ReplyRate = 2, 20, 0.5
	g, posts := runTraffic(t, m, 30*time.Second)
	l := NewLedger(g)
	for i := range posts {
		l.Posted(&posts[i])
		l.Acked(&posts[i])
	}
	// The truth, from the posts: each message at its earliest status.
	last := l.Totals().LastSecond - 5
	first := map[[2]uint32]int64{}
	var in60 uint64
	for i := range posts {
		for _, it := range posts[i].items {
			switch it.kind {
			case itemStatus:
				if it.number != 0 {
					continue
				}
				k := [2]uint32{uint32(it.number), it.seq}
				if f, ok := first[k]; !ok || it.at < f {
					first[k] = it.at
				}
			case itemInbound:
				if it.number == 0 && it.at > last-60 && it.at <= last {
					in60++
				}
			}
		}
	}
	var out60 uint64
	for _, at := range first {
		if at > last-60 && at <= last {
			out60++
		}
	}
	want := l.Observed(0, last)
	if want.S60 != float64(in60)/60+float64(out60)/60 || out60 == 0 || in60 == 0 {
		t.Fatalf("observed %+v, want %d out and %d in over the minute", want, out60, in60)
	}

	// Signals written 1.5 s after the drain, which the check's clock puts
	// at last + 1: their windows end with last.
	drained := time.Unix(last, 0)
	updated := drained.Add(schema.PacingSettle + 1500*time.Millisecond)
	if schema.PacingLastSecond(updated) != last {
		t.Fatalf("updated_at %v ends its windows at %d, want %d", updated, schema.PacingLastSecond(updated), last)
	}
	signals := map[string]schema.ObservedMPS{}
	for i, n := range l.Numbers() {
		signals[n.PhoneNumberID] = l.Observed(i, last)
	}
	backlog := uint64(3)
	cfg := PacingCheckConfig{
		Timeout: 5 * time.Second,
		Now:     func() time.Time { return drained },
		Backlog: func(context.Context) (uint64, error) {
			if backlog > 0 {
				backlog--
				return backlog + 1, nil
			}
			return 0, nil
		},
		Signal: func(_ context.Context, id string) (schema.PacingSignal, error) {
			return schema.PacingSignal{PhoneNumberID: id, UpdatedAt: updated, Observed: signals[id]}, nil
		},
	}
	r, err := CheckPacing(context.Background(), l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if backlog != 0 {
		t.Errorf("compared with a backlog of %d left", backlog)
	}
	if r.Numbers != 2 || !r.OK() || r.PostedUnacked != 0 {
		t.Errorf("signals equal to the ledger: %+v", r)
	}
	// One message more in number 0's minute: named.
	id0 := l.Numbers()[0].PhoneNumberID
	o := signals[id0]
	o.S60 += 1.0 / 60
	signals[id0] = o
	if r, err = CheckPacing(context.Background(), l, cfg); err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Exact != 1 || len(r.Differences) != 1 || !strings.Contains(r.Differences[0], id0) {
		t.Errorf("a signal one message off: %+v", r)
	}

	// Drained 30 s after the last event (a busy machine): the 1 s and 10 s
	// windows hold none of the run, the 60 s ones do, and are compared.
	mid := time.Unix(l.Totals().LastSecond+30, 0)
	midLast := schema.PacingLastSecond(mid.Add(schema.PacingSettle + 1500*time.Millisecond))
	cfg.Now = func() time.Time { return mid }
	for i, n := range l.Numbers() {
		signals[n.PhoneNumberID] = l.Observed(i, midLast)
	}
	cfg.Signal = func(_ context.Context, id string) (schema.PacingSignal, error) {
		return schema.PacingSignal{PhoneNumberID: id, UpdatedAt: mid.Add(schema.PacingSettle + 1500*time.Millisecond), Observed: signals[id]}, nil
	}
	if r, err = CheckPacing(context.Background(), l, cfg); err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Exact != 2 || !strings.Contains(r.Partial, "the 60 s rates were compared") || signals[id0].S60 == 0 {
		t.Errorf("signals read 30 s after the run: %+v, want OK on the 60 s rates", r)
	}
	o = signals[id0]
	o.S60 += 1.0 / 60
	signals[id0] = o
	if r, err = CheckPacing(context.Background(), l, cfg); err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Exact != 1 {
		t.Errorf("a signal one message off in its minute, read 30 s after the run: %+v, want named", r)
	}

	// Drained 70 s after the last event: every signal's windows, and the
	// ledger's of the same seconds, are empty. Equal, they checked
	// nothing; the check passed a stage 2 that counted nothing.
	late := time.Unix(l.Totals().LastSecond+70, 0)
	cfg.Now = func() time.Time { return late }
	cfg.Signal = func(_ context.Context, id string) (schema.PacingSignal, error) {
		return schema.PacingSignal{PhoneNumberID: id, UpdatedAt: late.Add(time.Second)}, nil
	}
	if r, err = CheckPacing(context.Background(), l, cfg); err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Exact != 2 || !strings.Contains(r.Inconclusive, "drained too late") {
		t.Errorf("all-zero signals read 70 s after the run: %+v, want not OK, inconclusive", r)
	}
	// No event answered 200: nothing to check.
	if r, err = CheckPacing(context.Background(), NewLedger(g), cfg); err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Numbers != 0 || r.Inconclusive == "" {
		t.Errorf("a ledger with no event answered 200: %+v, want not OK", r)
	}
}

// A check of a run with no event answered 200 (every POST refused) found
// nothing lost and passed; it checked nothing.
func TestCheckResultNeedsEvents(t *testing.T) {
	if r := (&CheckResult{FailuresMatch: true}); r.OK() {
		t.Errorf("a check of no event passed: %+v", r)
	}
	if r := (&CheckResult{Expected: 10, Found: 10, FailuresMatch: true}); !r.OK() {
		t.Errorf("a check of 10 events all found failed: %+v", r)
	}
}

// A latency past what the histogram tracks (a generator minutes behind
// its schedule) was dropped: the slowest answers were missing from its
// percentiles and counts. It is recorded at the histogram's top.
func TestRecordKeepsTheSlowest(t *testing.T) {
	h := newLatencyHistogram()
	for range 10 {
		record(h, 1000)
	}
	for range 90 {
		record(h, 200_000_000) // 200 s
	}
	record(h, 1<<62)
	if h.TotalCount() != 101 || h.ValueAtQuantile(99) < 199_000_000 {
		t.Errorf("10 answers of 1 ms, 90 of 200 s, one past the top: count %d, p99 %d µs", h.TotalCount(), h.ValueAtQuantile(99))
	}
}

package funnel

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLagGrowsDuringAPass: the funnel's lag is read at the scrape, so a pass
// that takes long (or passes that fail) show as a lag that grows, which
// the WahookFunnelLag alert sees; an instance that no longer holds the
// lease reports none.
func TestLagGrowsDuringAPass(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg).m
	lag := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "wahook_funnel_lag_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no wahook_funnel_lag_seconds")
		return 0
	}
	if got := lag(); got != 0 {
		t.Fatalf("without the lease: lag %v, want 0", got)
	}
	m.held(true)
	m.observe(PassStats{Watermark: time.Now().Add(-90 * time.Second)}, nil, time.Second)
	if got := lag(); got < 90 || got > 100 {
		t.Fatalf("after a pass whose watermark is 90 s old: lag %v", got)
	}
	// A failed pass does not move the watermark: the lag keeps growing.
	m.observe(PassStats{}, errors.New("ClickHouse down"), time.Second)
	if got := lag(); got < 90 {
		t.Fatalf("after a failed pass: lag %v, want 90 s or more", got)
	}
	m.observe(PassStats{Watermark: time.Now().Add(-2 * time.Second)}, nil, time.Second)
	if got := lag(); got < 2 || got > 10 {
		t.Fatalf("after a pass whose watermark is 2 s old: lag %v", got)
	}
	m.held(false)
	if got := lag(); got != 0 {
		t.Fatalf("lease lost: lag %v, want 0", got)
	}
	// A pass that completes after the lease was lost reports nothing.
	m.observe(PassStats{Watermark: time.Now().Add(-60 * time.Second)}, nil, time.Second)
	if got := lag(); got != 0 {
		t.Fatalf("a pass ended after the lease was lost: lag %v, want 0", got)
	}
	// Taking the lease starts the count, so that passes failing from the
	// start show; a held lease kept does not restart it.
	m.held(true)
	time.Sleep(20 * time.Millisecond)
	m.held(true)
	m.observe(PassStats{}, errors.New("ClickHouse down"), time.Second)
	if got := lag(); got < 0.02 || got > 5 {
		t.Fatalf("lease taken, every pass failing: lag %v, want the time since the lease was taken", got)
	}
	// A watermark ahead of this clock (ClickHouse's runs ahead) is no lag.
	m.observe(PassStats{Watermark: time.Now().Add(time.Minute)}, nil, time.Second)
	if got := lag(); got != 0 {
		t.Fatalf("a watermark ahead of the clock: lag %v, want 0", got)
	}
}

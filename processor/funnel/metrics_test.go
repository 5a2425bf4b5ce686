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
		t.Fatalf("before any pass: lag %v, want 0", got)
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
}

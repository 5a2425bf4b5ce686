package api_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
)

// /numbers answers for its range, as every other report: the numbers
// with statuses or number events in it (or those asked for), each as of
// the range's end. It listed every number with a number event at any
// time, in any range, and applied the events after the range's end: a
// range before a throughput upgrade answered tier 80 "default" beside a
// last_throughput_upgrade to come.
func TestNumbersRange(t *testing.T) {
	d := generate(300)
	ch := load(t, d)
	app := newAPI(t, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())).App()
	numbersIn := func(from, to time.Time, extra string) map[string]api.NumberState {
		t.Helper()
		var ns api.Numbers
		path := "/api/v1/numbers?from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339)) + extra
		query(t, app, path, &ns)
		by := map[string]api.NumberState{}
		for _, n := range ns.Numbers {
			by[n.PhoneNumberID] = n
		}
		return by
	}

	// A day after the traffic and the number events: nothing in it.
	later := t0.Add(24 * time.Hour)
	if ns := numbersIn(later, later.Add(time.Hour), ""); len(ns) != 0 {
		t.Errorf("a range without traffic or number events lists %d numbers: %+v", len(ns), ns)
	}
	// Asked for by its id, a number is answered whatever the range, as of
	// its end.
	ns := numbersIn(later, later.Add(time.Hour), "&phone_number_id="+numbers[0].id)
	if n, ok := ns[numbers[0].id]; len(ns) != 1 || !ok || n.TierSource != api.TierThroughputUpgrade ||
		n.LastThroughputUpgrade == nil || !n.LastThroughputUpgrade.Equal(d.upgradeAt) {
		t.Errorf("the upgraded number asked for after its upgrade: %+v", ns)
	}

	// The first 30 s of traffic: every number sent, before the FLAGGED
	// (t0+60s) and the upgrade (t0+120s).
	ns = numbersIn(t0.Add(-time.Hour), t0.Add(30*time.Second), "")
	if len(ns) != 3 {
		t.Fatalf("%d numbers in the first 30 s, want 3: %+v", len(ns), ns)
	}
	if n := ns[numbers[0].id]; n.TierMPS != 80 || n.TierSource != api.TierDefault || n.LastThroughputUpgrade != nil ||
		n.MaintenanceUntil != nil || n.MessagingLimit != "" || len(n.RecentChanges) != 0 {
		t.Errorf("the number before its upgrade: %+v", n)
	}
	if n := ns[numbers[1].id]; n.Quality != "unknown" || n.MessagingLimit != "" || len(n.RecentChanges) != 0 {
		t.Errorf("the number before it was flagged: %+v", n)
	}
	// Its first Business-app echo is at t0+30s, the range's end: not yet
	// a coexistence number.
	if n := ns[numbers[2].id]; n.TierMPS != 80 || n.TierSource != api.TierDefault {
		t.Errorf("the number before its first echo: %+v", n)
	}

	// Up to just after the FLAGGED, before the upgrade.
	ns = numbersIn(t0.Add(-time.Hour), d.flaggedAt.Add(time.Second), "")
	if n := ns[numbers[1].id]; n.Quality != "flagged" || n.MessagingLimit != "TIER_250" || len(n.RecentChanges) != 1 {
		t.Errorf("the number after it was flagged: %+v", n)
	}
	if n := ns[numbers[0].id]; n.TierSource != api.TierDefault || n.LastThroughputUpgrade != nil {
		t.Errorf("the number before its upgrade: %+v", n)
	}
	if n := ns[numbers[2].id]; n.TierMPS != 20 || n.TierSource != api.TierCoexistence {
		t.Errorf("the number after its first echo: %+v", n)
	}
}

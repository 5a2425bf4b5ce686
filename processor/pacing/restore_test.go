package pacing

import (
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

// A number restored from its last signal has the tier, quality, limit and
// maintenance window of that signal, and nothing of its traffic.
func TestRestore(t *testing.T) {
	up := NewNumber("1001")
	up.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED"})
	up.Apply(Event{At: at(1), Field: "phone_number_quality_update", Name: "FLAGGED"})
	up.Apply(Event{At: at(1), Outbound: true})
	last := up.Signal(t0.Add(10*time.Second), DefaultTiers())

	n := NewNumber("1001")
	n.Restore(last)
	s := n.Signal(t0.Add(10*time.Second), DefaultTiers())
	if s.TierMPS != 1000 || s.TierSource != "throughput_upgrade" || s.Quality != "flagged" || s.MessagingLimit != "TIER_UNLIMITED" ||
		s.Advice != schema.AdvicePause || s.MaintenanceUntil == nil || !s.MaintenanceUntil.Equal(t0.Add(time.Minute)) || s.Observed.S60 != 0 {
		t.Fatalf("restored: %+v", s)
	}
	stop := NewNumber("1003")
	stop.Apply(Event{At: at(0), Codes: []int32{131048}})
	n = NewNumber("1003")
	n.Restore(stop.Signal(t0.Add(time.Minute), DefaultTiers()))
	if s := n.Signal(t0.Add(10*time.Minute), DefaultTiers()); s.Advice != schema.AdviceStop || s.Reason != stop.Signal(t0, DefaultTiers()).Reason {
		t.Fatalf("stop restored: %+v", s)
	}
	if s := n.Signal(t0.Add(17*time.Minute), DefaultTiers()); s.Advice != schema.AdviceOK {
		t.Fatalf("stop after 15 min from the signal: %+v", s)
	}
	// The stop ends 15 minutes after its error, however late its last
	// signal was written (traffic rewrites it every second).
	late := stop.Signal(t0.Add(14*time.Minute+50*time.Second), DefaultTiers())
	if late.Advice != schema.AdviceStop || late.StopUntil == nil || !late.StopUntil.Equal(t0.Add(StopHold)) {
		t.Fatalf("stop_until of a stop at 0: %+v", late)
	}
	n = NewNumber("1003")
	n.Restore(late)
	if s := n.Signal(t0.Add(15*time.Minute+30*time.Second), DefaultTiers()); s.Advice != schema.AdviceOK || s.StopUntil != nil {
		t.Fatalf("stop restored from a signal written at 14:50 still holds at 15:30: %+v", s)
	}
	if u := n.HoldsUntil(); u != at(0)+int64(StopHold/time.Second) {
		t.Fatalf("holds until %d, want the stop's end %d", u, at(0)+int64(StopHold/time.Second))
	}
	// A signal written before stop_until existed: 15 minutes from its write.
	late.StopUntil = nil
	n = NewNumber("1003")
	n.Restore(late)
	if s := n.Signal(t0.Add(29*time.Minute), DefaultTiers()); s.Advice != schema.AdviceStop {
		t.Fatalf("stop restored from a signal without stop_until: %+v", s)
	}
	// Restored with the times of their updates: an older update delivered
	// again (a redelivery, a replay) changes neither quality nor limit; a
	// newer one does. Before, the restored state had no time, and any
	// update won.
	q := NewNumber("1004")
	q.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	q.Apply(Event{At: at(5), Field: "phone_number_quality_update", Name: "UNFLAGGED", NewValue: "TIER_1K"})
	qs := q.Signal(t0.Add(10*time.Second), DefaultTiers())
	if qs.QualityAt == nil || qs.QualityAt.Unix() != at(5) || qs.MessagingLimitAt == nil || qs.MessagingLimitAt.Unix() != at(5) {
		t.Fatalf("quality_at, messaging_limit_at: %+v", qs)
	}
	n = NewNumber("1004")
	n.Restore(qs)
	n.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(20*time.Second), DefaultTiers()); s.Quality != "unflagged" || s.MessagingLimit != "TIER_1K" {
		t.Fatalf("an older update after the restore won: %s, %s", s.Quality, s.MessagingLimit)
	}
	n.Apply(Event{At: at(7), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(20*time.Second), DefaultTiers()); s.Quality != "flagged" || s.MessagingLimit != "TIER_250" {
		t.Fatalf("a newer update after the restore lost: %s, %s", s.Quality, s.MessagingLimit)
	}
	// A signal without the times stands for updates no newer than itself.
	qs.QualityAt, qs.MessagingLimitAt = nil, nil
	n = NewNumber("1004")
	n.Restore(qs)
	n.Apply(Event{At: at(7), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(20*time.Second), DefaultTiers()); s.Quality != "unflagged" {
		t.Fatalf("an update older than a signal without times won: %s", s.Quality)
	}
	co := NewNumber("1002")
	co.Restore(schema.PacingSignal{TierSource: "coexistence", Quality: "unknown"})
	if s := co.Signal(t0, DefaultTiers()); s.TierMPS != 20 || s.Quality != "unknown" {
		t.Fatalf("coexistence: %+v", s)
	}
}

func TestDeduperHolds(t *testing.T) {
	d := NewDeduper()
	if !d.Holds(at(0)) {
		t.Fatal("an empty deduper holds every second")
	}
	d.Seen("a", at(100))
	if !d.Holds(at(37)) || d.Holds(at(36)) {
		t.Fatal("the window is the 64 s up to the newest")
	}
	if MaxPairWait != 4096*time.Second {
		t.Fatalf("MaxPairWait %v", MaxPairWait)
	}
}

// TestRestoreUnderOverride: a number whose tier an override sets is still
// restored as what it is (upgraded, coexistence), from its signal's
// upgraded_at and coexistence: with the override removed after a restart,
// its tier is 1,000 (or 20) again. Read from tier_source alone ("override")
// it came back as a default number, for good: Meta sends the upgrade once.
func TestRestoreUnderOverride(t *testing.T) {
	over := DefaultTiers()
	over.Overrides = map[string]int{"1101": 300, "1102": 300}
	up := NewNumber("1101")
	up.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "THROUGHPUT_UPGRADE"})
	co := NewNumber("1102")
	co.Apply(Event{At: at(0), Outbound: true, Coexistence: true, Field: "smb_message_echoes"})
	for _, c := range []struct {
		n      *Number
		tier   int
		source string
	}{{up, 1000, schema.TierSourceThroughputUpgrade}, {co, 20, schema.TierSourceCoexistence}} {
		last := c.n.Signal(t0.Add(10*time.Minute), over)
		if last.TierSource != schema.TierSourceOverride || last.TierMPS != 300 {
			t.Fatalf("%s under the override: %+v", c.n.ID, last)
		}
		n := NewNumber(c.n.ID)
		n.Restore(last)
		if s := n.Signal(t0.Add(11*time.Minute), DefaultTiers()); s.TierMPS != c.tier || s.TierSource != c.source {
			t.Errorf("%s restored from an override's signal, the override removed: tier %d (%s), want %d (%s)", c.n.ID, s.TierMPS, s.TierSource, c.tier, c.source)
		}
	}
	// The upgrade keeps Meta's time, not the signal's.
	n := NewNumber("1101")
	n.Restore(up.Signal(t0.Add(10*time.Minute), over))
	if s := n.Signal(t0.Add(11*time.Minute), over); s.UpgradedAt == nil || !s.UpgradedAt.Equal(t0) {
		t.Errorf("upgraded_at after a restore: %v, want %v", s.UpgradedAt, t0)
	}
}

// TestRestoreThrottle: a restart within a minute of a 130429 keeps the
// slow_down (throttled_at), and it ends when it would have. Before, the
// restored number said ok at the full tier at once.
func TestRestoreThrottle(t *testing.T) {
	n := NewNumber("1201")
	n.Apply(Event{At: at(0), Codes: []int32{130429}})
	last := n.Signal(t0.Add(5*time.Second), DefaultTiers())
	if last.ThrottledAt == nil || !last.ThrottledAt.Equal(t0) || last.Advice != schema.AdviceSlowDown {
		t.Fatalf("the signal after a 130429: %+v", last)
	}
	r := NewNumber("1201")
	r.Restore(last)
	if s := r.Signal(t0.Add(20*time.Second), DefaultTiers()); s.Advice != schema.AdviceSlowDown || s.RecommendedMPS != 0.8*80 || s.ThrottledAt == nil {
		t.Errorf("restored 20 s after the 130429: %s at %v (%s), want slow_down at %v", s.Advice, s.RecommendedMPS, s.Reason, 0.8*80)
	}
	if u := r.HoldsUntil(); u != at(60) {
		t.Errorf("holds until %d, want %d", u, at(60))
	}
	if s := r.Signal(t0.Add(61*time.Second), DefaultTiers()); s.Advice != schema.AdviceOK || s.ThrottledAt != nil {
		t.Errorf("a minute after the 130429: %+v", s)
	}
	if s := n.Signal(t0.Add(61*time.Second), DefaultTiers()); s.ThrottledAt != nil {
		t.Errorf("throttled_at a minute on: %v", s.ThrottledAt)
	}
}

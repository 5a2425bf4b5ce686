package pacing

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// Tiers are the throughput tiers in messages per second.
type Tiers struct {
	Default     int            // 80
	Upgraded    int            // 1,000 after THROUGHPUT_UPGRADE
	Coexistence int            // 20 for numbers also on the Business app
	Overrides   map[string]int // per phone number id, from the configuration
}

// DefaultTiers are Meta's (docs/meta-webhooks.md 9.1).
func DefaultTiers() Tiers {
	return Tiers{Default: schema.TierDefaultMPS, Upgraded: schema.TierUpgradedMPS, Coexistence: schema.TierCoexistenceMPS}
}

// The rule's constants (schema/README.md, "Pacing signal").
const (
	// Settle is how far behind the clock the windows end
	// (schema.PacingSettle).
	Settle = schema.PacingSettle
	// MaintenanceWindow is how long sends may return 131057 after a
	// THROUGHPUT_UPGRADE or a 131057.
	MaintenanceWindow = schema.MaintenanceWindow
	// StopHold is how long a stop verdict (131048, ...) holds after its
	// last error.
	StopHold = 15 * time.Minute
	// ThrottleHold is how long slow_down holds after the last 130429.
	ThrottleHold = time.Minute
	// Headroom is the share of the tier the advice keeps to before any
	// error: at or above it, slow_down.
	Headroom = 0.9
)

// numClasses is len(schema.ErrorClasses()); a test keeps them equal.
const numClasses = 18

var classIndex = func() map[schema.ErrorClass]int {
	m := map[schema.ErrorClass]int{}
	for i, c := range schema.ErrorClasses() {
		m[c] = i
	}
	return m
}()

// Event is what stage 2 needs of a normalized event.
type Event struct {
	Kind   schema.Kind
	At     int64  // Meta's timestamp, Unix seconds
	Status string // statuses: sent, delivered, read, failed, ...
	// Inbound is an inbound message; Outbound a message the number sent: its
	// sent status, or an echo of a message sent from the Business app.
	Inbound, Outbound bool
	Codes             []int32 // error codes (failed statuses, send results, value-level errors)
	Recipient         string  // keyed hash of the recipient, for pair-rate cool-downs
	// Management events (phone_number_quality_update and the like).
	Field, Name, NewValue string
	Coexistence           bool // an echo, history or contact sync: the number is on the Business app too
	// Waba is the WABA that Meta's webhook names for the number (its
	// entry id); "" for a send result.
	Waba string
}

// Number is the state of one business number. Its memory is about 1.5 KiB
// (BenchmarkNumberMemory): windows, not per-message records.
type Number struct {
	ID string

	traffic window
	errs    errWindow

	upgradedAt, maintenanceUntil int64
	lastThrottle, lastStop       int64
	stopCode                     int32
	coexistence                  bool
	quality, limit               string
	// waba is the number's WABA, from the newest event that named one
	// (wabaAt): Meta moves a number to another WABA, and the late
	// webhooks of the old one do not move it back.
	waba   string
	wabaAt int64
	// qualityAt and limitAt are the times of the events that set quality
	// and limit: an older event, retried or replayed late, changes neither.
	qualityAt, limitAt int64
}

// NewNumber is the state of a number before any event.
func NewNumber(id string) *Number { return &Number{ID: id, quality: "unknown"} }

// MoveOutbound moves an outbound message counted at second from to second
// to, its earlier evidence that came later. It reports whether the
// signal can change.
func (n *Number) MoveOutbound(from, to int64) bool { return n.traffic.move(from, to) }

// Apply folds one event into the state. It reports whether the event can
// change the signal (traffic always can).
func (n *Number) Apply(e Event) bool {
	changed := false
	if e.Inbound || e.Outbound {
		var in, out uint32
		if e.Inbound {
			in = 1
		}
		if e.Outbound {
			out = 1
		}
		changed = n.traffic.add(e.At, in, out) || changed
	}
	if e.Coexistence && !n.coexistence {
		n.coexistence, changed = true, true
	}
	if e.Waba != "" && e.At >= n.wabaAt {
		if e.Waba != n.waba {
			n.waba, changed = e.Waba, true
		}
		n.wabaAt = e.At
	}
	for _, code := range e.Codes {
		ec, _ := schema.LookupError(code)
		n.errs.add(e.At, classIndex[ec.Class])
		changed = true
		switch {
		case ec.Class == schema.ClassThroughput:
			n.lastThrottle = max(n.lastThrottle, e.At)
		case ec.Class == schema.ClassMaintenance:
			n.maintenanceUntil = max(n.maintenanceUntil, e.At+int64(MaintenanceWindow/time.Second))
		case ec.Verdict == schema.VerdictStop:
			if e.At >= n.lastStop {
				n.lastStop, n.stopCode = e.At, code
			}
		}
	}
	if e.Field == "phone_number_quality_update" {
		changed = true
		switch strings.ToUpper(e.Name) {
		case "THROUGHPUT_UPGRADE":
			if n.upgradedAt == 0 || e.At < n.upgradedAt {
				n.upgradedAt = e.At
			}
			n.maintenanceUntil = max(n.maintenanceUntil, e.At+int64(MaintenanceWindow/time.Second))
		case "FLAGGED", "UNFLAGGED":
			if e.At >= n.qualityAt {
				n.quality, n.qualityAt = strings.ToLower(e.Name), e.At
			}
		}
		if e.NewValue != "" && e.At >= n.limitAt {
			n.limit, n.limitAt = e.NewValue, e.At
		}
	}
	return changed
}

// tier is the number's tier and its source.
func (n *Number) tier(t Tiers) (int, string) {
	if v, ok := t.Overrides[n.ID]; ok {
		return v, schema.TierSourceOverride
	}
	if n.coexistence {
		return t.Coexistence, schema.TierSourceCoexistence
	}
	if n.upgradedAt != 0 {
		return t.Upgraded, schema.TierSourceThroughputUpgrade
	}
	return t.Default, schema.TierSourceDefault
}

// Signal is the number's pacing signal at now.
func (n *Number) Signal(now time.Time, tiers Tiers) schema.PacingSignal {
	sec := now.Unix()
	last := schema.PacingLastSecond(now) // the newest complete second
	tier, source := n.tier(tiers)
	s := schema.PacingSignal{
		Version: schema.PacingVersion, PhoneNumberID: n.ID, UpdatedAt: now.UTC(),
		TierMPS: tier, TierSource: source, Quality: n.quality, MessagingLimit: n.limit,
		RecentErrors: map[schema.ErrorClass]int{},
	}
	if n.upgradedAt > 0 {
		t := time.Unix(n.upgradedAt, 0).UTC()
		s.UpgradedAt = &t
	}
	s.Coexistence = n.coexistence
	s.WabaID = n.waba
	if n.qualityAt > 0 {
		t := time.Unix(n.qualityAt, 0).UTC()
		s.QualityAt = &t
	}
	if n.limitAt > 0 {
		t := time.Unix(n.limitAt, 0).UTC()
		s.MessagingLimitAt = &t
	}
	if n.lastThrottle != 0 && sec-n.lastThrottle < int64(ThrottleHold/time.Second) {
		t := time.Unix(n.lastThrottle, 0).UTC()
		s.ThrottledAt = &t
	}
	rate := func(span int) (float64, float64) {
		in, out := n.traffic.sum(last, span)
		return float64(in) / float64(span), float64(out) / float64(span)
	}
	in1, out1 := rate(1)
	in10, out10 := rate(10)
	in60, out60 := rate(60)
	s.Observed = schema.ObservedMPS{S1: in1 + out1, S10: in10 + out10, S60: in60 + out60, Inbound10: in10, Outbound10: out10}
	if tier > 0 {
		s.Utilization = s.Observed.S10 / float64(tier)
	}
	for i, c := range schema.ErrorClasses() {
		if k := n.errs.last60(sec, i); k > 0 {
			s.RecentErrors[c] = k
		}
	}
	if n.maintenanceUntil > sec {
		t := time.Unix(n.maintenanceUntil, 0).UTC()
		s.MaintenanceUntil = &t
	}
	s.Advice, s.RecommendedMPS, s.Reason = n.advise(sec, tier, s.Observed)
	if s.Advice == schema.AdviceStop {
		t := time.Unix(n.stopEnd(), 0).UTC()
		s.StopUntil = &t
	}
	return s
}

// stopEnd is when the number's stop ends (Unix seconds), 0 without one.
func (n *Number) stopEnd() int64 {
	if n.lastStop == 0 {
		return 0
	}
	return n.lastStop + int64(StopHold/time.Second)
}

// HoldsUntil is when the number's holds (a stop, a maintenance window, a
// 130429's minute) end, in Unix seconds; 0 when it has none. Its signal
// changes then without an event.
func (n *Number) HoldsUntil() int64 {
	u := n.stopEnd()
	if n.lastThrottle != 0 {
		u = max(u, n.lastThrottle+int64(ThrottleHold/time.Second))
	}
	return max(u, n.maintenanceUntil)
}

// advise is the rule of schema/README.md, first match wins:
//
//  1. stop: an error whose verdict is stop (131048, 131064, policy,
//     number_unusable, payment, auth) in the last 15 min; recommended 0.
//  2. pause: within a maintenance window (THROUGHPUT_UPGRADE or 131057,
//     a minute); recommended 0.
//  3. slow_down after 130429: in the last 10 s, half the outbound rate of
//     the last 10 s; in the last minute, 0.8 of the room the tier leaves
//     inbound.
//  4. slow_down at 90% of the tier or more (10 s): 90% of the tier less
//     inbound.
//  5. ok: the tier less the inbound rate (Meta counts both).
//
// The recommended rate is outbound messages per second, at least 1 unless
// 0 is advised, rounded down to a tenth.
func (n *Number) advise(now int64, tier int, o schema.ObservedMPS) (schema.Advice, float64, string) {
	room := math.Max(float64(tier)-o.Inbound10, 0)
	switch {
	case now < n.stopEnd():
		// The error is named with its time and the hold's end: after a
		// minute recent_errors no longer counts it, and the reason must not
		// read as if it did.
		return schema.AdviceStop, 0, "error " + itoa(n.stopCode) + " (stop, do not retry) at " + time.Unix(n.lastStop, 0).UTC().Format(time.RFC3339) +
			"; the stop holds until " + time.Unix(n.stopEnd(), 0).UTC().Format(time.RFC3339)
	case n.maintenanceUntil > now:
		return schema.AdvicePause, 0, "maintenance (throughput upgrade or 131057) until " + time.Unix(n.maintenanceUntil, 0).UTC().Format(time.RFC3339)
	case n.lastThrottle != 0 && now-n.lastThrottle < 10:
		return schema.AdviceSlowDown, floor1(math.Min(o.Outbound10/2, room)), "130429 in the last 10 s: half the outbound rate"
	case n.lastThrottle != 0 && now-n.lastThrottle < int64(ThrottleHold/time.Second):
		return schema.AdviceSlowDown, floor1(0.8 * room), "130429 in the last minute"
	case tier > 0 && o.S10 >= Headroom*float64(tier):
		return schema.AdviceSlowDown, floor1(math.Max(Headroom*float64(tier)-o.Inbound10, 0)), "at 90% of the tier or more"
	}
	return schema.AdviceOK, floor1(room), "within the tier"
}

// floor1 rounds down to a tenth, at least 1.
func floor1(v float64) float64 { return math.Max(math.Floor(v*10)/10, 1) }

func itoa(n int32) string { return strconv.Itoa(int(n)) }

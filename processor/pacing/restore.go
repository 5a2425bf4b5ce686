package pacing

import (
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// Restore seeds a number that has seen no event yet from its last
// published signal, so that a restarted stage 2 does not forget what it has
// acked and the consumer will not deliver again: the tier's source (a
// THROUGHPUT_UPGRADE or the Business app's syncs can be weeks old),
// quality and messaging limit with the times of the updates that set them,
// an open maintenance window and a stop, which
// ends when it would have (stop_until; for a signal written before it had
// one, 15 minutes after it was written), and a 130429's minute of
// slow_down (throttled_at). Traffic and the errors' counts are not
// restored: the windows start empty and fill within a minute.
func (n *Number) Restore(s schema.PacingSignal) {
	// What the number is, from upgraded_at and coexistence, which an
	// override's signal carries too (its tier_source says override: an
	// upgrade or coexistence read from it alone was lost, for good once the
	// override was removed); from the tier's source for a signal written
	// before they were.
	switch {
	case n.upgradedAt != 0:
	case s.UpgradedAt != nil:
		n.upgradedAt = max(s.UpgradedAt.Unix(), 1)
	case s.TierSource == schema.TierSourceThroughputUpgrade:
		n.upgradedAt = max(s.UpdatedAt.Unix(), 1)
	}
	if s.Coexistence || s.TierSource == schema.TierSourceCoexistence {
		n.coexistence = true
	}
	// Its WABA, as of the signal's time: an event that names another
	// replaces it only if newer (a redelivered webhook of the WABA Meta
	// moved the number from does not move it back).
	if n.waba == "" && s.WabaID != "" {
		n.waba, n.wabaAt = s.WabaID, s.UpdatedAt.Unix()
	}
	// With the times of the updates that set them, so that an older one
	// delivered again (a redelivery, a replay) changes neither; a signal
	// written before it had them stands for updates no newer than itself.
	at := func(t *time.Time) int64 {
		if t != nil {
			return t.Unix()
		}
		return s.UpdatedAt.Unix()
	}
	if q := strings.ToLower(s.Quality); (q == "flagged" || q == "unflagged") && n.qualityAt == 0 {
		n.quality, n.qualityAt = q, at(s.QualityAt)
	}
	if n.limit == "" && s.MessagingLimit != "" {
		n.limit, n.limitAt = s.MessagingLimit, at(s.MessagingLimitAt)
	}
	if s.Advice == schema.AdviceStop && n.lastStop == 0 {
		n.lastStop = s.UpdatedAt.Unix()
		if s.StopUntil != nil {
			n.lastStop = s.StopUntil.Add(-StopHold).Unix()
		}
		// The reason names the code: "error 131048 (stop, ...".
		if f := strings.Fields(s.Reason); len(f) > 1 && f[0] == "error" {
			if c, err := strconv.ParseInt(f[1], 10, 32); err == nil {
				n.stopCode = int32(c)
			}
		}
	}
	// A 130429's minute of slow_down goes on (a restart wrote ok at the
	// full tier, and a sender that obeyed hit the limit again).
	if s.ThrottledAt != nil && n.lastThrottle == 0 {
		n.lastThrottle = s.ThrottledAt.Unix()
	}
	if s.MaintenanceUntil != nil {
		n.maintenanceUntil = max(n.maintenanceUntil, s.MaintenanceUntil.Unix())
	}
}

package pacing

import (
	"strconv"
	"strings"

	"github.com/wahook/wahook/schema"
)

// Restore seeds a number that has seen no event yet from its last
// published signal, so that a restarted stage 2 does not forget what the
// EVENTS stream may no longer hold: the tier's source (a THROUGHPUT_UPGRADE
// or the Business app's syncs can be weeks old), quality, messaging limit
// and an open maintenance window. Traffic, errors and holds (stop,
// throttle) are not restored: the windows start empty and fill within a
// minute, and a stop is kept by the events of its last 15 minutes, which
// EVENTS still holds.
func (n *Number) Restore(s schema.PacingSignal) {
	switch s.TierSource {
	case "throughput_upgrade":
		if n.upgradedAt == 0 {
			n.upgradedAt = max(s.UpdatedAt.Unix(), 1)
		}
	case "coexistence":
		n.coexistence = true
	}
	if q := strings.ToLower(s.Quality); q == "flagged" || q == "unflagged" {
		n.quality = q
	}
	if n.limit == "" {
		n.limit = s.MessagingLimit
	}
	if s.Advice == schema.AdviceStop && n.lastStop == 0 {
		n.lastStop = s.UpdatedAt.Unix()
		// The reason names the code: "error 131048 (stop, ...".
		if f := strings.Fields(s.Reason); len(f) > 1 && f[0] == "error" {
			if c, err := strconv.ParseInt(f[1], 10, 32); err == nil {
				n.stopCode = int32(c)
			}
		}
	}
	if s.MaintenanceUntil != nil {
		n.maintenanceUntil = max(n.maintenanceUntil, s.MaintenanceUntil.Unix())
	}
}

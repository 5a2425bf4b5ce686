package pacing

import (
	"slices"
	"time"

	"github.com/wahook/wahook/schema"
)

// Pair-rate limits (docs/meta-webhooks.md 10.1): about one message per 6 s to the
// same recipient, bursts allowed; after 131056, wait 4^X seconds, X the
// number of 131056 in a row for the pair (0 for the first).
const (
	PairInterval   = schema.PairRuleInterval
	maxPairStrikes = schema.MaxPairStrikes
	// MaxPairCooldown is the longest a pair's cool-down runs from its
	// event: 4^6 s.
	MaxPairCooldown = 4096 * time.Second
)

// NextCooldown is a pair's cool-down after the 131056 eventID at at: one
// more strike than prev if prev is still kept then (schema.PairCooldown.Kept), and a
// wait of 4^(strikes-1) seconds, never less than the pair interval. An
// event of one of prev's last strikes, delivered again, leaves prev as it
// is (same is true): a redelivery after a crash found its own cool-down
// running and counted it as the strike before.
func NextCooldown(prev *schema.PairCooldown, phoneNumberID, recipient, eventID string, at time.Time) (c schema.PairCooldown, same bool) {
	if prev != nil && eventID != "" && slices.Contains(prev.EventIDs, eventID) {
		return *prev, true
	}
	strikes := 1
	if prev != nil && at.Before(prev.Kept()) {
		strikes = min(prev.Strikes+1, maxPairStrikes)
	}
	wait := schema.PairCooldownWait(strikes)
	until := at.Add(wait).UTC()
	if prev != nil && prev.Until.After(until) {
		until = prev.Until
	}
	var ids []string
	if strikes > 1 {
		ids = append(ids, prev.EventIDs[max(len(prev.EventIDs)-(maxStrikeIDs-1), 0):]...)
	}
	if eventID != "" {
		ids = append(ids, eventID)
	}
	return schema.PairCooldown{Version: schema.PacingVersion, PhoneNumberID: phoneNumberID, Recipient: recipient, Strikes: strikes, Until: until,
		EventIDs: ids}, false
}

// maxStrikeIDs is how many strikes' event ids a cool-down keeps: more than
// the strikes counted (maxPairStrikes), so that a redelivered burst of them
// is recognised whole.
const maxStrikeIDs = 8

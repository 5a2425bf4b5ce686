package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strings"
	"time"
)

// PacingSettle is how far behind a signal's updated_at its windows end: a
// message's webhook comes a moment after its timestamp, so the newest
// seconds are not complete yet. The windows end with the last whole second
// before updated_at - PacingSettle (PacingLastSecond).
const PacingSettle = 2 * time.Second

// PacingLastSecond is the newest second (Unix) that the windows of a signal
// written at updatedAt count.
func PacingLastSecond(updatedAt time.Time) int64 { return updatedAt.Add(-PacingSettle).Unix() - 1 }

// PacingVersion is the version of the pacing signal's JSON. A change that
// removes or redefines a field raises it; new fields do not.
const PacingVersion = 1

// Advice is what a sending service should do with a number now.
type Advice string

// The advice values, from the mildest.
const (
	AdviceOK       Advice = "ok"        // send up to recommended_mps
	AdviceSlowDown Advice = "slow_down" // throttled (130429) or close to the tier: send at recommended_mps, queue the rest
	AdvicePause    Advice = "pause"     // maintenance (throughput upgrade, 131057): send nothing until maintenance_until
	AdviceStop     Advice = "stop"      // quality or account errors (131048, ...): stop sending and look at the number
)

// ObservedMPS is a number's traffic, messages per second by Meta's
// timestamps, inbound and outbound together (Meta counts both against the
// tier), over the last 1, 10 and 60 complete seconds.
type ObservedMPS struct {
	S1         float64 `json:"1s"`
	S10        float64 `json:"10s"`
	S60        float64 `json:"60s"`
	Inbound10  float64 `json:"inbound_10s"`
	Outbound10 float64 `json:"outbound_10s"`
}

// PacingSignal is the value of a number's key in the wahook_pacing bucket,
// and of each message on wahook.pacing.<phone_number_id>. schema/README.md
// documents every field and the rule that sets advice and recommended_mps.
type PacingSignal struct {
	Version       int       `json:"version"`
	PhoneNumberID string    `json:"phone_number_id"`
	UpdatedAt     time.Time `json:"updated_at"`
	TierMPS       int       `json:"tier_mps"`
	TierSource    string    `json:"tier_source"` // default, throughput_upgrade, coexistence, override
	// UpgradedAt and Coexistence are what the number is known to be, also
	// when an override sets its tier: Meta's time of its first
	// THROUGHPUT_UPGRADE, and whether its Business-app echoes or syncs
	// came. A restarted stage 2 restores them from here.
	UpgradedAt  *time.Time `json:"upgraded_at,omitempty"`
	Coexistence bool       `json:"coexistence,omitempty"`
	// WabaID is the number's WABA as Meta's webhooks of it last named it
	// (their entry id): the pacer stops the numbers of a WABA Meta
	// disabled or restricted (wahook_accounts).
	WabaID           string             `json:"waba_id,omitempty"`
	Observed         ObservedMPS        `json:"observed_mps"`
	Utilization      float64            `json:"utilization"`          // observed_mps.10s / tier_mps
	Quality          string             `json:"quality"`              // flagged, unflagged or unknown
	QualityAt        *time.Time         `json:"quality_at,omitempty"` // Meta's time of the update that set quality
	MessagingLimit   string             `json:"messaging_limit,omitempty"`
	MessagingLimitAt *time.Time         `json:"messaging_limit_at,omitempty"` // Meta's time of the update that set messaging_limit
	RecentErrors     map[ErrorClass]int `json:"recent_errors"`                // error occurrences of the last 60 s by class
	MaintenanceUntil *time.Time         `json:"maintenance_until,omitempty"`
	StopUntil        *time.Time         `json:"stop_until,omitempty"`   // while the advice is stop: when its error's 15 minutes end
	ThrottledAt      *time.Time         `json:"throttled_at,omitempty"` // within a minute of the last 130429: Meta's time of it
	Advice           Advice             `json:"advice"`
	RecommendedMPS   float64            `json:"recommended_mps"`
	Reason           string             `json:"reason"`
}

// PairCooldown is the value of a key of the wahook_pair_cooldown bucket:
// after 131056 (pair rate limit) the number waits before messaging that
// recipient again; other recipients are not affected. The entry is kept
// past Until by its wait once more, to count the next 131056 in a row:
// senders go by Until.
type PairCooldown struct {
	Version       int       `json:"version"`
	PhoneNumberID string    `json:"phone_number_id"`
	Recipient     string    `json:"recipient"` // the keyed hash of the recipient, as in ClickHouse
	Strikes       int       `json:"strikes"`   // 131056 errors in a row for this pair
	Until         time.Time `json:"until"`
	// EventIDs are the ids of the 131056 events of the last strikes,
	// newest last (8 at most): one of them delivered again adds no strike.
	EventIDs []string `json:"event_ids,omitempty"`
}

// Meta's pair rule after a 131056, as stage 2 writes the cool-downs and the
// pacer keeps them: a wait of 4^X seconds, X the 131056 in a row for the
// pair before this one, never less than the pair interval (about one
// message per 6 s to one recipient), and X at most MaxPairStrikes-1 (4^6 s,
// about 68 minutes).
const (
	PairRuleInterval = 6 * time.Second
	MaxPairStrikes   = 7
)

// PairCooldownWait is the wait of a cool-down of strikes 131056 in a row:
// 4^(strikes-1) seconds, never less than PairRuleInterval.
func PairCooldownWait(strikes int) time.Duration {
	strikes = min(max(strikes, 1), MaxPairStrikes)
	return max(time.Duration(math.Pow(4, float64(strikes-1)))*time.Second, PairRuleInterval)
}

// Kept is when the cool-down stops counting strikes: its Until and its
// wait once more. A 131056 for the pair before then is the next strike in
// a row: a sender that waited until Until, sent again and was refused again
// waits 4^X. Counted only until Until, the strikes started again at every
// cool-down a sender obeyed, and its wait never grew past 6 s.
func (c PairCooldown) Kept() time.Time { return c.Until.Add(PairCooldownWait(c.Strikes)) }

// PacingSubject is the subject on which a number's signal is published on
// every change.
func PacingSubject(phoneNumberID string) string {
	return SubjectPacingPrefix + SubjectToken(phoneNumberID)
}

// PairCooldownKey is the key of a pair's cool-down: <phone_number_id>.<recipient hash>.
func PairCooldownKey(phoneNumberID, recipientHash string) string {
	return kvToken(phoneNumberID) + "." + kvToken(recipientHash)
}

// PacingKey is the key of a number's signal in wahook_pacing.
func PacingKey(phoneNumberID string) string { return kvToken(phoneNumberID) }

// kvToken keeps the characters a KV key token may hold. A value longer than
// MaxSubjectToken is a digest of it: a key of thousands of characters is a
// control line longer than nats-server takes, and it closes the connection
// (the decoder refuses such ids; this holds for events published before it
// did, and for any other caller).
func kvToken(s string) string {
	if s == "" {
		return NoNumber
	}
	if len(s) > MaxSubjectToken {
		sum := sha256.Sum256([]byte(s))
		return "h" + hex.EncodeToString(sum[:16])
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		}
		return '_'
	}, s)
}

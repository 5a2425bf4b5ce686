package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// Streams.
const (
	// StreamRaw holds every webhook body exactly as received, for seven days
	// (Meta's retry horizon, docs/meta-webhooks.md 1.4), so history can be replayed.
	StreamRaw = "WAHOOK_RAW"
	// StreamEvents holds normalized events, one subject per number and kind.
	StreamEvents = "WAHOOK_EVENTS"
)

// Subjects.
const (
	// SubjectRawPrefix is the prefix of RAW subjects: wahook.raw.<app>.
	SubjectRawPrefix = "wahook.raw."
	// SubjectRawAll matches every RAW subject.
	SubjectRawAll = "wahook.raw.>"
	// SubjectEventsPrefix is the prefix of EVENTS subjects:
	// wahook.events.<phone_number_id>.<kind>.
	SubjectEventsPrefix = "wahook.events."
	// SubjectEventsAll matches every EVENTS subject.
	SubjectEventsAll = "wahook.events.>"
	// SubjectPacingPrefix is the prefix of the per-number pacing signal:
	// wahook.pacing.<phone_number_id>.
	SubjectPacingPrefix = "wahook.pacing."
)

// KV buckets.
const (
	BucketPacing       = "wahook_pacing"
	BucketPairCooldown = "wahook_pair_cooldown"
	// BucketAccounts holds what Meta last said of each WABA's ban and
	// restrictions (account_update): key AccountKey(waba_id), value
	// AccountState. Stage 2 writes it; the pacer stops the numbers of a
	// WABA it says cannot send.
	BucketAccounts = "wahook_accounts"
	// BucketNumbers maps a display phone number (digits) to its phone number
	// id, learned from the metadata of message webhooks, for the number-level
	// webhooks that carry only the display number (docs/architecture.md, "Bus").
	BucketNumbers = "wahook_numbers"
	// BucketNumbersPending holds the number-level events (quality, limits,
	// throughput upgrades, names) that named a display number no message
	// webhook had paired with its id yet: key "<digits>.<event id>", value
	// the event's ManagementRow as JSON. Stage 1 applies and deletes them once
	// the number is learned (docs/architecture.md, "Numbers learned late").
	BucketNumbersPending = "wahook_numbers_pending"
	// BucketLeases holds leases with a TTL: the key "funnel" names the one
	// instance that resolves the delivery funnel (processor/funnel), the key
	// "migrations" the one process applying the ClickHouse migrations.
	BucketLeases = "wahook_leases"
)

// Headers on RAW messages.
const (
	// HeaderMsgID is JetStream's de-duplication header; on RAW it carries
	// RawMsgID(body), on EVENTS the event id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderReceivedAt is the time ingest received the body, RFC 3339 with
	// nanoseconds, UTC.
	HeaderReceivedAt = "Wahook-Received-At"
	// HeaderApp is the name of the Meta app the body came in for ("default"
	// for /webhook).
	HeaderApp = "Wahook-App"
)

// DefaultApp is the app name of the plain /webhook route.
const DefaultApp = "default"

// NoNumber stands for the phone number id in an EVENTS subject where an event
// has none, such as a template or account event.
const NoNumber = "_"

// RawSubject returns the RAW subject for an app. App names are validated by
// ValidAppName, so they are single subject tokens.
func RawSubject(app string) string { return SubjectRawPrefix + app }

// RawMsgID returns the Nats-Msg-Id of a raw body: the hex SHA-256 of the bytes
// as received. Meta's retries of the same body map to the same id, so the
// stream stores them once within its duplicate window.
func RawMsgID(body []byte) string {
	sum := sha256.Sum256(body)
	return RawMsgIDOf(&sum)
}

// RawMsgIDOf is RawMsgID for a body whose SHA-256 the caller has already
// (ingest keys its duplicate index by it).
func RawMsgIDOf(sum *[sha256.Size]byte) string { return hex.EncodeToString(sum[:]) }

// FormatReceivedAt formats a receive time for HeaderReceivedAt.
func FormatReceivedAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseReceivedAt parses a HeaderReceivedAt value.
func ParseReceivedAt(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// ValidAppName reports whether name can name an app: 1 to 64 characters of
// ASCII letters, digits, '-' and '_', not starting with '_' (reserved:
// SendResultsApp). The name is a path segment and a subject token, so
// nothing else is allowed.
func ValidAppName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '_' {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0
}

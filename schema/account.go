package schema

import (
	"strings"
	"time"
	"unicode/utf8"
)

// AccountVersion is the version of AccountState's JSON. A change that
// removes or redefines a field raises it; new fields do not.
const AccountVersion = 1

// Meta's ban states of a WABA (account_update DISABLED_UPDATE,
// ban_info.waba_ban_state).
const (
	BanDisable           = "DISABLE"
	BanReinstate         = "REINSTATE"
	BanScheduleToDisable = "SCHEDULE_FOR_DISABLE"
)

// Meta's restriction types (account_update ACCOUNT_RESTRICTION,
// restriction_info[].restriction_type) that stop sends. Others, such as
// RESTRICTED_ADD_PHONE_NUMBER_ACTION, are kept and stop none.
const (
	RestrictBusinessInitiated = "RESTRICTED_BIZ_INITIATED_MESSAGING"
	RestrictCustomerInitiated = "RESTRICTED_CUSTOMER_INITIATED_MESSAGING"
)

// BlockingRestriction reports whether a restriction of type typ (upper
// case) stops sends of some kind.
func BlockingRestriction(typ string) bool {
	return typ == RestrictBusinessInitiated || typ == RestrictCustomerInitiated
}

// An account state stays a small value whatever an event holds: a ban's
// state and date, and each restriction's type, are cut to MaxAccountText
// bytes (CutAccountText), and at most MaxRestrictions restrictions are
// kept, those that stop sending first, then the first others by type.
// A state past the server's max_payload could never be written, and its
// event was tried again for ever. Stage 1 keeps the same of an account
// event's value that cannot go whole, so that stage 2 makes the same state
// of it either way.
const (
	MaxAccountText  = 64
	MaxRestrictions = 16
)

// CutAccountText is s cut to MaxAccountText bytes, on a character's start.
func CutAccountText(s string) string {
	if len(s) <= MaxAccountText {
		return s
	}
	n := MaxAccountText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// AccountState is the value of a WABA's key in wahook_accounts: the last
// ban state and the last restrictions Meta sent for it, each with Meta's
// time of the event that set it. An event older than the one that set a
// part, retried or replayed late, changes nothing of it.
type AccountState struct {
	Version   int       `json:"version"`
	WabaID    string    `json:"waba_id"`
	UpdatedAt time.Time `json:"updated_at"` // when stage 2 wrote it
	// BanState is DISABLE, REINSTATE or SCHEDULE_FOR_DISABLE ("" before
	// any ban event); BanDate is Meta's waba_ban_date as sent (free text).
	BanState string     `json:"ban_state,omitempty"`
	BanDate  string     `json:"ban_date,omitempty"`
	BanAt    *time.Time `json:"ban_at,omitempty"`
	BanEvent string     `json:"ban_event_id,omitempty"`
	// Restrictions are those of the last ACCOUNT_RESTRICTION event: each
	// holds until its Expires (nil: no end given).
	Restrictions   []AccountRestriction `json:"restrictions,omitempty"`
	RestrictionsAt *time.Time           `json:"restrictions_at,omitempty"`
	RestrictEvent  string               `json:"restrictions_event_id,omitempty"`
}

// AccountRestriction is one restriction of a WABA.
type AccountRestriction struct {
	Type    string     `json:"type"`
	Expires *time.Time `json:"expires,omitempty"`
}

// AccountKey is the key of a WABA's state in wahook_accounts.
func AccountKey(wabaID string) string { return kvToken(wabaID) }

// Blocks reports whether the WABA's numbers can send nothing of the kind
// given at now, with why and until when (zero: until Meta says otherwise):
// a WABA disabled (banned), or a restriction in force of business-initiated
// messages, or with replies of messages to customers who wrote first
// (customer-initiated). A ban scheduled, or another restriction, blocks
// nothing.
func (a *AccountState) Blocks(now time.Time, replies bool) (until time.Time, reason string, blocked bool) {
	if a == nil {
		return time.Time{}, "", false
	}
	if strings.EqualFold(a.BanState, BanDisable) {
		reason = "WABA " + a.WabaID + " disabled by Meta (account_update DISABLED_UPDATE"
		if a.BanAt != nil {
			reason += " at " + a.BanAt.UTC().Format(time.RFC3339)
		}
		return time.Time{}, reason + ")", true
	}
	return a.Restricted(now, replies)
}

// Restricted is Blocks by the restrictions alone, the ban aside.
func (a *AccountState) Restricted(now time.Time, replies bool) (until time.Time, reason string, blocked bool) {
	if a == nil {
		return time.Time{}, "", false
	}
	want := RestrictBusinessInitiated
	if replies {
		want = RestrictCustomerInitiated
	}
	// Of several such restrictions, the one that ends last: one without an
	// end, else the latest expiration.
	var last *AccountRestriction
	for i := range a.Restrictions {
		r := &a.Restrictions[i]
		if !strings.EqualFold(r.Type, want) || (r.Expires != nil && !r.Expires.After(now)) {
			continue
		}
		if last == nil || (last.Expires != nil && (r.Expires == nil || r.Expires.After(*last.Expires))) {
			last = r
		}
	}
	if last == nil {
		return time.Time{}, "", false
	}
	reason = "WABA " + a.WabaID + " restricted by Meta: " + last.Type
	if last.Expires == nil {
		return time.Time{}, reason, true
	}
	return *last.Expires, reason + " until " + last.Expires.UTC().Format(time.RFC3339), true
}

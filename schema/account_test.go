package schema

import (
	"strings"
	"testing"
	"time"
)

func TestAccountBlocks(t *testing.T) {
	now := time.Unix(100, 0)
	later, latest, past := time.Unix(200, 0), time.Unix(300, 0), time.Unix(50, 0)
	cases := []struct {
		name    string
		st      *AccountState
		replies bool
		blocked bool
		until   time.Time
	}{
		{"none", nil, false, false, time.Time{}},
		{"disabled", &AccountState{BanState: BanDisable}, false, true, time.Time{}},
		{"disabled, replies", &AccountState{BanState: BanDisable}, true, true, time.Time{}},
		{"scheduled", &AccountState{BanState: BanScheduleToDisable}, false, false, time.Time{}},
		{"reinstated", &AccountState{BanState: BanReinstate}, false, false, time.Time{}},
		{"business-initiated", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictBusinessInitiated, Expires: &later}}}, false, true, later},
		{"business-initiated, replies", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictBusinessInitiated, Expires: &later}}}, true, false, time.Time{}},
		{"customer-initiated, replies", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictCustomerInitiated}}}, true, true, time.Time{}},
		{"customer-initiated", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictCustomerInitiated}}}, false, false, time.Time{}},
		{"expired", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictBusinessInitiated, Expires: &past}}}, false, false, time.Time{}},
		{"two, the later", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictBusinessInitiated, Expires: &later}, {Type: RestrictBusinessInitiated, Expires: &latest}, {Type: RestrictBusinessInitiated, Expires: &past}}}, false, true, latest},
		{"two, one without an end", &AccountState{Restrictions: []AccountRestriction{{Type: RestrictBusinessInitiated, Expires: &later}, {Type: RestrictBusinessInitiated}}}, false, true, time.Time{}},
		{"add number", &AccountState{Restrictions: []AccountRestriction{{Type: "RESTRICTED_ADD_PHONE_NUMBER_ACTION"}}}, false, false, time.Time{}},
	}
	for _, c := range cases {
		until, reason, blocked := c.st.Blocks(now, c.replies)
		if blocked != c.blocked || !until.Equal(c.until) || (blocked && reason == "") {
			t.Errorf("%s: blocked %v until %v (%q), want %v until %v", c.name, blocked, until, reason, c.blocked, c.until)
		}
	}
}

// Keys built from ids keep within a KV token's bounds whatever the id: one
// of thousands of characters (an account event published before the
// decoder refused such WABA ids) is a digest, not a control line that
// nats-server closes the connection for.
func TestKeysBounded(t *testing.T) {
	long, other := strings.Repeat("9", 5000), strings.Repeat("9", 4999)+"8"
	for name, key := range map[string]func(string) string{
		"AccountKey": AccountKey, "PacingKey": PacingKey,
		"PairCooldownKey": func(s string) string { return PairCooldownKey(s, "0123456789abcdef0123456789abcdef") },
	} {
		if k := key(long); len(k) > 2*MaxSubjectToken+1 || k == key(other) {
			t.Errorf("%s of 5,000 characters: %d characters, distinct from another's: %v", name, len(k), k != key(other))
		}
		if k := key("104281907735512"); !strings.HasPrefix(k, "104281907735512") {
			t.Errorf("%s of a real id: %s, want it as it is", name, k)
		}
	}
}

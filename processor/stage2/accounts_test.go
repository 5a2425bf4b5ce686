package stage2

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// account publishes an account event of the WABA, as stage 1 does: no
// number, Meta's value in raw.
func (h *harness) account(waba, id string, at time.Time, raw string) {
	h.t.Helper()
	h.accountAs(id, waba, id, at, raw)
}

// accountAs publishes an account event under the message id msgID.
func (h *harness) accountAs(msgID, waba, id string, at time.Time, raw string) {
	h.t.Helper()
	event := ""
	if m := eventName.FindStringSubmatch(raw); m != nil {
		event = m[1]
	}
	h.publish(schema.KindAccount, "", msgID, schema.ManagementRow{
		EventID: id, Kind: schema.KindAccount, Field: "account_update", EventTime: at, WabaID: waba,
		PhoneNumberID: schema.NoNumber, Event: event, Raw: raw,
	})
}

// eventName finds the event of an account_update value, also of one that
// is not JSON.
var eventName = regexp.MustCompile(`"event":"([A-Z_]+)"`)

// accountState reads the WABA's state from wahook_accounts.
func (h *harness) accountState(waba string) (schema.AccountState, error) {
	kv, err := h.js.KeyValue(context.Background(), schema.BucketAccounts)
	if err != nil {
		return schema.AccountState{}, err
	}
	e, err := kv.Get(context.Background(), schema.AccountKey(waba))
	if err != nil {
		return schema.AccountState{}, err
	}
	var st schema.AccountState
	err = json.Unmarshal(e.Value(), &st)
	return st, err
}

// accountsTaken waits until stage 2 has read n account events.
func (h *harness) accountsTaken(n int) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("%d account events read", n), func() (bool, string) {
		got := int(metricValue(h.s.m.accountEvents))
		return got >= n, fmt.Sprint(got)
	})
}

// wabas waits until the gauge of WABAs by state says want.
func (h *harness) wabas(what string, want map[string]int) {
	h.t.Helper()
	h.eventually("WABAs by state "+what, func() (bool, string) {
		got := map[string]int{}
		for state := range want {
			got[state] = int(metricValue(h.s.m.wabas.WithLabelValues(state)))
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
}

func (h *harness) accountCount(result string) int {
	return int(metricValue(h.s.m.accountEvents.WithLabelValues(result)))
}

func TestAccountStates(t *testing.T) {
	old := accountsCount
	accountsCount = 200 * time.Millisecond
	t.Cleanup(func() { accountsCount = old })
	h := start(t, sec(0), nil)
	const waba, other = "209374655180223", "209374655180999"
	ban := func(state string) string {
		return `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"` + state + `","waba_ban_date":"April 17, 2026"}}`
	}
	// A ban, then an older reinstatement that comes late (a retry): the
	// ban holds.
	h.account(waba, "ban-1", sec(10), ban("DISABLE"))
	h.account(waba, "reinstate-old", sec(5), ban("REINSTATE"))
	// Restrictions, one expiring as Unix seconds, one as an RFC 3339 time,
	// one not read (it holds until the next event).
	h.account(waba, "restrict-1", sec(12), `{"event":"ACCOUNT_RESTRICTION","restriction_info":[`+
		`{"restriction_type":"RESTRICTED_BIZ_INITIATED_MESSAGING","expiration":`+fmt.Sprint(sec(3600).Unix())+`},`+
		`{"restriction_type":"RESTRICTED_ADD_PHONE_NUMBER_ACTION","expiration":"`+sec(7200).Format(time.RFC3339)+`"},`+
		`{"restriction_type":"RESTRICTED_CUSTOMER_INITIATED_MESSAGING","expiration":"soon"}]}`)
	// Events that set no state, and one that is not JSON: the good events
	// after them are still applied.
	h.account(waba, "partner", sec(13), `{"event":"PARTNER_ADDED","waba_info":{"waba_id":"`+waba+`"}}`)
	h.account(other, "broken", sec(13), `{"event":"DISABLED_UPDATE","ban_info":`)
	h.account(other, "sched", sec(14), ban("SCHEDULE_FOR_DISABLE"))
	// The same event again under another message id (a replay): unchanged.
	h.accountAs("ban-1-replayed", waba, "ban-1", sec(10), ban("DISABLE"))
	h.flushed()
	h.accountsTaken(7)

	st, err := h.accountState(waba)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != schema.AccountVersion || st.WabaID != waba || st.BanState != schema.BanDisable || st.BanDate != "April 17, 2026" ||
		st.BanAt == nil || !st.BanAt.Equal(sec(10)) || st.BanEvent != "ban-1" {
		t.Fatalf("ban: %+v", st)
	}
	if len(st.Restrictions) != 3 || st.RestrictionsAt == nil || !st.RestrictionsAt.Equal(sec(12)) {
		t.Fatalf("restrictions: %+v", st.Restrictions)
	}
	want := map[string]*time.Time{}
	for _, r := range st.Restrictions {
		want[r.Type] = r.Expires
	}
	if e := want[schema.RestrictBusinessInitiated]; e == nil || !e.Equal(sec(3600)) {
		t.Errorf("business-initiated restriction expires %v, want %v", e, sec(3600))
	}
	if e := want["RESTRICTED_ADD_PHONE_NUMBER_ACTION"]; e == nil || !e.Equal(sec(7200)) {
		t.Errorf("add-number restriction expires %v, want %v", e, sec(7200))
	}
	if e, ok := want[schema.RestrictCustomerInitiated]; !ok || e != nil {
		t.Errorf("customer-initiated restriction with an expiration not read: %v, %v (want present, no end)", e, ok)
	}
	if st, err := h.accountState(other); err != nil || st.BanState != schema.BanScheduleToDisable {
		t.Errorf("the other WABA: %+v, %v", st, err)
	}
	for result, n := range map[string]int{accountApplied: 3, accountUnchanged: 2, accountIgnored: 1, accountBad: 1, accountFailed: 0} {
		if got := h.accountCount(result); got != n {
			t.Errorf("%s account events: %d, want %d", result, got, n)
		}
	}

	h.wabas("after the ban and restrictions", map[string]int{wabaDisabled: 1, wabaScheduled: 1, wabaRestrictedBusiness: 1, wabaRestrictedReplies: 1})
	// The business-initiated restriction expires by the clock.
	h.clock.Set(sec(3601))
	h.wabas("after the first restriction expired", map[string]int{wabaDisabled: 1, wabaScheduled: 1, wabaRestrictedBusiness: 0, wabaRestrictedReplies: 1})

	// Reinstated, and the restrictions lifted: an event with none. A
	// restarted stage 2 resumes its consumer, and keeps the state.
	h.restart()
	h.account(waba, "reinstate", sec(30), ban("REINSTATE"))
	h.account(waba, "restrict-2", sec(31), `{"event":"ACCOUNT_RESTRICTION","restriction_info":[]}`)
	h.flushed()
	h.accountsTaken(2)
	st, err = h.accountState(waba)
	if err != nil {
		t.Fatal(err)
	}
	if st.BanState != schema.BanReinstate || len(st.Restrictions) != 0 || !st.RestrictionsAt.Equal(sec(31)) {
		t.Fatalf("after the reinstatement: %+v", st)
	}
	h.wabas("after the reinstatement", map[string]int{wabaDisabled: 0, wabaScheduled: 1, wabaRestrictedBusiness: 0, wabaRestrictedReplies: 0})
	if got := h.accountCount(accountApplied) + h.accountCount(accountUnchanged); got != 2 {
		t.Errorf("the restarted stage 2 read %d account events, want the 2 new ones", got)
	}
}

// Two stage 2 instances share the account consumer; a write that loses
// the race to the other's reads the WABA again and merges into what the
// other wrote.
func TestAccountStateWriteRace(t *testing.T) {
	h := start(t, sec(0), nil)
	const waba = "209374655180223"
	h.account(waba, "ban-1", sec(10), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}`)
	h.flushed()
	h.accountsTaken(1)
	kv, err := h.js.KeyValue(context.Background(), schema.BucketAccounts)
	if err != nil {
		t.Fatal(err)
	}
	// Another instance's write lands between this one's read and its
	// write: a KV whose first Get is followed by a write of its own.
	racing := &racingKV{KeyValue: kv, write: func() {
		st, err := h.accountState(waba)
		if err != nil {
			t.Fatal(err)
		}
		at := sec(20)
		st.Restrictions = []schema.AccountRestriction{{Type: schema.RestrictBusinessInitiated}}
		st.RestrictionsAt, st.RestrictEvent = &at, "restrict-other"
		b, _ := json.Marshal(st)
		if _, err := kv.Put(context.Background(), schema.AccountKey(waba), b); err != nil {
			t.Fatal(err)
		}
	}}
	data, _ := json.Marshal(map[string]any{"kind": schema.KindAccount, "v": 1, "row": schema.ManagementRow{
		EventID: "reinstate", EventTime: sec(30), WabaID: waba, Event: "DISABLED_UPDATE",
		Raw: `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"REINSTATE"}}`,
	}})
	if res := h.s.applyAccount(context.Background(), racing, data, h.s.log); res != accountApplied {
		t.Fatalf("result %s", res)
	}
	if racing.gets < 2 {
		t.Errorf("%d reads: the lost write was not read again", racing.gets)
	}
	st, err := h.accountState(waba)
	if err != nil {
		t.Fatal(err)
	}
	if st.BanState != schema.BanReinstate || len(st.Restrictions) != 1 || st.RestrictEvent != "restrict-other" {
		t.Fatalf("state %+v: one write undid the other's", st)
	}
}

// racingKV runs write once, after its first Get.
type racingKV struct {
	jetstream.KeyValue
	write func()
	gets  int
}

func (r *racingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := r.KeyValue.Get(ctx, key)
	if r.gets++; r.gets == 1 {
		r.write()
	}
	return e, err
}

// The signal names the number's WABA as Meta's webhooks name it; a send
// result's waba_id, the sender's word, does not set it. A restarted stage 2
// keeps it.
func TestSignalNamesWABA(t *testing.T) {
	h := start(t, sec(10), nil)
	const number = "106540352249001"
	h.publish(schema.KindStatus, number, "s1", schema.StatusRow{EventID: "s1", EventTime: sec(1), WabaID: "w1", PhoneNumberID: number, MessageID: "wamid.s1", Status: "sent", RecipientHash: "r"})
	h.flushed()
	h.waitSignal(number, "the WABA of the status", func(s schema.PacingSignal) bool { return s.WabaID == "w1" })
	h.publish(schema.KindSendResult, number, "sr1", schema.SendResultRow{EventID: "sr1", EventTime: sec(2), WabaID: "w9", PhoneNumberID: number, MessageID: "wamid.sr1", Status: schema.SendAccepted})
	h.publish(schema.KindInbound, number, "i1", schema.InboundRow{EventID: "i1", EventTime: sec(3), WabaID: "w2", PhoneNumberID: number, MessageID: "wamid.i1", Type: "text", FromHash: "u"})
	h.flushed()
	h.waitSignal(number, "the WABA of the inbound message", func(s schema.PacingSignal) bool { return s.WabaID == "w2" && s.Observed.S60 > 0 })
	h.restart()
	h.publish(schema.KindSendResult, number, "sr2", schema.SendResultRow{EventID: "sr2", EventTime: sec(4), WabaID: "w9", PhoneNumberID: number, MessageID: "wamid.sr2", Status: schema.SendAccepted})
	h.flushed()
	// Written again by the restarted stage 2: its windows hold the send
	// result alone.
	s := h.waitSignal(number, "the send result after the restart", func(s schema.PacingSignal) bool {
		return s.Observed.Inbound10 == 0 && s.Observed.Outbound10 > 0
	})
	if s.WabaID != "w2" {
		t.Fatalf("after a restart and a send result naming another WABA: %q, want w2", s.WabaID)
	}
}

// The account consumer and the bucket, deleted by hand, are made again,
// and the events meanwhile are applied; the gauge counts the new bucket's
// states, not the old one's.
func TestAccountsRemade(t *testing.T) {
	old := accountsCount
	accountsCount = 200 * time.Millisecond
	t.Cleanup(func() { accountsCount = old })
	h := start(t, sec(0), nil)
	ctx := context.Background()
	ban := func(state string) string {
		return `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"` + state + `"}}`
	}
	h.account("w1", "ban-1", sec(10), ban("DISABLE"))
	h.flushed()
	h.accountsTaken(1)
	h.wabas("after the ban", map[string]int{wabaDisabled: 1, wabaScheduled: 0})

	// The consumer deleted: made again, and the next event applied.
	if err := h.js.DeleteConsumer(ctx, schema.StreamEvents, h.cfg.Durable+"_accounts"); err != nil {
		t.Fatal(err)
	}
	h.account("w1", "reinstate", sec(20), ban("REINSTATE"))
	h.flushed()
	h.eventually("the reinstatement after the consumer was deleted", func() (bool, string) {
		st, err := h.accountState("w1")
		return err == nil && st.BanState == schema.BanReinstate, fmt.Sprint(st, err)
	})

	// The bucket deleted: the gauge counts nothing; made again by the next
	// event's write, and the gauge counts what the new bucket holds.
	h.account("w3", "ban-3", sec(25), ban("DISABLE"))
	h.flushed()
	h.wabas("w3 banned", map[string]int{wabaDisabled: 1, wabaScheduled: 0})
	if err := h.js.DeleteKeyValue(ctx, schema.BucketAccounts); err != nil {
		t.Fatal(err)
	}
	h.wabas("once the bucket is gone", map[string]int{wabaDisabled: 0, wabaScheduled: 0})
	h.account("w2", "sched", sec(30), ban("SCHEDULE_FOR_DISABLE"))
	h.flushed()
	h.eventually("w2's state in the bucket made again", func() (bool, string) {
		st, err := h.accountState("w2")
		return err == nil && st.BanState == schema.BanScheduleToDisable, fmt.Sprint(st, err)
	})
	h.wabas("in the new bucket", map[string]int{wabaDisabled: 0, wabaScheduled: 1})
	if _, err := h.accountState("w1"); err == nil {
		t.Error("w1's state outlived its bucket")
	}
}

// Two events of one WABA in one second give the same state in any order,
// redelivered or replayed.
func TestAccountSameSecond(t *testing.T) {
	disable := &meta.AccountUpdate{Event: "DISABLED_UPDATE", BanInfo: &meta.BanInfo{WABABanState: "DISABLE"}}
	reinstate := &meta.AccountUpdate{Event: "DISABLED_UPDATE", BanInfo: &meta.BanInfo{WABABanState: "REINSTATE"}}
	type ev struct {
		id string
		u  *meta.AccountUpdate
	}
	a, b := ev{"aaa", disable}, ev{"bbb", reinstate}
	for _, order := range [][]ev{{a, b}, {b, a}, {a, b, a}, {b, a, b, a}} {
		st := schema.AccountState{WabaID: "w"}
		for _, e := range order {
			mergeAccount(&st, e.id, sec(5), e.u)
		}
		if st.BanState != schema.BanReinstate || st.BanEvent != "bbb" {
			t.Errorf("order %v: %s (%s)", order, st.BanState, st.BanEvent)
		}
		// An older one after them changes nothing.
		if mergeAccount(&st, "zzz", sec(4), disable) {
			t.Errorf("order %v: an older event changed the state", order)
		}
	}
}

// Account events that no WABA's state can hold as they are: a WABA id of
// thousands of characters on EVENTS (published before the decoder refused
// such ids; its key closed the connection stage 2 and ingest share, and
// every start again), an expiration in milliseconds (the year 58423: the
// state could not be written, and the event was dropped unsaid), one
// past the year 9999 in UTC, and a ban date and restrictions of hundreds
// of kilobytes (a state past max_payload, tried again every second for
// ever). The good events behind them are applied.
func TestAccountHostileValues(t *testing.T) {
	h := start(t, sec(0), nil)
	const waba, other = "209374655180223", "209374655180999"
	long := strings.Repeat("9", 5000)
	h.account(long, "long-waba", sec(10), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}`)
	h.account(waba, "restrict-ms", sec(11), `{"event":"ACCOUNT_RESTRICTION","restriction_info":[`+
		`{"restriction_type":"RESTRICTED_BIZ_INITIATED_MESSAGING","expiration":`+fmt.Sprint(sec(3600).UnixMilli())+`},`+
		`{"restriction_type":"RESTRICTED_ADD_PHONE_NUMBER_ACTION","expiration":"9999-12-31T23:59:59-23:00"}]}`)
	var rs []string
	for i := range 6000 {
		rs = append(rs, fmt.Sprintf(`{"restriction_type":"RESTRICTED_%s_%05d","expiration":%d}`, strings.Repeat("X", 60), i, sec(60).Unix()))
	}
	rs = append(rs, `{"restriction_type":"RESTRICTED_CUSTOMER_INITIATED_MESSAGING"}`)
	h.account(other, "ban-date", sec(12), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE","waba_ban_date":"`+strings.Repeat("é", 300_000)+`"}}`)
	h.account(other, "restrict-many", sec(13), `{"event":"ACCOUNT_RESTRICTION","restriction_info":[`+strings.Join(rs, ",")+`]}`)
	h.account(waba, "ban", sec(14), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}`)
	h.flushed()
	h.accountsTaken(5)
	h.eventually("the good events applied", func() (bool, string) {
		st, err := h.accountState(waba)
		return err == nil && st.BanState == schema.BanDisable, fmt.Sprint(st, err)
	})
	if h.nc.IsClosed() {
		t.Fatalf("the connection closed: %v", h.nc.LastError())
	}
	for result, n := range map[string]int{accountApplied: 4, accountBad: 1, accountFailed: 0} {
		if got := h.accountCount(result); got != n {
			t.Errorf("%s account events: %d, want %d", result, got, n)
		}
	}

	st, err := h.accountState(waba)
	if err != nil {
		t.Fatal(err)
	}
	exp := map[string]*time.Time{}
	for _, r := range st.Restrictions {
		exp[r.Type] = r.Expires
	}
	if e := exp[schema.RestrictBusinessInitiated]; e == nil || !e.Equal(sec(3600)) {
		t.Errorf("an expiration in milliseconds: %v, want %v", e, sec(3600))
	}
	if e, ok := exp["RESTRICTED_ADD_PHONE_NUMBER_ACTION"]; !ok || e != nil {
		t.Errorf("an expiration past 9999 in UTC: %v, %v (want the restriction, without an end)", e, ok)
	}

	st, err = h.accountState(other)
	if err != nil {
		t.Fatal(err)
	}
	if st.BanState != schema.BanDisable || len(st.BanDate) > schema.MaxAccountText || !utf8.ValidString(st.BanDate) || !strings.HasPrefix(st.BanDate, "éé") {
		t.Errorf("the long ban date: %d bytes, valid %v; want at most %d, cut on a character", len(st.BanDate), utf8.ValidString(st.BanDate), schema.MaxAccountText)
	}
	if len(st.Restrictions) != schema.MaxRestrictions {
		t.Errorf("restrictions kept: %d, want %d", len(st.Restrictions), schema.MaxRestrictions)
	}
	if _, _, blocked := st.Restricted(sec(20), true); !blocked {
		t.Errorf("the customer-initiated restriction among 6,000 others was not kept (%d kept)", len(st.Restrictions))
	}
	for _, r := range st.Restrictions {
		if len(r.Type) > schema.MaxAccountText {
			t.Errorf("a restriction type of %d bytes", len(r.Type))
		}
	}
}

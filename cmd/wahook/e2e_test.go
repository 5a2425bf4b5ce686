package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

const fixturesDir = "../../testdata/webhooks"

// fixtureFacts are the facts of expected.json this test adds up.
type fixtureFacts struct {
	StatusEvents      uint64            `json:"status_events"`
	Statuses          map[string]uint64 `json:"statuses"`
	StatusErrorCodes  map[string]uint64 `json:"status_error_codes"`
	ValueErrorCodes   map[string]uint64 `json:"value_error_codes"`
	InboundMessages   uint64            `json:"inbound_messages"`
	InboundTypes      map[string]uint64 `json:"inbound_types"`
	InboundErrorCodes map[string]uint64 `json:"inbound_error_codes"`
	PricingCategories map[string]uint64 `json:"pricing_categories"`
	GroupStatuses     uint64            `json:"group_statuses"`
	PhoneNumberIDs    []string          `json:"phone_number_ids"`
	WABAIDs           []string          `json:"waba_ids"`
	Sig               string            `json:"x_hub_signature_256"`
}

// TestServeFixturesEndToEnd posts every test body of testdata/webhooks to "wahook serve" over
// HTTP with Meta's signature, and finds every fact of expected.json in
// ClickHouse exactly: HTTP -> RAW -> stage 1 -> ClickHouse. Each fixture is
// posted twice (a Meta retry), and counts stay exact.
func TestServeFixturesEndToEnd(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixturesDir, "expected.json"))
	if err != nil {
		t.Fatalf("test bodies (testdata/webhooks): %v", err)
	}
	var all map[string]fixtureFacts
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	ch := schematest.ClickHouse(t)
	listen, apiListen, natsListen := freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", t.TempDir(),
			"--app-secret", "wahook-fixture-app-secret", "--clickhouse-dsn", ch.DSN, "--flush-interval", "100ms", "--log-level", "warn",
			"--funnel-interval", "200ms", "--funnel-max-wait", "1s", "--api-listen", apiListen, "--api-token", e2eToken},
			io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	}()
	base := "http://" + listen
	waitReady(t, base, &stderr)

	var (
		statuses, inbound, groups uint64
		statusValues              = map[string]uint64{}
		statusCodes               = map[string]uint64{}
		valueCodes                = map[string]uint64{}
		inboundCodes              = map[string]uint64{}
		inboundTypes              = map[string]uint64{}
		categories                = map[string]uint64{}
		numbers                   = map[string]bool{}
		wabas                     = map[string]bool{}
		names                     []string
	)
	add := func(dst, src map[string]uint64) {
		for k, v := range src {
			dst[k] += v
		}
	}
	for name, f := range all {
		if f.Sig == "" {
			continue
		}
		names = append(names, name)
		statuses += f.StatusEvents
		inbound += f.InboundMessages
		groups += f.GroupStatuses
		add(statusValues, f.Statuses)
		add(statusCodes, f.StatusErrorCodes)
		add(valueCodes, f.ValueErrorCodes)
		add(inboundCodes, f.InboundErrorCodes)
		add(inboundTypes, f.InboundTypes)
		add(categories, f.PricingCategories)
		if f.StatusEvents+f.InboundMessages > 0 {
			for _, n := range f.PhoneNumberIDs {
				numbers[n] = true
			}
		}
		for _, w := range f.WABAIDs {
			wabas[w] = true
		}
	}
	sort.Strings(names)
	if len(names) != 40 {
		t.Fatalf("%d fixtures, want the 40 of testdata/webhooks", len(names))
	}
	for round := 0; round < 2; round++ {
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(fixturesDir, name))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/webhook", bytes.NewReader(b))
			req.Header.Set(schema.SignatureHeader, all[name].Sig)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
		}
	}

	q := func(query string) map[string]uint64 {
		rows, err := ch.Conn.Query(ctx, strings.ReplaceAll(query, "{db}", ch.Database))
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		out := map[string]uint64{}
		for rows.Next() {
			var k string
			var n uint64
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			out[k] = n
		}
		return out
	}
	// Wait until stage 1 has written every row. Readiness does not wait for
	// ClickHouse (webhooks are taken while it is down), so the tables may
	// not exist yet at first.
	testutil.Eventually(t, 30*time.Second, "stage 1 to write every row", func() (bool, string) {
		in, st := count(t, ch, "SELECT uniqExact(event_id) FROM {db}.inbound_messages"), count(t, ch, "SELECT uniqExact(event_id) FROM {db}.status_events")
		return in == inbound && st == statuses, fmt.Sprintf("%d of %d inbound messages, %d of %d status events\n%s", in, inbound, st, statuses, stderr.String())
	})
	checks := []struct {
		what  string
		query string
		want  map[string]uint64
	}{
		{"status events", "SELECT 'n', uniqExact(event_id) FROM {db}.status_events", map[string]uint64{"n": statuses}},
		{"statuses", "SELECT status, uniqExact(event_id) FROM {db}.status_events GROUP BY status", statusValues},
		{"group statuses", "SELECT 'n', uniqExact(event_id) FROM {db}.status_events WHERE recipient_type = 'group'", map[string]uint64{"n": groups}},
		{"pricing categories", "SELECT pricing_category, uniqExact(event_id) FROM {db}.status_events WHERE pricing_category != '' GROUP BY pricing_category", categories},
		{"status error codes", "SELECT toString(code), toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute WHERE origin = 'status' GROUP BY code", statusCodes},
		{"value error codes", "SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin IN ('value', 'history') GROUP BY code", valueCodes},
		{"inbound error codes", "SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin = 'inbound' GROUP BY code", inboundCodes},
		{"inbound types", "SELECT type, uniqExact(event_id) FROM {db}.inbound_messages GROUP BY type", inboundTypes},
		{"dead letters", "SELECT 'n', count() FROM {db}.dead_letters FINAL", map[string]uint64{"n": 0}},
	}
	// A batch is written table by table: wait for its later tables, then
	// check (a check that never holds is reported below).
	testutil.Poll(30*time.Second, func() bool {
		for _, c := range checks {
			if fmt.Sprint(q(c.query)) != fmt.Sprint(c.want) {
				return false
			}
		}
		return true
	})
	for _, c := range checks {
		if got := q(c.query); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.what, got, c.want)
		}
	}
	gotNumbers := q("SELECT phone_number_id, toUInt64(1) FROM (SELECT phone_number_id FROM {db}.status_events UNION ALL SELECT phone_number_id FROM {db}.inbound_messages) GROUP BY phone_number_id")
	if len(gotNumbers) != len(numbers) {
		t.Errorf("phone number ids: got %v, want %v", gotNumbers, numbers)
	}
	for n := range numbers {
		if _, ok := gotNumbers[n]; !ok {
			t.Errorf("phone number id %s missing", n)
		}
	}
	gotWABAs := q("SELECT waba_id, toUInt64(1) FROM (SELECT waba_id FROM {db}.status_events UNION ALL SELECT waba_id FROM {db}.inbound_messages UNION ALL SELECT waba_id FROM {db}.management_events UNION ALL SELECT waba_id FROM {db}.errors) GROUP BY waba_id")
	for w := range wabas {
		if _, ok := gotWABAs[w]; !ok {
			t.Errorf("WABA %s missing", w)
		}
	}
	checkReports(t, ctx, ch, "http://"+apiListen, statusCodes)
	checkSendResults(t, "http://"+apiListen)
	checkPacing(t, base, "http://"+apiListen, "nats://"+natsListen)
}

// checkPacing drives one number through serve's stages 1 and 2: a sent
// status (which teaches stage 1 its display number), a THROUGHPUT_UPGRADE
// addressed by display number only, and send results (the sent message
// accepted again, 130429 twice, a 131056), posted twice. The number's
// signal in the KV must show the upgraded tier and its maintenance window,
// the message once, each error once, and one pair-rate cool-down.
func checkPacing(t *testing.T, base, apiBase, natsURL string) {
	t.Helper()
	const number, display, waba = "109000000000001", "15550009999", "109000000000900"
	now := time.Now().Add(-5 * time.Second).Unix()
	status := fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"changes":[{"field":"messages","value":{
 "messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},
 "statuses":[{"id":"wamid.PACE1","status":"sent","timestamp":"%d","recipient_id":"15551239999"}]}}]}]}`, waba, display, number, now)
	upgrade := fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"time":%d,"changes":[{"field":"phone_number_quality_update",
 "value":{"display_phone_number":%q,"event":"THROUGHPUT_UPGRADE","current_limit":"TIER_UNLIMITED"}}]}]}`, waba, now, display)
	post := func(body string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(signedRequest(base+"/webhook", "wahook-fixture-app-secret", body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("webhook: status %d", resp.StatusCode)
		}
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The upgrade is addressed by display number: it must come after the
	// status that maps it, so wait for the status's event first.
	post(status)
	testutil.Eventually(t, 30*time.Second, "the sent status on WAHOOK_EVENTS", func() (bool, string) {
		return onEvents(ctx, js, schema.EventsSubject(number, schema.KindStatus)), "not there"
	})
	post(upgrade)
	// The cool-down of the 131056 lasts 6 s from its time: give it a
	// second ahead (stage 2 takes up to 2 s ahead as is), so that the key
	// lasts 6 s or more after the post, however the second is rounded.
	ts, pairTS := time.Unix(now, 0).UTC().Format(time.RFC3339), time.Now().Add(time.Second).UTC().Format(time.RFC3339)
	doc := fmt.Sprintf(`{"results": [
 {"phone_number_id": %[1]q, "status": "accepted", "message_id": "wamid.PACE1", "recipient": "15551239999", "timestamp": %[2]q},
 {"phone_number_id": %[1]q, "status": "failed", "error_code": 130429, "recipient": "15551230002", "timestamp": %[2]q},
 {"phone_number_id": %[1]q, "status": "failed", "error_code": 130429, "recipient": "15551230003", "timestamp": %[2]q},
 {"phone_number_id": %[1]q, "status": "failed", "error_code": 131056, "recipient": "15551230004", "timestamp": %[3]q}]}`, number, ts, pairTS)
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, apiBase+"/api/v1/send-results", strings.NewReader(doc))
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("send results: %d", resp.StatusCode)
		}
	}
	// The cool-down expires 6 s after the 131056: look for it first.
	var cooldowns []string
	if !testutil.Poll(6*time.Second, func() bool { cooldowns = cooldownKeys(ctx, js); return len(cooldowns) > 0 }) ||
		len(cooldowns) != 1 || !strings.HasPrefix(cooldowns[0], schema.PacingKey(number)+".") {
		t.Errorf("pair-rate cool-downs: %v, want one for %s", cooldowns, number)
	}
	var sig schema.PacingSignal
	var last string
	ok := testutil.Poll(30*time.Second, func() bool {
		v, err := kvValue(ctx, js, schema.BucketPacing, schema.PacingKey(number))
		if err != nil {
			return false
		}
		last = string(v)
		sig = schema.PacingSignal{}
		if json.Unmarshal(v, &sig) != nil {
			return false
		}
		return sig.TierMPS == 1000 && sig.RecentErrors[schema.ClassThroughput] == 2 && sig.RecentErrors[schema.ClassPairRate] == 1
	})
	if !ok {
		t.Fatalf("pacing signal of %s: %s", number, last)
	}
	if sig.TierSource != "throughput_upgrade" || sig.MaintenanceUntil == nil || sig.Observed.S60*60 < 0.999 || sig.Observed.S60*60 > 1.001 {
		t.Errorf("pacing signal of %s (one message sent, counted once): %s", number, last)
	}
	// account_update_restriction.json's WABA, restricted by Meta.
	const restricted = "209374655180223"
	var st schema.AccountState
	ok = testutil.Poll(30*time.Second, func() bool {
		v, err := kvValue(ctx, js, schema.BucketAccounts, schema.AccountKey(restricted))
		if err != nil {
			return false
		}
		last = string(v)
		return json.Unmarshal(v, &st) == nil
	})
	expires := time.Unix(1782121000, 0)
	if !ok || len(st.Restrictions) != 2 || st.RestrictionsAt == nil || !st.RestrictionsAt.Equal(time.Unix(1781516200, 0)) || st.BanState != "" {
		t.Fatalf("state of WABA %s: %s", restricted, last)
	}
	for i, typ := range []string{"RESTRICTED_ADD_PHONE_NUMBER_ACTION", schema.RestrictBusinessInitiated} {
		if r := st.Restrictions[i]; r.Type != typ || r.Expires == nil || !r.Expires.Equal(expires) {
			t.Errorf("state of WABA %s: restriction %d is %+v, want %s until %v", restricted, i, r, typ, expires)
		}
	}
	// The API answers it, the restriction of business-initiated messages
	// over by now (it ended in June 2026).
	req, _ := http.NewRequest(http.MethodGet, apiBase+"/api/v1/accounts?waba_id="+restricted, nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var accounts api.Accounts
	if resp.StatusCode != 200 || json.Unmarshal(body, &accounts) != nil || len(accounts.Accounts) != 1 ||
		accounts.Accounts[0].WabaID != restricted || len(accounts.Accounts[0].Restrictions) != 2 || !accounts.Accounts[0].BusinessInitiated.Allowed {
		t.Errorf("/api/v1/accounts: %d %s", resp.StatusCode, body)
	}
}

// kvValue reads a key's value.
func kvValue(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// cooldownKeys lists the keys of wahook_pair_cooldown.
func cooldownKeys(ctx context.Context, js jetstream.JetStream) []string {
	kv, err := js.KeyValue(ctx, schema.BucketPairCooldown)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	var all []string
	for k := range keys.Keys() {
		all = append(all, k)
	}
	return all
}

// onEvents reports whether WAHOOK_EVENTS holds a message on subject.
func onEvents(ctx context.Context, js jetstream.JetStream, subject string) bool {
	st, err := js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		return false
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	return err == nil && len(info.State.Subjects) == 1
}

// signedRequest is a POST of body to url signed as Meta signs it.
func signedRequest(url, secret, body string) *http.Request {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set(schema.SignatureHeader, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	return req
}

// withoutAsOf is a funnel's JSON without its as_of.
func withoutAsOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if _, ok := m["as_of"]; !ok {
		t.Errorf("no as_of in %s", b)
	}
	delete(m, "as_of")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSendResults posts send results to serve's API (twice: a client's
// retry) and finds their failures in the API's failure distribution.
func checkSendResults(t *testing.T, base string) {
	t.Helper()
	doc := `{"results": [
 {"phone_number_id": "106540352242922", "status": "accepted", "message_id": "wamid.SR1", "recipient": "15551230001", "timestamp": "2026-03-14T15:00:00Z"},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 130429, "recipient": "15551230002", "timestamp": "2026-03-14T15:00:01Z"},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 130429, "recipient": "15551230003", "timestamp": "2026-03-14T15:00:01Z"},
 {"phone_number_id": "106540352242922", "status": "failed", "error_code": 131056, "recipient": "15551230004", "timestamp": "2026-03-14T15:00:02Z"}]}`
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/send-results", strings.NewReader(doc))
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(b), `"accepted":4`) {
			t.Fatalf("send results: %d %s", resp.StatusCode, b)
		}
	}
	want := "map[130429:2 131056:1]"
	testutil.Eventually(t, 30*time.Second, "the send-result failures "+want, func() (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/failures?origin=send_result&from=2026-03-14&to=2026-03-15", nil)
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Rows []struct {
				Code     int32
				Failures uint64
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&f)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := map[int32]uint64{}
		for _, r := range f.Rows {
			got[r.Code] = r.Failures
		}
		return fmt.Sprint(got) == want, fmt.Sprintf("send-result failures: got %v, want %s", got, want)
	})
}

const e2eToken = "e2e-api-token-0123456789"

// checkReports asks serve's query API for the failure distribution of the
// fixtures' failed statuses and compares it with expected.json; then each
// report of "wahook report --json" must equal the API's answer byte for byte.
func checkReports(t *testing.T, ctx context.Context, ch *schematest.ClickHouseDB, base string, statusCodes map[string]uint64) {
	t.Helper()
	var lo, hi time.Time
	if err := ch.Conn.QueryRow(ctx, fmt.Sprintf("SELECT min(event_time), max(event_time) FROM %s.status_events", ch.Database)).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	from, to := lo.UTC().Truncate(time.Hour).Format(time.RFC3339), hi.UTC().Add(time.Hour).Truncate(time.Hour).Format(time.RFC3339)
	apiGet := func(path string) []byte {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	var f struct {
		Rows []struct {
			Code     int32
			Failures uint64
		}
	}
	if err := json.Unmarshal(apiGet("/api/v1/failures?origin=status&group_by=code&from="+from+"&to="+to), &f); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, r := range f.Rows {
		got[fmt.Sprint(r.Code)] = r.Failures
	}
	if fmt.Sprint(got) != fmt.Sprint(statusCodes) {
		t.Errorf("API failures by code: got %v, want %v (expected.json)", got, statusCodes)
	}

	// The funnel resolver has passed over every status: its count of
	// messages is that of status_events. The watermark is the second a pass
	// started (ClickHouse's now()), and it covers the rows inserted before
	// that second; the rows here were inserted before the second now() below
	// returns, possibly within it, so only a pass from a later second
	// covers them all.
	var now time.Time
	var messages uint64
	if err := ch.Conn.QueryRow(ctx, fmt.Sprintf(`SELECT now(), uniqExact(phone_number_id, message_id, if(participant_hash != '', participant_hash, recipient_hash))
FROM %s.status_events WHERE message_id != '' AND status IN ('sent', 'delivered', 'read', 'played', 'failed')`, ch.Database)).Scan(&now, &messages); err != nil {
		t.Fatal(err)
	}
	var fn struct {
		AsOf *time.Time `json:"as_of"`
		Rows []struct{ Messages uint64 }
	}
	testutil.Eventually(t, 60*time.Second, "the funnel resolver's pass over every status", func() (bool, string) {
		fn.AsOf = nil
		b := apiGet("/api/v1/funnel?by=total&from=" + from + "&to=" + to)
		return json.Unmarshal(b, &fn) == nil && fn.AsOf != nil && fn.AsOf.After(now), string(b)
	})
	if len(fn.Rows) != 1 || fn.Rows[0].Messages != messages || messages == 0 {
		t.Errorf("funnel total %+v, want %d messages", fn.Rows, messages)
	}

	var number string
	var at time.Time
	if err := ch.Conn.QueryRow(ctx, fmt.Sprintf("SELECT phone_number_id, min(event_time) FROM %s.status_events GROUP BY phone_number_id ORDER BY count() DESC LIMIT 1", ch.Database)).Scan(&number, &at); err != nil {
		t.Fatal(err)
	}
	day := "&from=" + at.UTC().Truncate(24*time.Hour).Format(time.RFC3339) + "&to=" + at.UTC().Truncate(24*time.Hour).Add(24*time.Hour).Format(time.RFC3339)
	for _, c := range []struct {
		report string
		flags  []string
		path   string
	}{
		{"errors", []string{"--group-by", "code,number", "--step", "1h"}, "/api/v1/failures?group_by=code,number&step=1h"},
		{"errors", []string{"--class", "throughput,pair_rate", "--group-by", "class"}, "/api/v1/failures?class=throughput,pair_rate&group_by=class"},
		{"funnel", []string{"--by", "number"}, "/api/v1/funnel?by=number"},
		{"throughput", []string{"--phone-number-id", number, "--step", "1m"}, "/api/v1/throughput?phone_number_id=" + number + "&step=1m" + day},
		{"numbers", nil, "/api/v1/numbers?"},
		{"dead-letters", nil, "/api/v1/dead-letters?"},
	} {
		args := append([]string{"report", c.report, "--clickhouse-dsn", ch.DSN, "--json", "--from", from, "--to", to}, c.flags...)
		path := c.path + "&from=" + from + "&to=" + to
		if c.report == "throughput" {
			q, _ := url.ParseQuery(strings.TrimPrefix(day, "&"))
			args = append(args[:5], append([]string{"--from", q.Get("from"), "--to", q.Get("to")}, c.flags...)...)
			path = c.path
		}
		var out, errOut bytes.Buffer
		if code := run(ctx, args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		want := apiGet(strings.Replace(path, "?&", "?", 1))
		got := out.Bytes()
		if c.report == "funnel" {
			// The resolver passes every 200 ms: its watermark may move
			// between the two answers.
			got, want = withoutAsOf(t, got), withoutAsOf(t, want)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("wahook %s %v:\n%s\nAPI:\n%s", c.report, c.flags, got, want)
		}
		if !json.Valid(want) || len(want) < 20 {
			t.Errorf("%s: answer %s", path, want)
		}
	}
	// A readable table too.
	var out bytes.Buffer
	if code := run(ctx, []string{"report", "errors", "--clickhouse-dsn", ch.DSN, "--from", from, "--to", to}, &out, io.Discard); code != 0 ||
		!strings.Contains(out.String(), "Message undeliverable") || !strings.Contains(out.String(), "VERDICT") {
		t.Errorf("table (exit %d):\n%s", code, out.String())
	}
	// The table says what the JSON marks: a funnel cut by its limit, and a
	// throughput bucket cut by the range's end.
	out.Reset()
	if code := run(ctx, []string{"report", "funnel", "--clickhouse-dsn", ch.DSN, "--by", "number", "--limit", "1", "--from", from, "--to", to}, &out, io.Discard); code != 0 ||
		!strings.Contains(out.String(), "(more rows: raise --limit)") {
		t.Errorf("funnel by number, one row of several (exit %d):\n%s", code, out.String())
	}
	if minute := at.UTC().Truncate(time.Minute); at.Sub(minute) < 59*time.Second {
		out.Reset()
		cut := minute.Add(59 * time.Second).Format(time.RFC3339)
		if code := run(ctx, []string{"report", "throughput", "--clickhouse-dsn", ch.DSN, "--phone-number-id", number, "--from", minute.Format(time.RFC3339), "--to", cut}, &out, io.Discard); code != 0 ||
			!strings.Contains(out.String(), minute.Format(time.RFC3339)+" (partial)") {
			t.Errorf("throughput to %s (exit %d):\n%s", cut, code, out.String())
		}
	}
	var errOut bytes.Buffer
	if code := run(ctx, []string{"report", "errors", "--clickhouse-dsn", ch.DSN, "--group-by", "planet"}, io.Discard, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "--group-by") {
		t.Errorf("bad flag: exit %d: %s", code, errOut.String())
	}
}

func waitReady(t testing.TB, base string, logs *syncBuffer) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, base+"/readyz to answer 200", func() (bool, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, logs.String())
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("%d\n%s", resp.StatusCode, logs.String())
	})
}

package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/schema"
)

// /api/v1/accounts lists the WABAs' states of wahook_accounts with what
// their numbers may send now, those that cannot first; a scoped token sees
// its own WABAs only, and a foreign one it names is not found.
func TestAccounts(t *testing.T) {
	jsc, srv := embeddedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := tenantConfig()
	cfg.Accounts = api.Bucket{JS: jsc, Name: schema.BucketAccounts}
	cfg.Pacing = api.Bucket{JS: jsc, Name: schema.BucketPacing}
	cfg.QueryTimeout = 2 * time.Second
	s, err := api.New(cfg, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	// No bucket yet (stage 2 not started): none.
	var got api.Accounts
	if code, b := getAs(t, s, "/api/v1/accounts", token1, &got); code != 200 || len(got.Accounts) != 0 {
		t.Fatalf("without the bucket: %d %s", code, b)
	}

	kv, err := jsc.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketAccounts})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	later, past := now.Add(time.Hour), now.Add(-time.Hour)
	for _, st := range []schema.AccountState{
		{WabaID: "waba-3", BanState: schema.BanScheduleToDisable},
		{WabaID: "waba-2", Restrictions: []schema.AccountRestriction{{Type: schema.RestrictBusinessInitiated, Expires: &later}, {Type: schema.RestrictCustomerInitiated, Expires: &past}}},
		{WabaID: "waba-1", BanState: schema.BanDisable, BanAt: &now},
		{WabaID: "waba-4", Restrictions: []schema.AccountRestriction{{Type: schema.RestrictBusinessInitiated, Expires: &past}}},
	} {
		st.Version, st.UpdatedAt = schema.AccountVersion, now
		b, _ := json.Marshal(st)
		if _, err := kv.Put(ctx, schema.AccountKey(st.WabaID), b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "not_a_state", []byte("{")); err != nil {
		t.Fatal(err)
	}

	code, b := getAs(t, s, "/api/v1/accounts", token1, &got)
	if code != 200 {
		t.Fatalf("unscoped: %d %s", code, b)
	}
	var order []string
	for _, a := range got.Accounts {
		order = append(order, a.WabaID)
	}
	if strings.Join(order, " ") != "waba-1 waba-2 waba-3 waba-4" {
		t.Fatalf("order %v, want the blocked WABAs first, then by id: %s", order, b)
	}
	w1, w2, w3 := got.Accounts[0], got.Accounts[1], got.Accounts[2]
	if w1.BusinessInitiated.Allowed || w1.Replies.Allowed || w1.BusinessInitiated.Until != nil || !strings.Contains(w1.Replies.Reason, "disabled") {
		t.Errorf("the disabled WABA: %+v", w1)
	}
	if w2.BusinessInitiated.Allowed || w2.BusinessInitiated.Until == nil || !w2.BusinessInitiated.Until.Equal(later) || !w2.Replies.Allowed {
		t.Errorf("the WABA restricted from business-initiated messages (its reply restriction expired): %+v", w2)
	}
	if !w3.BusinessInitiated.Allowed || !w3.Replies.Allowed || w3.BanState != schema.BanScheduleToDisable {
		t.Errorf("the WABA scheduled to be disabled sends still: %+v", w3)
	}
	if !strings.Contains(string(b), `"waba_id":"waba-1","updated_at":`) {
		t.Errorf("the state's fields are not the account's own: %s", b)
	}

	// Tenant A (waba-1) sees its WABA only.
	if code, b := getAs(t, s, "/api/v1/accounts", tokenA, &got); code != 200 || len(got.Accounts) != 1 || got.Accounts[0].WabaID != "waba-1" {
		t.Errorf("tenant A: %d %s", code, b)
	}
	if code, b := getAs(t, s, "/api/v1/accounts?waba_id=waba-2", tokenA, nil); code != http.StatusNotFound || !strings.Contains(string(b), `"waba_id"`) {
		t.Errorf("tenant A asking for tenant B's WABA: %d %s", code, b)
	}
	if code, b := getAs(t, s, "/api/v1/accounts?waba_id=waba-2,waba-3", token1, &got); code != 200 || len(got.Accounts) != 2 {
		t.Errorf("two WABAs asked for: %d %s", code, b)
	}
	if code, b := getAs(t, s, "/api/v1/accounts?waba=waba-2", token1, nil); code != http.StatusBadRequest || !strings.Contains(string(b), "unknown parameter") {
		t.Errorf("an unknown parameter: %d %s", code, b)
	}
	if code, _ := getAs(t, s, "/api/v1/accounts", "", nil); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d", code)
	}

	// NATS gone: both routes that read a bucket say so (503), neither
	// answers an empty list.
	srv.Shutdown()
	for _, path := range []string{"/api/v1/accounts", "/api/v1/pacing"} {
		if code, b := getAs(t, s, path, token1, nil); code != http.StatusServiceUnavailable || !strings.Contains(string(b), "NATS did not answer") {
			t.Errorf("%s with NATS gone: %d %s", path, code, b)
		}
	}

	// An API without NATS says so.
	s2, err := api.New(tenantConfig(), nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if code, b := getAs(t, s2, "/api/v1/accounts", token1, nil); code != http.StatusServiceUnavailable || !strings.Contains(string(b), "--nats-url") {
		t.Errorf("without NATS: %d %s", code, b)
	}
}

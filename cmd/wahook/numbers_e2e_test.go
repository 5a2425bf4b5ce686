package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// TestUpgradeBeforeNumberKnown: a THROUGHPUT_UPGRADE posted before any
// message webhook of its number (the normal case after a fresh install)
// was stored without the number's id and never matched again: the tier
// stayed 80 in the signal and in /numbers. Through "wahook serve", it is
// listed as pending until the number's first message webhook, and then
// gives the number tier 1,000 in both.
func TestUpgradeBeforeNumberKnown(t *testing.T) {
	srv := startSignalServe(t)
	ctx := context.Background()
	post := func(body string) { t.Helper(); srv.post(t, body) }
	numbers := func() api.Numbers {
		t.Helper()
		var n api.Numbers
		req, _ := http.NewRequest(http.MethodGet, srv.apiBase+"/api/v1/numbers", nil)
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return n
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&n)
		return n
	}
	until := func(what string, cond func() (bool, string)) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, cond)
	}

	const display, number = "15557810088", "109876543210188"
	now := time.Now().Unix()
	post(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":%d,"changes":[{"field":"phone_number_quality_update","value":{"display_phone_number":%q,"event":"THROUGHPUT_UPGRADE","current_limit":"TIER_UNLIMITED"}}]}]}`, now-5, display))
	until("the upgrade listed as pending in /numbers", func() (bool, string) {
		n := numbers()
		return len(n.Pending) == 1 && n.Pending[0].DisplayPhoneNumber == display && len(n.Numbers) == 0, fmt.Sprintf("%+v", n)
	})

	post(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},"statuses":[{"id":"wamid.HBgLMTU1NTAwMDAwMDEVAgARGBI1","status":"sent","timestamp":"%d","recipient_id":"15550000001"}]}}]}]}`, display, number, now))
	var sig schema.PacingSignal
	until("the signal's tier is 1,000", func() (bool, string) {
		var err error
		sig, err = srv.signal(ctx, number)
		return err == nil && sig.TierMPS == schema.TierUpgradedMPS, fmt.Sprintf("%+v %v", sig, err)
	})
	if sig.TierSource != schema.TierSourceThroughputUpgrade {
		t.Errorf("signal %+v", sig)
	}
	until("/numbers gives the number tier 1,000 and nothing pending", func() (bool, string) {
		n := numbers()
		return len(n.Pending) == 0 && len(n.Numbers) == 1 && n.Numbers[0].PhoneNumberID == number &&
			n.Numbers[0].TierMPS == schema.TierUpgradedMPS && n.Numbers[0].TierSource == api.TierThroughputUpgrade, fmt.Sprintf("%+v", n)
	})
}

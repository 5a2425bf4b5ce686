package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// TestOutboundOneDefinition: through "wahook serve", a number whose
// messages get only delivered statuses (Meta skipped "sent") has a signal
// with its outbound rate (it had none), and messages known only by their
// accepted send results count in /throughput (they never reached
// ClickHouse) as in the signal: both count each message once, at its
// earliest evidence.
func TestOutboundOneDefinition(t *testing.T) {
	srv := startSignalServe(t)
	ctx, apiBase := context.Background(), srv.apiBase

	const display, number = "15557810099", "109876543210199"
	now := time.Now().Add(-5 * time.Second).Truncate(time.Second)
	ts := now.Unix()
	// 12 messages with only a delivered status, 3 of them read too.
	var statuses []string
	for i := 0; i < 12; i++ {
		statuses = append(statuses, fmt.Sprintf(`{"id":"wamid.D%d","status":"delivered","timestamp":"%d","recipient_id":"1555000%04d"}`, i, ts, i))
		if i < 3 {
			statuses = append(statuses, fmt.Sprintf(`{"id":"wamid.D%d","status":"read","timestamp":"%d","recipient_id":"1555000%04d"}`, i, ts, i))
		}
	}
	body := fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},"statuses":[%s]}}]}]}`,
		display, number, strings.Join(statuses, ","))
	srv.post(t, body)
	// 8 messages known only by their accepted send results.
	var results []string
	for i := 0; i < 8; i++ {
		results = append(results, fmt.Sprintf(`{"phone_number_id": %q, "status": "accepted", "message_id": "wamid.A%d", "recipient": "1555100%04d", "timestamp": %q}`,
			number, i, i, now.UTC().Format(time.RFC3339)))
	}
	req, _ := http.NewRequest(http.MethodPost, apiBase+"/api/v1/send-results", strings.NewReader(`{"results": [`+strings.Join(results, ",")+`]}`))
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send results: %d", resp.StatusCode)
	}

	const want = 12 + 8
	var sig schema.PacingSignal
	testutil.Eventually(t, 20*time.Second, "the signal's outbound over the last minute", func() (bool, string) {
		var err error
		sig, err = srv.signal(ctx, number)
		return err == nil && math.Round(sig.Observed.S60*60) == want, fmt.Sprintf("%+v %v", sig.Observed, err)
	})
	var tp api.Throughput
	testutil.Eventually(t, 20*time.Second, "/throughput's outbound", func() (bool, string) {
		q := url.Values{"phone_number_id": {number}, "from": {now.Add(-time.Minute).Format(time.RFC3339)}, "to": {now.Add(time.Minute).Format(time.RFC3339)}, "step": {"1s"}}
		req, _ := http.NewRequest(http.MethodGet, apiBase+"/api/v1/throughput?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		tp = api.Throughput{}
		_ = json.NewDecoder(resp.Body).Decode(&tp)
		return tp.Outbound == want, fmt.Sprintf("%d %+v", resp.StatusCode, tp)
	})
	if len(tp.Points) != 1 || !tp.Points[0].Time.Equal(now) {
		t.Errorf("points %+v, want one at %s", tp.Points, now)
	}
}

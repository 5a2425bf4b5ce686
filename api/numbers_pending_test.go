package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestNumbersPending: a throughput upgrade stored without its phone number
// id (its display number not learned yet) is listed under pending, and
// not as a number; once stage 1 stores it again with the id, the number
// has its upgrade (tier 1,000) and nothing is pending. A token scoped to
// another WABA sees neither.
func TestNumbersPending(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	w := chwriter.New(ch.Conn, ch.Database)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	upgrade := schema.ManagementRow{
		Source:  schema.Source{App: "default", ReceivedAt: at, RawSeq: 1},
		EventID: "0123456789abcdef0123456789abcdef", Kind: schema.KindNumber, Field: "phone_number_quality_update",
		EventTime: at, WabaID: "104281907735512", DisplayPhoneNumber: "15557810001", Event: "THROUGHPUT_UPGRADE",
		NewValue: "TIER_UNLIMITED",
	}
	write := func(r schema.ManagementRow) {
		t.Helper()
		if err := w.Write(ctx, &schema.Rows{Management: []schema.ManagementRow{r}}); err != nil {
			t.Fatal(err)
		}
	}
	write(upgrade)
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	all := func() *api.Numbers {
		t.Helper()
		n, err := store.Numbers(ctx, api.Query{From: at.Add(-time.Hour), To: time.Now()}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := all()
	if len(n.Numbers) != 0 || len(n.Pending) != 1 {
		t.Fatalf("before the number is known: %+v", n)
	}
	p := n.Pending[0]
	if p.DisplayPhoneNumber != "15557810001" || p.WabaID != "104281907735512" || p.Events != 1 || !p.LastChange.Equal(at) ||
		len(p.RecentChanges) != 1 || p.RecentChanges[0].Event != "THROUGHPUT_UPGRADE" {
		t.Errorf("pending %+v", p)
	}
	other, err := store.Numbers(ctx, api.Query{From: at.Add(-time.Hour), To: time.Now(), WabaIDs: []string{"999"}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(other.Pending) != 0 {
		t.Errorf("another WABA sees %+v", other.Pending)
	}

	upgrade.PhoneNumberID = "107655290331184"
	write(upgrade)
	n = all()
	if len(n.Pending) != 0 || len(n.Numbers) != 1 {
		t.Fatalf("after the number is learned: %+v", n)
	}
	if s := n.Numbers[0]; s.PhoneNumberID != "107655290331184" || s.TierMPS != schema.TierUpgradedMPS || s.TierSource != api.TierThroughputUpgrade {
		t.Errorf("number %+v", s)
	}
}

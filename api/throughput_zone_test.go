package api_test

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // the zone's rules in the test binary: it never skips for want of them

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestThroughputServerZone: /throughput counts a message whose status came
// in the last hours of a UTC month on a ClickHouse server whose time zone is
// ahead of UTC, where those hours are in the next month already.
// message_lifecycle files a status under toStartOfMonth of its time in the
// server's zone; the query bounded the months by UTC's calendar, and such a
// message was not counted at all.
func TestThroughputServerZone(t *testing.T) {
	ctx := context.Background()
	const zone = "Asia/Tokyo" // UTC+9 all year
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	ch := schematest.StartClickHouseInZone(t, zone).Database(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	// The start of a month in Tokyo, 15:00 UTC on the last day of the month
	// before, and a status five hours on: still that month in UTC.
	ago := time.Now().Add(-48 * time.Hour).In(loc)
	monthTokyo := time.Date(ago.Year(), ago.Month(), 1, 0, 0, 0, 0, loc)
	at := monthTokyo.Add(5 * time.Hour).UTC()
	if at.Month() == monthTokyo.Month() {
		t.Fatalf("the status at %s is in the Tokyo month of %s in UTC too: the test shows nothing", at, monthTokyo)
	}
	const number = "107655290331184"
	src := schema.Source{App: "default", ReceivedAt: at, RawSeq: 1}
	rows := schema.Rows{Statuses: []schema.StatusRow{{Source: src, EventID: "s1", EventTime: at,
		PhoneNumberID: number, MessageID: "wamid.month-end", Status: "sent", RecipientHash: "r"}}}
	if err := chwriter.New(ch.Conn, ch.Database).Write(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	for _, span := range []time.Duration{time.Hour, 7 * time.Hour} { // narrowed and not
		from := at.Add(-span + 30*time.Minute)
		tp, err := store.Throughput(ctx, api.Query{From: from, To: from.Add(span), Step: "1m", PhoneNumberIDs: []string{number}})
		if err != nil {
			t.Fatal(err)
		}
		if tp.Outbound != 1 {
			t.Errorf("range %s to %s on a server in %s: outbound %d, want the message sent at %s", from, from.Add(span), zone, tp.Outbound, at)
		}
	}
}

package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestThroughputEarliestEvidence: /throughput counts an outbound message
// once, at its earliest evidence, as the pacing signal does: an accepted
// send result (stored in send_results, which reached no report before) or
// any status of it, failed included. A message with only delivered and
// read statuses counts at its delivered; one known only by its send
// result counts; a send result before its sent status moves the message
// to the send result's second; one without a message id counts by itself;
// a failed send result is no message; and a message whose earliest
// evidence is before the range is not in it, although a status of it is.
func TestThroughputEarliestEvidence(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	const number = "107655290331184"
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	src := schema.Source{App: "default", ReceivedAt: base, RawSeq: 1}
	var rows schema.Rows
	n := 0
	status := func(msg, st string, s int) {
		n++
		rows.Statuses = append(rows.Statuses, schema.StatusRow{Source: src, EventID: fmt.Sprint("s", n), EventTime: at(s),
			PhoneNumberID: number, MessageID: msg, Status: st, RecipientHash: "r"})
	}
	result := func(msg, st string, s int) {
		n++
		rows.SendResults = append(rows.SendResults, schema.SendResultRow{Source: src, EventID: fmt.Sprint("r", n), EventTime: at(s),
			PhoneNumberID: number, MessageID: msg, Status: st, RecipientHash: "r"})
	}
	status("wamid.only-delivered", "delivered", 10)
	status("wamid.only-delivered", "read", 40)
	result("wamid.only-accepted", schema.SendAccepted, 11)
	result("wamid.accepted-first", schema.SendAccepted, 12)
	status("wamid.accepted-first", "sent", 14)
	status("wamid.accepted-first", "delivered", 15)
	status("wamid.only-failed", "failed", 13)
	result("", schema.SendAccepted, 16) // no message id
	result("wamid.refused", schema.SendFailed, 17)
	result("wamid.before-range", schema.SendAccepted, -30)
	status("wamid.before-range", "delivered", 20)
	if err := chwriter.New(ch.Conn, ch.Database).Write(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	want := map[time.Time]uint64{at(10): 1, at(11): 1, at(12): 1, at(13): 1, at(16): 1}
	for _, span := range []time.Duration{time.Minute, 7 * time.Hour} { // narrowed and not
		tp, err := store.Throughput(ctx, api.Query{From: base, To: base.Add(span), Step: "1s", PhoneNumberIDs: []string{number}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[time.Time]uint64{}
		for _, p := range tp.Points {
			got[p.Time] = p.Outbound
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || tp.Outbound != 5 {
			t.Errorf("range %s: outbound %d by second %v, want 5: %v", span, tp.Outbound, got, want)
		}
	}
}

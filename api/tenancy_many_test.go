package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// A tenant of many numbers gets its reports: its numbers go to ClickHouse
// as a table sent with the query, not written into the query's text, where
// 20,000 of them passed ClickHouse's max_query_size (262,144 bytes). The
// rows without a WABA (send results) of its numbers are its, another's
// are not.
func TestTenantOfManyNumbers(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	const many = 20000
	at := t0.Add(10 * time.Minute)
	src := schema.Source{App: "default", ReceivedAt: at}
	var rows schema.Rows
	for i := range many {
		rows.Statuses = append(rows.Statuses, schema.StatusRow{Source: src, EventID: fmt.Sprintf("st-%d", i), EventTime: at,
			WabaID: "waba-big", PhoneNumberID: fmt.Sprintf("1%014d", i), MessageID: fmt.Sprintf("wamid.big-%d", i), Status: "sent"})
	}
	// A send result's failure of one of the tenant's numbers, and one of
	// a number of another WABA: neither row names a WABA.
	mine, theirs := fmt.Sprintf("1%014d", many-1), "299999999999999"
	rows.Statuses = append(rows.Statuses, schema.StatusRow{Source: src, EventID: "st-theirs", EventTime: at,
		WabaID: "waba-other", PhoneNumberID: theirs, MessageID: "wamid.theirs", Status: "sent"})
	for i, n := range []string{mine, theirs} {
		rows.Errors = append(rows.Errors, schema.ErrorRow{Source: src, EventID: fmt.Sprintf("sr-%d", i), Origin: "send_result",
			EventTime: at, PhoneNumberID: n, MessageID: fmt.Sprintf("wamid.sr-%d", i), Code: 131048 + int32(i)})
	}
	if err := chwriter.New(ch.Conn, ch.Database).Write(ctx, &rows); err != nil {
		t.Fatal(err)
	}

	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1, "big:" + tokenA + ":waba=waba-big"}
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var f api.Failures
	if code, b := getAs(t, s, "/api/v1/failures?"+rangeParams("group_by=number,code"), tokenA, &f); code != http.StatusOK {
		t.Fatalf("failures: %d %s", code, b)
	}
	if len(f.Rows) != 1 || f.Rows[0].Failures != 1 || f.Rows[0].PhoneNumberID == nil || *f.Rows[0].PhoneNumberID != mine ||
		f.Rows[0].Code == nil || *f.Rows[0].Code != 131048 {
		t.Errorf("the tenant's failures: %+v, want its number's send result alone", f.Rows)
	}
	for _, path := range []string{
		"/api/v1/funnel?" + rangeParams("by=number"),
		"/api/v1/funnel?" + rangeParams("by=total"),
		"/api/v1/numbers?" + rangeParams(""),
	} {
		if code, b := getAs(t, s, path, tokenA, nil); code != http.StatusOK {
			t.Errorf("%s: %d %.300s", path, code, b)
		}
	}
	var nums api.Numbers
	if code, b := getAs(t, s, "/api/v1/numbers?"+rangeParams(""), tokenA, &nums); code != http.StatusOK || len(nums.Numbers) != many {
		t.Errorf("numbers: %d, %d numbers, want %d: %.300s", code, len(nums.Numbers), many, b)
	}
}

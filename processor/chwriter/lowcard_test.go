package chwriter

import (
	"cmp"
	"context"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestWriteLowCardinality runs the schema as current releases get it, with
// LowCardinality(String) columns, which 18.16 has behind a setting, and
// checks that the per-row path for them writes every value.
func TestWriteLowCardinality(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	opts, err := clickhouse.ParseDSN(ch.DSN)
	if err != nil {
		t.Fatal(err)
	}
	opts.Settings = clickhouse.Settings{"allow_experimental_low_cardinality_type": 1}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	res, err := migrations.Apply(ctx, conn, ch.Database, migrations.WithFeatures(migrations.Features{LowCardinality: true}))
	if err != nil {
		t.Fatal(err)
	}
	if res.ServerVersion.AtLeast(19, 3) {
		t.Logf("server %v has LowCardinality without the setting", res.ServerVersion)
	}
	var typ string
	if err := conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = 'status_events' AND name = 'status'",
		ch.Database).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "LowCardinality(String)" {
		t.Fatalf("status_events.status is %s, want LowCardinality(String)", typ)
	}

	w := New(conn, ch.Database)
	rows := fixture()
	if err := w.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	checkRows(t, "status_events", readStatuses(t, ch),
		sorted(rows.Statuses, func(a, b schema.StatusRow) int { return cmp.Compare(a.EventID, b.EventID) }))
	checkRows(t, "errors", readErrors(t, ch), sorted(rows.Errors, func(a, b schema.ErrorRow) int {
		return cmp.Or(cmp.Compare(a.EventID, b.EventID), cmp.Compare(a.Index, b.Index))
	}))
	checkRows(t, "management_events", readManagement(t, ch),
		sorted(rows.Management, func(a, b schema.ManagementRow) int { return cmp.Compare(a.EventID, b.EventID) }))
	if got, want := answer(t, ch, readmeQueries(t, ch.Database)["funnel"]), fixtureAnswers["funnel"]; len(got) != len(want) || got[0] != want[0] {
		t.Errorf("funnel:\n got %q\nwant %q", got, want)
	}
}

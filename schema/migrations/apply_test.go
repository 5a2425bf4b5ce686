package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

func TestApplyFreshDatabase(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	db := ch.Database + "_wahook" // absent: Apply creates it
	t.Cleanup(func() { _ = ch.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })

	res, err := migrations.Apply(ctx, ch.Conn, db)
	if err != nil {
		t.Fatal(err)
	}
	all, err := migrations.Load(migrations.Files())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != len(all) || len(res.Skipped) != 0 {
		t.Errorf("Applied = %v, Skipped = %v, want all %d applied", res.Applied, res.Skipped, len(all))
	}
	if res.ServerVersion.Major == 0 {
		t.Errorf("ServerVersion = %v, want the server's", res.ServerVersion)
	}
	t.Logf("server %v, features {%v}", res.ServerVersion, res.Features)
	for _, table := range []string{"schema_migrations", "dead_letters", "status_events", "errors", "inbound_messages",
		"management_events", "failures_by_minute", "message_lifecycle", "status_counts_by_minute"} {
		if !tableExists(t, ch, db, table) {
			t.Errorf("table %s.%s missing after Apply", db, table)
		}
	}
	if got := logRows(t, ch, db); got != uint64(len(all)) {
		t.Errorf("schema_migrations has %d rows, want %d", got, len(all))
	}
}

func TestApplyTwiceIsNoOp(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	first, err := migrations.Apply(ctx, ch.Conn, ch.Database)
	if err != nil {
		t.Fatal(err)
	}
	second, err := migrations.Apply(ctx, ch.Conn, ch.Database)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 {
		t.Errorf("second Apply applied %v, want nothing", second.Applied)
	}
	if !slices.Equal(second.Skipped, first.Applied) {
		t.Errorf("second Apply skipped %v, want %v", second.Skipped, first.Applied)
	}
	if got := logRows(t, ch, ch.Database); got != uint64(len(first.Applied)) {
		t.Errorf("schema_migrations has %d rows after two runs, want %d", got, len(first.Applied))
	}
}

func TestApplyConcurrently(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	db := ch.Database + "_race" // absent, so that CREATE DATABASE races too
	t.Cleanup(func() { _ = ch.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })

	// Each runner has a connection of its own, as separate processes would.
	const rounds, runners = 3, 4
	conns := make([]driver.Conn, runners)
	for i := range conns {
		opts, err := clickhouse.ParseDSN(ch.DSN)
		if err != nil {
			t.Fatal(err)
		}
		if conns[i], err = clickhouse.Open(opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[i].Close() })
	}
	// The runners share a lock, as processes share cmd/wahook's lease: a
	// later file (0012) renames what an earlier one creates.
	sem := make(chan struct{}, 1)
	var calls, releases atomic.Int32
	lock := func(ctx context.Context) (context.Context, func(), error) {
		calls.Add(1)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return ctx, func() { releases.Add(1); <-sem }, nil
	}
	// Several rounds, each on a new database, to give the race a real chance.
	for r := 0; r < rounds; r++ {
		name := fmt.Sprintf("%s%d", db, r)
		t.Cleanup(func() { _ = ch.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
		var wg sync.WaitGroup
		errs := make([]error, runners)
		start := make(chan struct{})
		for i := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = migrations.Apply(ctx, conns[i], name, migrations.WithLock(lock))
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, runner %d: %v", r, i, err)
			}
		}
		// Whatever the interleaving, a further Apply finds nothing to do.
		res, err := migrations.Apply(ctx, ch.Conn, name)
		if err != nil {
			t.Fatalf("round %d: Apply after the race: %v", r, err)
		}
		if len(res.Applied) != 0 {
			t.Errorf("round %d: Apply after the race applied %v", r, res.Applied)
		}
		if !tableExists(t, ch, name, "dead_letters") {
			t.Errorf("round %d: dead_letters missing", r)
		}
		var engines string
		if err := ch.Conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(concat(name, ':', engine)), ' ') FROM (SELECT name, engine FROM system.tables WHERE database = ? AND name LIKE 'message_lifecycle%' ORDER BY name)", name).Scan(&engines); err != nil {
			t.Fatal(err)
		}
		if want := "message_lifecycle:Merge message_lifecycle_0007:AggregatingMergeTree"; engines != want {
			t.Errorf("round %d: %s, want %s", r, engines, want)
		}
	}
	if calls.Load() != rounds*runners || releases.Load() != calls.Load() {
		t.Errorf("lock taken %d times and released %d times, want %d each", calls.Load(), releases.Load(), rounds*runners)
	}
}

// TestApplyAddColumnTwice: 18.16 has no ADD COLUMN IF NOT EXISTS, so a
// plain ADD COLUMN (as in 0009_inbound_content.sql) that finds its column
// made already, by another process applying it at once or by one that
// stopped before recording it, counts as done; any other failure of an
// ALTER still fails the migration.
func TestApplyAddColumnTwice(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	create := "CREATE TABLE IF NOT EXISTS {{.Database}}.things (n UInt8) ENGINE = MergeTree ORDER BY n;\n"
	add := "ALTER TABLE {{.Database}}.things ADD COLUMN note String DEFAULT '';\n"
	v1 := fstest.MapFS{"0001_things.sql": {Data: []byte(create)}, "0002_note.sql": {Data: []byte(add)}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v1)); err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{"0001_things.sql": {Data: []byte(create)}, "0002_note.sql": {Data: []byte(add)},
		"0003_note_again.sql": {Data: []byte(add)}}
	res, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v2))
	if err != nil {
		t.Fatalf("ADD COLUMN of a column that exists: %v, want it taken as done", err)
	}
	if !slices.Equal(res.Applied, []string{"0003_note_again"}) {
		t.Errorf("Applied = %v, want [0003_note_again]", res.Applied)
	}
	v3 := fstest.MapFS{"0001_things.sql": {Data: []byte(create)}, "0002_note.sql": {Data: []byte(add)},
		"0003_note_again.sql": {Data: []byte(add)},
		"0004_bad.sql":        {Data: []byte("ALTER TABLE {{.Database}}.things ADD COLUMN other NoSuchType;\n")}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v3)); err == nil {
		t.Error("ADD COLUMN of an unknown type succeeded")
	}
}

func TestApplyRefusesChangedChecksum(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	v1 := fstest.MapFS{
		"0001_things.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS {{.Database}}.things (n UInt8) ENGINE = MergeTree ORDER BY n;\n")},
	}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v1)); err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{
		"0001_things.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS {{.Database}}.things (n UInt16) ENGINE = MergeTree ORDER BY n;\n")},
		"0002_more.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS {{.Database}}.more (n UInt8) ENGINE = MergeTree ORDER BY n;\n")},
	}
	res, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v2))
	if !errors.Is(err, migrations.ErrChecksumChanged) {
		t.Fatalf("Apply with an edited migration: %v, want ErrChecksumChanged", err)
	}
	t.Logf("error: %v", err)
	if res != nil {
		t.Errorf("Apply returned a result %+v with the error", res)
	}
	if tableExists(t, ch, ch.Database, "more") {
		t.Error("Apply went on to the next migration after refusing an edited one")
	}
}

func TestApplyRendersForConfiguredFeatures(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	files := fstest.MapFS{
		"0001_x.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS {{.Database}}.x (s {{.LowCardinalityString}}, at {{.Timestamp 3}})\n" +
			"ENGINE = MergeTree ORDER BY at {{.Retention \"at\"}};\n" +
			"-- a second statement in the same file;\n" +
			"CREATE TABLE IF NOT EXISTS {{.Database}}.y AS {{.Database}}.x;\n")},
	}
	res, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(files),
		migrations.WithFeatures(migrations.Features{}), migrations.WithRetentionDays(30))
	if err != nil {
		t.Fatal(err)
	}
	if res.Features != (migrations.Features{}) {
		t.Errorf("Features = {%v}, want none", res.Features)
	}
	for _, table := range []string{"x", "y"} {
		if !tableExists(t, ch, ch.Database, table) {
			t.Errorf("table %s missing", table)
		}
	}
}

func TestApplyRejectsBadDatabase(t *testing.T) {
	ch := schematest.ClickHouse(t)
	_, err := migrations.Apply(context.Background(), ch.Conn, "wa-hook; DROP")
	if !errors.Is(err, migrations.ErrBadDatabase) {
		t.Errorf("Apply: %v, want ErrBadDatabase", err)
	}
}

type deadLetter struct {
	receivedAt time.Time
	app        string
	rawMsgID   string
	rawSeq     uint64
	reason     string
	error      string
	body       string
}

func TestDeadLettersInsertAndRead(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	rows := []deadLetter{
		{at, "default", "h1", 7, "malformed_json", "unexpected end of JSON input", `{"object":`},
		{at.Add(time.Second), "shop", "h2", 8, "unknown_object", `object "page" not handled`, `{"object":"page"}`},
		// The same body dead-lettered again (a redelivery): same received_at and hash.
		{at, "default", "h1", 7, "malformed_json", "unexpected end of JSON input (again)", `{"object":`},
	}
	batch, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+ch.Database+
		".dead_letters (received_at, app, raw_msg_id, raw_seq, reason, error, body)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := batch.Append(r.receivedAt, r.app, r.rawMsgID, r.rawSeq, r.reason, r.error, r.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	// FINAL collapses rows with the same sorting key at read time.
	got := readDeadLetters(t, ch, "SELECT received_at, app, raw_msg_id, raw_seq, reason, error, body FROM "+
		ch.Database+".dead_letters FINAL ORDER BY received_at, raw_msg_id")
	want := []deadLetter{rows[2], rows[1]} // the last inserted copy of h1 wins
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].receivedAt.Equal(want[i].receivedAt) {
			t.Errorf("row %d: received_at %v, want %v", i, got[i].receivedAt, want[i].receivedAt)
		}
		got[i].receivedAt = want[i].receivedAt
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func readDeadLetters(t *testing.T, ch *schematest.ClickHouseDB, query string) []deadLetter {
	t.Helper()
	rows, err := ch.Conn.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []deadLetter
	for rows.Next() {
		var d deadLetter
		if err := rows.Scan(&d.receivedAt, &d.app, &d.rawMsgID, &d.rawSeq, &d.reason, &d.error, &d.body); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func tableExists(t *testing.T, ch *schematest.ClickHouseDB, db, table string) bool {
	t.Helper()
	var n uint64
	err := ch.Conn.QueryRow(context.Background(),
		"SELECT count() FROM system.tables WHERE database = ? AND name = ?", db, table).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func logRows(t *testing.T, ch *schematest.ClickHouseDB, db string) uint64 {
	t.Helper()
	var n uint64
	if err := ch.Conn.QueryRow(context.Background(), "SELECT count() FROM "+db+".schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestApplyRenameTwice: a RENAME run again after a crash (its source gone,
// its target there) counts as done, as its target exists; a rename of a table
// that never existed still fails.
func TestApplyRenameTwice(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	create := "CREATE TABLE IF NOT EXISTS {{.Database}}.before (n UInt8) ENGINE = MergeTree ORDER BY n;\n"
	rename := "RENAME TABLE {{.Database}}.before TO {{.Database}}.after;\n"
	v1 := fstest.MapFS{"0001_before.sql": {Data: []byte(create)}, "0002_rename.sql": {Data: []byte(rename)}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v1)); err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{"0001_before.sql": {Data: []byte(create)}, "0002_rename.sql": {Data: []byte(rename)},
		"0003_rename_again.sql": {Data: []byte(rename)}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v2)); err != nil {
		t.Fatalf("a rename already made: %v, want it taken as done", err)
	}
	if !tableExists(t, ch, ch.Database, "after") || tableExists(t, ch, ch.Database, "before") {
		t.Error("the rename did not stay made")
	}
	v3 := fstest.MapFS{"0001_before.sql": {Data: []byte(create)}, "0002_rename.sql": {Data: []byte(rename)},
		"0003_rename_again.sql": {Data: []byte(rename)},
		"0004_nothing.sql":      {Data: []byte("RENAME TABLE {{.Database}}.never TO {{.Database}}.nowhere;\n")}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(v3)); err == nil {
		t.Error("a rename of a table that never existed succeeded")
	}
}

// TestApplyStopsWhenTheLockIsLost: Apply runs its statements under the
// context its lock gives, so a lock lost (that context ended) stops it
// before it changes anything more, and it records nothing.
func TestApplyStopsWhenTheLockIsLost(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	released := false
	lost := func(ctx context.Context) (context.Context, func(), error) {
		held, cancel := context.WithCancel(ctx)
		cancel() // lost at once
		return held, func() { released = true }, nil
	}
	files := fstest.MapFS{"0001_things.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS {{.Database}}.things (n UInt8) ENGINE = MergeTree ORDER BY n;\n")}}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(files), migrations.WithLock(lost)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with its lock lost: %v, want context.Canceled", err)
	}
	if !released {
		t.Error("the lock was not released")
	}
	if tableExists(t, ch, ch.Database, "things") {
		t.Error("a table made after the lock was lost")
	}
}

package chwriter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

func TestWriteReadsBackEveryColumn(t *testing.T) {
	w, ch := newWriter(t)
	rows := fixture()
	if err := w.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	checkRows(t, "status_events", readStatuses(t, ch),
		sorted(rows.Statuses, func(a, b schema.StatusRow) int { return cmp.Compare(a.EventID, b.EventID) }))
	checkRows(t, "errors", readErrors(t, ch), sorted(rows.Errors, func(a, b schema.ErrorRow) int {
		return cmp.Or(cmp.Compare(a.EventID, b.EventID), cmp.Compare(a.Index, b.Index))
	}))
	checkRows(t, "inbound_messages", readInbound(t, ch),
		sorted(rows.Inbound, func(a, b schema.InboundRow) int { return cmp.Compare(a.EventID, b.EventID) }))
	checkRows(t, "management_events", readManagement(t, ch),
		sorted(rows.Management, func(a, b schema.ManagementRow) int { return cmp.Compare(a.EventID, b.EventID) }))
	checkRows(t, "dead_letters", readDeadLetters(t, ch), sorted(rows.DeadLetters, func(a, b schema.DeadLetter) int {
		return cmp.Or(a.ReceivedAt.Compare(b.ReceivedAt), cmp.Compare(a.RawMsgID, b.RawMsgID), cmp.Compare(a.Item, b.Item))
	}))
}

func TestWriteEmptyIsNoOp(t *testing.T) {
	// No server: an empty Write must not touch the connection.
	w := New(nil, "wahook")
	for _, rows := range []*schema.Rows{nil, {}, {Statuses: []schema.StatusRow{}}} {
		if err := w.Write(context.Background(), rows); err != nil {
			t.Errorf("Write(%+v) = %v, want nil", rows, err)
		}
	}
}

func TestWriteKeepsNoRows(t *testing.T) {
	w, _ := newWriter(t)
	rows := fixture()
	if err := w.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	// The pooled scratch must not hold the strings just written. The pool
	// may drop it (a GC between Put and Get): then write again.
	var s *scratch
	for try := 0; try < 10 && (s == nil || cap(s.strs) == 0); try++ {
		if err := w.Write(context.Background(), rows); err != nil {
			t.Fatal(err)
		}
		s = w.scratch.Get().(*scratch)
	}
	if cap(s.strs) == 0 {
		t.Fatal("got no used scratch from the pool after 10 writes")
	}
	for i, v := range s.strs[:cap(s.strs)] {
		if v != "" {
			t.Fatalf("scratch.strs[%d] = %q after Write, want it cleared", i, v)
		}
	}
	for i, v := range s.times[:cap(s.times)] {
		if !v.IsZero() {
			t.Fatalf("scratch.times[%d] = %v after Write, want it cleared", i, v)
		}
	}
}

func TestWriteLargeBatchInBlocks(t *testing.T) {
	const n, block = 25_000, 10_000 // three blocks of one INSERT
	w, ch := newWriter(t, WithBlockRows(block))
	rows := &schema.Rows{Statuses: make([]schema.StatusRow, n)}
	for i := range rows.Statuses {
		rows.Statuses[i] = status(fmt.Sprintf("wamid.%d", i), "r", "", "sent", base.Add(time.Duration(i)*time.Millisecond))
	}
	// With merges stopped, the parts show what the INSERT made.
	if err := ch.Conn.Exec(context.Background(), "SYSTEM STOP MERGES "+ch.Database+".status_events"); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	var count, ids, lifecycles, parts uint64
	if err := ch.Conn.QueryRow(context.Background(), "SELECT count() FROM system.parts "+
		"WHERE database = ? AND table = 'status_events' AND active", ch.Database).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	// The server squashes the blocks of one INSERT (min_insert_block_size_rows),
	// so small blocks cost no extra parts.
	if parts != 1 {
		t.Errorf("status_events has %d parts after one INSERT of %d blocks, want 1", parts, (n+block-1)/block)
	}
	if err := ch.Conn.QueryRow(context.Background(),
		"SELECT count(), uniqExact(event_id) FROM status_events").Scan(&count, &ids); err != nil {
		t.Fatal(err)
	}
	if count != n || ids != n {
		t.Errorf("got %d rows with %d ids, want %d", count, ids, n)
	}
	if err := ch.Conn.QueryRow(context.Background(),
		"SELECT uniqExact(message_id) FROM message_lifecycle").Scan(&lifecycles); err != nil {
		t.Fatal(err)
	}
	if lifecycles != n {
		t.Errorf("message_lifecycle has %d messages, want %d", lifecycles, n)
	}
}

func TestColumnsMatchTables(t *testing.T) {
	_, ch := newWriter(t)
	for _, tc := range []struct {
		table string
		cols  []string
	}{
		{statusEvents.name, names(statusEvents.cols)},
		{errorEvents.name, names(errorEvents.cols)},
		{inboundMessages.name, names(inboundMessages.cols)},
		{managementEvents.name, names(managementEvents.cols)},
		{sendResults.name, names(sendResults.cols)},
		{deadLetters.name, names(deadLetters.cols)},
	} {
		rows, err := ch.Conn.Query(context.Background(),
			"SELECT name FROM system.columns WHERE database = ? AND table = ? ORDER BY name", ch.Database, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			got = append(got, name)
		}
		rows.Close()
		want := slices.Sorted(slices.Values(tc.cols))
		if !slices.Equal(got, want) {
			t.Errorf("%s: table has columns %v, writer writes %v", tc.table, got, want)
		}
	}
}

func names[T any](cols []column[T]) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return out
}

func TestNewRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name     string
		database string
		opts     []Option
		want     string
	}{
		{"database with a dash", "wa-hook", nil, "bad database name"},
		{"empty database", "", nil, "bad database name"},
		{"injection", "x; DROP TABLE y", nil, "bad database name"},
		{"zero block rows", "wahook", []Option{WithBlockRows(0)}, "block rows must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(nil, tt.database, tt.opts...)
			for call, err := range map[string]error{
				"Write": w.Write(context.Background(), fixture()),
				"Ping":  w.Ping(context.Background()),
			} {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: got %v, want an error with %q", call, err, tt.want)
				}
			}
		})
	}
	if err := New(nil, "x-y").Ping(context.Background()); !errors.Is(err, ErrBadDatabase) {
		t.Errorf("got %v, want ErrBadDatabase", err)
	}
}

func TestPing(t *testing.T) {
	w, _ := newWriter(t)
	if err := w.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestPingAndWriteFailWhenServerDown(t *testing.T) {
	srv := schematest.StartClickHouse(t)
	db := srv.Database(t)
	w := New(db.Conn, db.Database) // no tables: the insert itself fails
	if err := w.Write(context.Background(), fixture()); err == nil || !strings.Contains(err.Error(), "status_events") {
		t.Errorf("Write without tables: got %v, want an error naming status_events", err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Ping(ctx); err == nil {
		t.Error("Ping with the server stopped: got nil, want an error")
	}
	if err := w.Write(ctx, fixture()); err == nil {
		t.Error("Write with the server stopped: got nil, want an error")
	}
}

// TestUnavailable: the exceptions that say the server cannot take writes
// now are outages; a refusal of the insert itself (here a real server's,
// for a database that does not exist) is not.
func TestUnavailable(t *testing.T) {
	db := schematest.ClickHouse(t)
	_, err := db.Conn.PrepareBatch(context.Background(), "INSERT INTO wahook_no_such_database.t (a)")
	var ex *clickhouse.Exception
	if !errors.As(fmt.Errorf("prepare: %w", err), &ex) || Unavailable(err) {
		t.Errorf("an insert into a missing database: %v (%T), Unavailable %v; want a server exception, not unavailable", err, err, Unavailable(err))
	}
	for code, name := range unavailableCodes {
		err := fmt.Errorf("chwriter: insert 3 rows into status_events: prepare: %w", &clickhouse.Exception{Code: code, Name: "DB::Exception", Message: name})
		if !Unavailable(err) {
			t.Errorf("%d %s: not unavailable", code, name)
		}
	}
	// A full disk on 18.16: the insert's part not written (its answer with
	// the server's data on a full file system, 2026-12-07), or a file not
	// even created.
	for _, full := range []*clickhouse.Exception{
		{Code: 75, Name: "DB::Exception", Message: "Cannot write to file /var/lib/clickhouse/data/wahook/status_events/" +
			"tmp_insert_202612_1_1_0/primary.idx, errno: 28, strerror: No space left on device"},
		{Code: 76, Name: "DB::Exception", Message: "Cannot open file /var/lib/clickhouse/data/wahook/status_events/" +
			"tmp_insert_202612_1_1_0/checksums.txt, errno: 28, strerror: No space left on device"},
	} {
		if !Unavailable(fmt.Errorf("chwriter: insert 3 rows into status_events: send: %w", full)) {
			t.Errorf("an insert whose part could not be written for want of disk space (%d) is not unavailable", full.Code)
		}
	}
	// TOO_MANY_PARTS also refuses one insert block's rows spread over more
	// months than max_partitions_per_insert_block: the rows' own failure.
	rows := &clickhouse.Exception{Code: 252, Name: "DB::Exception", Message: "Too many partitions for single INSERT block (more than 100). " +
		"The limit is controlled by 'max_partitions_per_insert_block' setting."}
	if Unavailable(fmt.Errorf("chwriter: insert 3 rows into status_events: send: %w", rows)) {
		t.Error("an insert block over max_partitions_per_insert_block is unavailable; want the rows' own failure")
	}
	// The server's answer to an insert over a memory limit: the user's
	// (all the server's queries, as "(total)" is) is the server's state,
	// the query's own is the batch's size.
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+db.Database+".mem (a String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		setting     string
		unavailable bool
	}{{"max_memory_usage_for_user", true}, {"max_memory_usage", false}} {
		err := db.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{c.setting: 1})),
			"INSERT INTO "+db.Database+".mem SELECT toString(number) FROM system.numbers LIMIT 100000")
		if !errors.As(err, &ex) || ex.Code != 241 || Unavailable(err) != c.unavailable {
			t.Errorf("an insert over %s: %v, Unavailable %v; want code 241, unavailable %v", c.setting, err, Unavailable(err), c.unavailable)
		}
	}
	// Later servers word it otherwise.
	for msg, unavailable := range map[string]bool{
		"Query memory limit exceeded: would use 9.54 GiB (attempt to allocate chunk of 4194304 bytes), maximum: 9.31 GiB": false,
		"(total) memory limit exceeded: would use 30.00 GiB, maximum: 28.00 GiB":                                          true,
		"User memory limit exceeded: would use 10.00 GiB, maximum: 10.00 GiB":                                             true,
	} {
		if got := Unavailable(&clickhouse.Exception{Code: 241, Name: "DB::Exception", Message: msg}); got != unavailable {
			t.Errorf("241 %q: unavailable %v, want %v", msg, got, unavailable)
		}
	}
	if Unavailable(errors.New("code: 242, message: Table is in readonly mode")) || Unavailable(nil) {
		t.Error("an error that is no exception is not unavailable")
	}
}

package schematest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestClickHouseFreshDatabases(t *testing.T) {
	a := ClickHouse(t)
	b := ClickHouse(t)
	if a.Database == b.Database {
		t.Fatalf("two calls gave the same database %q", a.Database)
	}
	if want := "clickhouse://" + a.Addr + "/" + a.Database; a.DSN != want {
		t.Errorf("DSN = %q, want %q", a.DSN, want)
	}
	ctx := context.Background()
	var db string
	if err := a.Conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if db != a.Database {
		t.Errorf("currentDatabase() = %q, want %q", db, a.Database)
	}
	var n uint64
	if err := a.Conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ?", a.Database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("fresh database has %d tables, want 0", n)
	}
}

func TestClickHouseDatabaseDroppedAtEnd(t *testing.T) {
	var name string
	var addr string
	t.Run("inner", func(t *testing.T) {
		db := ClickHouse(t)
		name, addr = db.Database, db.Addr
	})
	conn, err := chOpen(addr, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestStartClickHouseStopStart(t *testing.T) {
	srv := StartClickHouse(t)
	db := srv.Database(t)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE kept (n UInt64) ENGINE = MergeTree ORDER BY n"); err != nil {
		t.Fatal(err)
	}
	// On 18.16, Exec of INSERT ... VALUES hangs until the read timeout (the
	// server waits for data blocks): insert with a batch and named columns.
	batch, err := db.Conn.PrepareBatch(ctx, "INSERT INTO kept (n)")
	if err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 3; n++ {
		if err := batch.Append(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()

	start := time.Now()
	srv.Stop()
	t.Logf("graceful stop took %v", time.Since(start).Round(time.Millisecond))
	if srv.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if err := db.Conn.Ping(ctx); err == nil {
		t.Fatal("ping succeeded while the server is stopped")
	}
	srv.Start()
	if srv.Addr() != addr {
		t.Fatalf("address changed across restart: %s, then %s", addr, srv.Addr())
	}
	countRows(t, db, 3)

	srv.Kill()
	srv.Start()
	countRows(t, db, 3)
}

func countRows(t *testing.T, db *ClickHouseDB, want uint64) {
	t.Helper()
	var n uint64
	// The pool may still hold a connection to the old process: retry once.
	var err error
	for i := 0; i < 3; i++ {
		if err = db.Conn.QueryRow(context.Background(), "SELECT count() FROM kept").Scan(&n); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("count() = %d, want %d", n, want)
	}
}

func TestChDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	for _, name := range []string{"TestX", "TestX/sub-test#01", strings.Repeat("Long", 40), "Ünïcode/ß"} {
		got := chDatabaseName(name)
		if !valid.MatchString(got) {
			t.Errorf("chDatabaseName(%q) = %q, not a plain identifier", name, got)
		}
		if len(got) > 60 {
			t.Errorf("chDatabaseName(%q) = %q, longer than 60", name, got)
		}
		if got == chDatabaseName(name) {
			t.Errorf("chDatabaseName(%q) gave %q twice", name, got)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of stopping.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestMissingBinarySkipsOrFailsInCI(t *testing.T) {
	servers, multis := chServerNames, chMultiNames
	chServerNames, chMultiNames = []string{"/nonexistent/clickhouse-server"}, nil
	t.Cleanup(func() { chServerNames, chMultiNames = servers, multis })

	t.Setenv("CI", "")
	r := &recorder{TB: t}
	clickHouseBinary(r)
	if r.skipped == "" || r.failed != "" {
		t.Errorf("without CI: skipped %q, failed %q; want a skip", r.skipped, r.failed)
	}
	if !strings.Contains(r.skipped, "scripts/clickhouse.sh install") {
		t.Errorf("skip message %q does not name the install command", r.skipped)
	}

	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	clickHouseBinary(r)
	if r.failed == "" || r.skipped != "" {
		t.Errorf("with CI=true: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}

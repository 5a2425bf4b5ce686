package migrations

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var (
	debian = mustFeatures("18.16.1")   // Debian bookworm's package
	recent = mustFeatures("24.8.4.13") // a current LTS release
)

func mustFeatures(v string) Features {
	version, err := ParseVersion(v)
	if err != nil {
		panic(err)
	}
	return FeaturesFor(version)
}

func deadLetters(t *testing.T) Migration {
	t.Helper()
	all, err := Load(Files())
	if err != nil {
		t.Fatal(err)
	}
	return all[0]
}

func TestRenderDeadLetters1816(t *testing.T) {
	stmts, err := deadLetters(t).Statements(Data{Database: "wahook", Features: debian, RetentionDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 1 {
		t.Fatalf("got %d statements, want 1: %q", len(stmts), stmts)
	}
	sql := stmts[0]
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS wahook.dead_letters",
		"app         String,",
		"reason      String,",
		"ENGINE = ReplacingMergeTree",
		"ORDER BY (received_at, raw_msg_id, item)",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("18.16 rendering lacks %q:\n%s", want, sql)
		}
	}
	for _, not := range []string{"LowCardinality", "TTL", "DateTime64", "{{", ";"} {
		if strings.Contains(sql, not) {
			t.Errorf("18.16 rendering contains %q:\n%s", not, sql)
		}
	}
}

func TestRenderDeadLetters24(t *testing.T) {
	stmts, err := deadLetters(t).Statements(Data{Database: "wahook", Features: recent, RetentionDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	sql := stmts[0]
	for _, want := range []string{
		"app         LowCardinality(String),",
		"reason      LowCardinality(String),",
		"TTL received_at + INTERVAL 30 DAY",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("24.8 rendering lacks %q:\n%s", want, sql)
		}
	}
	stmts, err = deadLetters(t).Statements(Data{Database: "wahook", Features: recent})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stmts[0], "TTL") {
		t.Errorf("retention 0 rendered a TTL:\n%s", stmts[0])
	}
}

func TestDataHelpers(t *testing.T) {
	old := Data{Database: "db", Features: debian, RetentionDays: 7}
	cur := Data{Database: "db", Features: recent, RetentionDays: 7}
	tests := []struct{ name, got, want string }{
		{"LowCardinalityString 18.16", old.LowCardinalityString(), "String"},
		{"LowCardinalityString 24.8", cur.LowCardinalityString(), "LowCardinality(String)"},
		{"Timestamp 18.16", old.Timestamp(3), "DateTime"},
		{"Timestamp 24.8", cur.Timestamp(3), "DateTime64(3)"},
		{"Retention 18.16", old.Retention("at"), ""},
		{"Retention 24.8", cur.Retention("at"), "TTL at + INTERVAL 7 DAY"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestRenderRejectsBadDatabase(t *testing.T) {
	for _, db := range []string{"", "wa-hook", "x; DROP TABLE y", "1db", "`db`"} {
		_, err := deadLetters(t).Statements(Data{Database: db})
		if !errors.Is(err, ErrBadDatabase) {
			t.Errorf("Statements(database %q): %v, want ErrBadDatabase", db, err)
		}
	}
}

// TestRenderGolden renders every migration for 18.16 and for 24.8 into
// testdata/*.golden.sql, so that a change of the DDL shows in review.
// After adding or changing a migration: go test ./schema/migrations -run Golden -update
func TestRenderGolden(t *testing.T) {
	all, err := Load(Files())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file     string
		features Features
		cluster  string
	}{
		{"ddl_18.16.golden.sql", debian, ""},
		{"ddl_24.8.golden.sql", recent, ""},
		{"ddl_18.16_cluster.golden.sql", debian, "wahook"},
		{"ddl_24.8_cluster.golden.sql", recent, "wahook"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var b strings.Builder
			for _, m := range all {
				stmts, err := m.Statements(Data{Database: "wahook", Features: tc.features, RetentionDays: 90, Cluster: tc.cluster})
				if err != nil {
					t.Fatal(err)
				}
				b.WriteString("-- " + m.File + "\n")
				for _, s := range stmts {
					b.WriteString(s + ";\n\n")
				}
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("rendered DDL differs from %s (run with -update if intended):\n%s", path, b.String())
			}
		})
	}
}

// TestOnCluster: CREATEs, DROPs and RENAMEs get ON CLUSTER, MergeTree engines their
// Replicated forms with their arguments kept (a Merge table stays one); an
// ALTER and an insert are left as they are.
func TestOnCluster(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"CREATE DATABASE IF NOT EXISTS wahook", "CREATE DATABASE IF NOT EXISTS wahook ON CLUSTER c"},
		{"-- note\nCREATE TABLE IF NOT EXISTS db.t\n(\n    a UInt8\n)\nENGINE = ReplacingMergeTree(v)\nORDER BY a",
			"-- note\nCREATE TABLE IF NOT EXISTS db.t ON CLUSTER c\n(\n    a UInt8\n)\nENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db.t', '{replica}', v)\nORDER BY a"},
		{"CREATE TABLE IF NOT EXISTS db.s (a UInt8) ENGINE = SummingMergeTree((a, b)) ORDER BY a",
			"CREATE TABLE IF NOT EXISTS db.s ON CLUSTER c (a UInt8) ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/db.s', '{replica}', (a, b)) ORDER BY a"},
		{"CREATE TABLE IF NOT EXISTS db.m (a UInt8) ENGINE = MergeTree ORDER BY a",
			"CREATE TABLE IF NOT EXISTS db.m ON CLUSTER c (a UInt8) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/db.m', '{replica}') ORDER BY a"},
		{"CREATE MATERIALIZED VIEW IF NOT EXISTS db.v TO db.t AS SELECT a FROM db.x",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS db.v ON CLUSTER c TO db.t AS SELECT a FROM db.x"},
		{"-- gone\nDROP TABLE IF EXISTS db.v", "-- gone\nDROP TABLE IF EXISTS db.v ON CLUSTER c"},
		{"RENAME TABLE db.a TO db.b", "RENAME TABLE db.a TO db.b ON CLUSTER c"},
		{"RENAME TABLE db.a TO db.b,\n    db.c TO db.a\n", "RENAME TABLE db.a TO db.b,\n    db.c TO db.a ON CLUSTER c"},
		{"CREATE TABLE IF NOT EXISTS db.l AS db.t ENGINE = Merge(db, '^t$')",
			"CREATE TABLE IF NOT EXISTS db.l ON CLUSTER c AS db.t ENGINE = Merge(db, '^t$')"},
		{"ALTER TABLE db.t ADD COLUMN b String DEFAULT ''", "ALTER TABLE db.t ADD COLUMN b String DEFAULT ''"},
		{"INSERT INTO db.t (a) SELECT 1", "INSERT INTO db.t (a) SELECT 1"},
	} {
		if got := OnCluster(tc.in, "c"); got != tc.want {
			t.Errorf("OnCluster(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if _, err := deadLetters(t).Statements(Data{Database: "wahook", Cluster: "bad-name"}); !errors.Is(err, ErrBadDatabase) {
		t.Errorf("a cluster name that is no identifier: %v, want ErrBadDatabase", err)
	}
}

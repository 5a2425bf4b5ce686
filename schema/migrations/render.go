package migrations

import (
	"fmt"
	"regexp"
	"strings"
)

// Data is what a migration template sees. Besides the fields, templates call
// the methods: {{.LowCardinalityString}}, {{.Timestamp 3}} and
// {{.Retention "column"}}.
type Data struct {
	// Database is the database the schema lives in; write {{.Database}}.name
	// for every table, since the connection's default database may differ.
	Database string
	Features
	// RetentionDays is how long rows of tables that use {{.Retention}} are
	// kept; 0 keeps them forever.
	RetentionDays int
	// Cluster, when set, is the ClickHouse cluster (remote_servers) the
	// schema is created on: every CREATE runs ON CLUSTER with a Replicated
	// engine (OnCluster). Empty: the single-server schema.
	Cluster string
}

// LowCardinalityString is the type for a string column with few distinct
// values (an app name, a status, an error class): LowCardinality(String)
// where the server has it, String otherwise.
func (d Data) LowCardinalityString() string {
	if d.LowCardinality {
		return "LowCardinality(String)"
	}
	return "String"
}

// Timestamp is the type for a time with sub-second precision digits:
// DateTime64(precision) where the server has it, DateTime (seconds) otherwise.
func (d Data) Timestamp(precision int) string {
	if d.DateTime64 {
		return fmt.Sprintf("DateTime64(%d)", precision)
	}
	return "DateTime"
}

// Retention is a table TTL clause that deletes rows RetentionDays after
// column, or nothing when the server has no TTL or retention is 0. Retention
// is set when a table is created; changing it later takes a new migration.
func (d Data) Retention(column string) string {
	if !d.TTL || d.RetentionDays <= 0 {
		return ""
	}
	return fmt.Sprintf("TTL %s + INTERVAL %d DAY", column, d.RetentionDays)
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Statements renders the migration with data and splits it into statements.
func (m Migration) Statements(data Data) ([]string, error) {
	if !identifier.MatchString(data.Database) {
		return nil, fmt.Errorf("database %q: %w", data.Database, ErrBadDatabase)
	}
	var b strings.Builder
	if err := m.tmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", m.File, err)
	}
	stmts := SplitStatements(b.String())
	if data.Cluster != "" {
		if !identifier.MatchString(data.Cluster) {
			return nil, fmt.Errorf("cluster %q: %w", data.Cluster, ErrBadDatabase)
		}
		for i, s := range stmts {
			stmts[i] = OnCluster(s, data.Cluster)
		}
	}
	return stmts, nil
}

// createObject matches the head of a CREATE statement up to its object's
// name: "CREATE TABLE IF NOT EXISTS db.name" or "CREATE MATERIALIZED VIEW IF
// NOT EXISTS db.name", or "CREATE DATABASE IF NOT EXISTS db".
var createObject = regexp.MustCompile(`(?s)^((?:--[^\n]*\n|\s)*CREATE\s+(TABLE|MATERIALIZED\s+VIEW|DATABASE)\s+IF\s+NOT\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?))`)

// dropTable matches the head of a DROP statement up to its table's name:
// "DROP TABLE IF EXISTS db.name" (a materialized view is dropped as a table).
var dropTable = regexp.MustCompile(`(?s)^((?:--[^\n]*\n|\s)*DROP\s+TABLE\s+IF\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?))`)

// renameTable matches a rename of one or more tables, "RENAME TABLE db.a TO
// db.b[, db.c TO db.d]".
var renameTable = regexp.MustCompile(`(?s)^(?:--[^\n]*\n|\s)*RENAME\s+TABLE\s+[A-Za-z_]\w*\.[A-Za-z_]\w*\s+TO\s+[A-Za-z_]\w*\.[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*\.[A-Za-z_]\w*\s+TO\s+[A-Za-z_]\w*\.[A-Za-z_]\w*)*\s*$`)

// mergeTreeEngine matches a MergeTree family engine and its arguments, if any
// (one level of nested parentheses, as in SummingMergeTree((a, b))).
var mergeTreeEngine = regexp.MustCompile(`ENGINE\s*=\s*(Replacing|Aggregating|Summing|Collapsing|VersionedCollapsing|Graphite)?MergeTree(\((?:[^()]|\([^()]*\))*\))?`)

// OnCluster rewrites one rendered statement for a ClickHouse cluster: every
// CREATE, DROP TABLE and RENAME TABLE runs ON CLUSTER cluster, and every MergeTree engine becomes its
// Replicated form with the ZooKeeper path
// /clickhouse/tables/{shard}/DATABASE.TABLE and replica '{replica}' (the
// servers' macros), so that every replica of a shard holds all rows. A
// materialized view is created on every server and writes into its local
// replicated table. Other statements (ALTER) are returned unchanged: an ALTER
// of a replicated table reaches the other replicas through ZooKeeper.
func OnCluster(stmt, cluster string) string {
	if m := dropTable.FindStringSubmatchIndex(stmt); m != nil {
		return stmt[:m[1]] + " ON CLUSTER " + cluster + stmt[m[1]:]
	}
	if renameTable.MatchString(stmt) {
		return strings.TrimRight(stmt, " \t\n") + " ON CLUSTER " + cluster
	}
	m := createObject.FindStringSubmatchIndex(stmt)
	if m == nil {
		return stmt
	}
	name := stmt[m[6]:m[7]]
	out := stmt[:m[1]] + " ON CLUSTER " + cluster + stmt[m[1]:]
	if strings.Join(strings.Fields(stmt[m[4]:m[5]]), " ") != "TABLE" {
		return out
	}
	return mergeTreeEngine.ReplaceAllStringFunc(out, func(engine string) string {
		sm := mergeTreeEngine.FindStringSubmatch(engine)
		args := "'/clickhouse/tables/{shard}/" + name + "', '{replica}'"
		if inner := strings.TrimSuffix(strings.TrimPrefix(sm[2], "("), ")"); inner != "" {
			args += ", " + inner
		}
		return "ENGINE = Replicated" + sm[1] + "MergeTree(" + args + ")"
	})
}

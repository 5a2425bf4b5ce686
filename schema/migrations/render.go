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
	return SplitStatements(b.String()), nil
}

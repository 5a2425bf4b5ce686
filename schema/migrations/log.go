package migrations

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// logTable records applied migrations, one row per Apply that applied one.
// Two processes applying at once may both record a migration: readers group
// by version. It is a plain MergeTree so that no row is merged away: a second
// row with another checksum must stay visible.
const logTable = "schema_migrations"

func createLogTable(database string) string {
	return `CREATE TABLE IF NOT EXISTS ` + database + `.` + logTable + `
(
    version        UInt32,
    name           String,
    checksum       String,
    applied_at     DateTime,
    server_version String
)
ENGINE = MergeTree
ORDER BY (version, applied_at)`
}

type logEntry struct {
	name      string
	checksums []string // distinct
}

func readLog(ctx context.Context, conn driver.Conn, database string) (map[int]*logEntry, error) {
	rows, err := conn.Query(ctx, "SELECT version, name, checksum FROM "+database+"."+logTable+" ORDER BY version, applied_at")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", logTable, err)
	}
	defer rows.Close()
	out := map[int]*logEntry{}
	for rows.Next() {
		var (
			version        uint32
			name, checksum string
		)
		if err := rows.Scan(&version, &name, &checksum); err != nil {
			return nil, fmt.Errorf("read %s: %w", logTable, err)
		}
		e := out[int(version)]
		if e == nil {
			e = &logEntry{name: name}
			out[int(version)] = e
		}
		if !slices.Contains(e.checksums, checksum) {
			e.checksums = append(e.checksums, checksum)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", logTable, err)
	}
	return out, nil
}

func record(ctx context.Context, conn driver.Conn, database string, m Migration, at time.Time, server Version) error {
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+database+"."+logTable+
		" (version, name, checksum, applied_at, server_version)")
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := batch.Append(uint32(m.Version), m.Name, m.Checksum, at, server.String()); err != nil {
		_ = batch.Abort()
		return fmt.Errorf("record: %w", err)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

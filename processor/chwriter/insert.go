package chwriter

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// insertQuery is the INSERT that PrepareBatch sends: with the columns named,
// as 18.16 needs, and in the order of t.cols.
func insertQuery[T any](database string, t *table[T]) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + database + "." + t.name + " (")
	for i, c := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name)
	}
	b.WriteString(")")
	return b.String()
}

// noBlockDedup turns off ClickHouse's deduplication of inserted blocks.
// On replicated tables a block identical to one stored earlier is dropped,
// and the materialized views never see it: when a server stores a block in
// a table and fails before its views' parts (killed, or ZooKeeper lost for
// the views' tables), the client gets an error, writes the same rows again
// in the same block, and the views' rows for it (message_states,
// failures_by_minute, ...) would be missing for good. Every table this
// package writes already takes a row twice (Meta's retries, redelivery:
// ReplacingMergeTree, and views of max, minIf and uniqExact states), so the
// retried block is simply stored again.
var noBlockDedup = clickhouse.WithSettings(clickhouse.Settings{"insert_deduplicate": 0})

// insert writes rows into t with one INSERT, sent in blocks of at most
// blockRows rows. It returns nil once the server has taken every block.
func insert[T any](ctx context.Context, conn driver.Conn, query string, t *table[T], rows []T, blockRows int, s *scratch) (err error) {
	batch, err := conn.PrepareBatch(clickhouse.Context(ctx, noBlockDedup), query)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer func() {
		if !batch.IsSent() {
			_ = batch.Abort() // closes the connection: the server drops the INSERT
		}
	}()
	perRow, err := checkColumns(batch, t)
	if err != nil {
		return err
	}
	for start := 0; start < len(rows); start += blockRows {
		block := rows[start:min(start+blockRows, len(rows))]
		for i := range t.cols {
			if err := t.cols[i].add(batch.Column(i), perRow[i], s, block); err != nil {
				return fmt.Errorf("column %s: %w", t.cols[i].name, err)
			}
		}
		if start+len(block) < len(rows) {
			if err := batch.Flush(); err != nil {
				return fmt.Errorf("send block: %w", err)
			}
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// checkColumns makes sure that the server's columns are ours, in our order,
// and tells which of them are LowCardinality.
func checkColumns[T any](batch driver.Batch, t *table[T]) ([]bool, error) {
	got := batch.Columns()
	if len(got) != len(t.cols) {
		return nil, fmt.Errorf("server has %d columns for the insert, want %d", len(got), len(t.cols))
	}
	perRow := make([]bool, len(got))
	for i, c := range got {
		if c.Name() != t.cols[i].name {
			return nil, fmt.Errorf("column %d is %s, want %s", i, c.Name(), t.cols[i].name)
		}
		perRow[i] = lowCardinality(c)
	}
	return perRow, nil
}

// Package chwriter stores schema.Rows in ClickHouse: each table's rows in
// batched INSERTs with named columns over the native protocol.
//
// It owns the mapping from row fields to columns (the tables themselves are
// created by schema/migrations; README.md there documents them) and nothing
// else: no batching by time or size, no retries, no acks. The caller
// (processor stage 1) gathers rows, calls Write, and writes the whole batch
// again when Write fails; every table deduplicates on event ids, so rows
// written twice count once.
//
// Rows are appended column by column from typed slices (batch.Column(i)
// .Append), never with AppendStruct or other reflection over our rows.
package chwriter

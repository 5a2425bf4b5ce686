// Package processor turns the bodies of the RAW stream into ClickHouse rows
// and normalized events (stage 1), and holds per-number state (stage 2).
//
// Stage 1 is a durable pull consumer on WAHOOK_RAW. It normalizes each body
// into rows (schema.Rows), gathers them into batches by count, bytes and
// time, has a Writer store each batch, publishes each event on its
// per-number EVENTS subject, and acks the RAW messages only after both hold
// them. A body that cannot be decoded becomes a dead-letter row and is
// acked; a store that is down gets the batch's messages nak'ed with a
// backoff: work is delayed, never dropped, and never acked early.
//
// Rows and events carry deterministic ids, so a redelivery or a replay
// writes the same ids again and every query stays exact.
package processor

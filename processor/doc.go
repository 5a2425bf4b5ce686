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
//
// Beyond RAW and dead letters, which keep bodies as received, message text
// is kept nowhere unless an operator switches content storage on (wahook
// --store-content, WAHOOK_STORE_CONTENT; NewNormalizer with
// WithContent(true)). Then the text of each inbound message (text body,
// media caption, reply button or list row title, template button text,
// reaction emoji, location name and address, order text, an edit's new
// text) goes into InboundRow.Content: the content column of
// inbound_messages and the "content" key of the message's event on
// WAHOOK_EVENTS. Off, the column stays empty and the key is left out. Event
// ids do not depend on the switch. Switching it off does not remove text
// already stored: a replay of RAW writes the same rows without it, which
// replace the old ones when ClickHouse merges them (OPTIMIZE TABLE ...
// FINAL forces that), and WAHOOK_EVENTS drops old events after
// --events-max-age.
package processor

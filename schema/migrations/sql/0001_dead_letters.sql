-- dead_letters: bodies, or items of them, that stage 1 could not decode, with
-- the reason, kept so that they can be looked at and replayed once the
-- decoder is fixed. One row per bad item: item is the path of the item
-- (entry[0].changes[1].value.statuses[2]), "" when the whole body is bad, so
-- several bad items of one body stay apart.
--
-- ReplacingMergeTree, not MergeTree: the same body can be dead-lettered again
-- (a JetStream redelivery after a crash between insert and ack, a replay of
-- RAW after a deploy). Such a row has the same received_at (taken from the RAW
-- message, not the clock), raw_msg_id (the body's hash) and item, so it shares
-- the sorting key and merges collapse the copies, keeping the last one
-- inserted, whose reason and error come from the newest decoder. Merges happen
-- in the background: an exact count uses FINAL (README.md).
CREATE TABLE IF NOT EXISTS {{.Database}}.dead_letters
(
    received_at DateTime,
    app         {{.LowCardinalityString}},
    raw_seq     UInt64,
    raw_msg_id  String,
    item        String,
    reason      {{.LowCardinalityString}},
    error       String,
    body        String
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (received_at, raw_msg_id, item)
{{.Retention "received_at"}};

-- 0001_dead_letters.sql
-- dead_letters: raw bodies that stage 1 could not decode, with the reason,
-- kept so that they can be looked at and replayed once the decoder is fixed.
--
-- ReplacingMergeTree, not MergeTree: the same body can be dead-lettered again
-- (a JetStream redelivery after a crash between insert and ack, a replay of
-- RAW after a deploy). Such a row has the same received_at (taken from the RAW
-- message, not the clock) and raw_msg_id (the body's hash), so it shares the
-- sorting key and merges collapse the copies, keeping the last one inserted,
-- whose reason and error come from the newest decoder. Merges happen in the
-- background: an exact count uses FINAL or counts distinct raw_msg_id.
CREATE TABLE IF NOT EXISTS wahook.dead_letters
(
    received_at DateTime,
    app         LowCardinality(String),
    raw_msg_id  String,
    stream_seq  UInt64,
    reason      LowCardinality(String),
    error       String,
    body        String
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (received_at, raw_msg_id)
TTL received_at + INTERVAL 90 DAY;


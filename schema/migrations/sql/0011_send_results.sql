-- send_results: one row per send result a sending service reported
-- (schema.SendResultRow, POST /api/v1/send-results or wahook.raw._send_results):
-- accepted ones are a message's earliest evidence when its statuses come
-- later or not at all, so /api/v1/throughput counts them as the pacing signal
-- does; failed ones also have their rows in errors (origin send_result).
-- Deduplicated like status_events: count with uniqExact(event_id) or FINAL.
CREATE TABLE IF NOT EXISTS {{.Database}}.send_results
(
    event_id        String,
    event_time      DateTime,
    waba_id         String,
    phone_number_id String,
    message_id      String,
    request_id      String,
    recipient_hash  String,
    status          {{.LowCardinalityString}},
    error_codes     Array(Int32),
    campaign        String,
    template        String,
    received_at     DateTime,
    app             {{.LowCardinalityString}},
    raw_seq         UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
{{.Retention "received_at"}};

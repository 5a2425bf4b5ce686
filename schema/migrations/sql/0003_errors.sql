-- errors: one row per error occurrence (schema.ErrorRow): of a status, of a
-- webhook value, of an inbound message, or of a send result (origin). An
-- occurrence is identified by its owner's event_id and its index within it.
--
-- ReplacingMergeTree for the same reason as status_events: copies of an
-- occurrence share (event_id, error_index) and the columns before them in the
-- sorting key, which come from the owning event. Count occurrences with
-- uniqExact(event_id, error_index) or FINAL, or read failures_by_minute.
CREATE TABLE IF NOT EXISTS {{.Database}}.errors
(
    event_id        String,
    error_index     UInt16,
    origin          {{.LowCardinalityString}},
    event_time      DateTime,
    waba_id         String,
    phone_number_id String,
    message_id      String,
    recipient_hash  String,
    code            Int32,
    title           {{.LowCardinalityString}},
    message         String,
    details         String,
    href            String,
    campaign        String,
    template        {{.LowCardinalityString}},
    received_at     DateTime,
    app             {{.LowCardinalityString}},
    raw_seq         UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id, error_index)
{{.Retention "received_at"}};

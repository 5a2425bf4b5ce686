-- status_events: one row per message status (schema.StatusRow): sent,
-- delivered, read, played, failed, and any other value Meta sends, plus the
-- send results that sending services report (accepted, failed).
--
-- The same status can be inserted more than once (a redelivery, a replay of
-- RAW, a Meta retry in another POST): every copy has the same event_id
-- (schema.EventID). ReplacingMergeTree collapses rows with the same sorting
-- key in background merges, keeping the last inserted. The sorting key holds
-- only event_id and columns that are parts of it (phone_number_id,
-- event_time), so that all copies of an event share it; received_at, app and
-- raw_seq may differ between copies and stay out of it. Until merges have run,
-- count with uniqExact(event_id) or FINAL (README.md).
--
-- error_codes lists the codes of the status's errors; their details are in
-- errors. conversation_expiry is 1970-01-01 00:00:00 when absent.
CREATE TABLE IF NOT EXISTS {{.Database}}.status_events
(
    event_id             String,
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    message_id           String,
    status               {{.LowCardinalityString}},
    recipient_hash       String,
    recipient_user_hash  String,
    recipient_type       {{.LowCardinalityString}},
    group_id             String,
    participant_hash     String,
    error_codes          Array(Int32),
    pricing_billable     Int8,
    pricing_model        {{.LowCardinalityString}},
    pricing_type         {{.LowCardinalityString}},
    pricing_category     {{.LowCardinalityString}},
    conversation_id      String,
    conversation_origin  {{.LowCardinalityString}},
    conversation_expiry  DateTime,
    campaign             String,
    template             {{.LowCardinalityString}},
    extra                String,
    received_at          DateTime,
    app                  {{.LowCardinalityString}},
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
{{.Retention "received_at"}};

-- inbound_messages: one row per inbound message (schema.InboundRow); the
-- message text is never stored, senders are keyed hashes. Deduplicated like
-- status_events: count with uniqExact(event_id) or FINAL.
CREATE TABLE IF NOT EXISTS {{.Database}}.inbound_messages
(
    event_id             String,
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    message_id           String,
    type                 {{.LowCardinalityString}},
    from_hash            String,
    from_user_hash       String,
    group_id             String,
    context_message_id   String,
    context_forwarded    UInt8,
    interactive_type     {{.LowCardinalityString}},
    referral_source_type {{.LowCardinalityString}},
    referral_source_id   String,
    referral_ctwa_clid   String,
    error_codes          Array(Int32),
    extra                String,
    received_at          DateTime,
    app                  {{.LowCardinalityString}},
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
{{.Retention "received_at"}};

-- management_events: one row per event of every other field
-- (schema.ManagementRow): number quality and limits, names, account,
-- templates, user preferences, calls, and unknown fields kept raw.
--
-- Deduplicated like status_events. phone_number_id stays out of the sorting
-- key: it may be resolved from the display number, so two copies of one
-- event could disagree on it; kind, waba_id and event_time are parts of the
-- event id.
CREATE TABLE IF NOT EXISTS {{.Database}}.management_events
(
    event_id             String,
    kind                 {{.LowCardinalityString}},
    field                {{.LowCardinalityString}},
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    event                {{.LowCardinalityString}},
    subject_id           String,
    subject_name         String,
    old_value            String,
    new_value            String,
    reason               String,
    raw                  String,
    received_at          DateTime,
    app                  {{.LowCardinalityString}},
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (kind, waba_id, event_time, event_id)
{{.Retention "received_at"}};

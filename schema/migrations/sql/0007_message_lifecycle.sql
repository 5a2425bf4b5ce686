-- message_lifecycle: one row per sent message and recipient (after merges),
-- fed from status_events by message_lifecycle_mv: when it was first sent,
-- delivered, read, played and failed, and whether it ever failed.
--
-- recipient_key is participant_hash for a group send and recipient_hash
-- otherwise, so each member of a group has a lifecycle of its own. Statuses
-- without a message id (a send rejected by the API) have no lifecycle.
--
-- Every aggregate is order-free: the earliest time of each status
-- (minIfState; 1970-01-01 00:00:00 when the status never came), failed as the
-- maximum of status = 'failed' (once failed, always failed), and the maximum
-- of waba_id, campaign and template, which all statuses of a message share
-- or leave empty. A status inserted twice changes nothing. month (of the
-- status's event time) partitions the table: the statuses of one message may
-- fall in two months and then sit in two rows until a query merges them, so
-- queries always GROUP BY phone_number_id, message_id, recipient_key
-- (README.md).
--
-- CAST drops the LowCardinality that current releases give to status = '...'
-- and to template, so that the states have the declared argument types.
CREATE TABLE IF NOT EXISTS {{.Database}}.message_lifecycle
(
    phone_number_id String,
    message_id      String,
    recipient_key   String,
    month           Date,
    waba_id         AggregateFunction(max, String),
    campaign        AggregateFunction(max, String),
    template        AggregateFunction(max, String),
    sent_at         AggregateFunction(minIf, DateTime, UInt8),
    delivered_at    AggregateFunction(minIf, DateTime, UInt8),
    read_at         AggregateFunction(minIf, DateTime, UInt8),
    played_at       AggregateFunction(minIf, DateTime, UInt8),
    failed_at       AggregateFunction(minIf, DateTime, UInt8),
    failed          AggregateFunction(max, UInt8)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(month)
ORDER BY (phone_number_id, message_id, recipient_key)
{{.Retention "month"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Database}}.message_lifecycle_mv
TO {{.Database}}.message_lifecycle
AS SELECT
    phone_number_id,
    message_id,
    if(participant_hash != '', participant_hash, recipient_hash) AS recipient_key,
    toStartOfMonth(event_time) AS month,
    maxState(waba_id) AS waba_id,
    maxState(campaign) AS campaign,
    maxState(CAST(template AS String)) AS template,
    minIfState(event_time, CAST(status = 'sent' AS UInt8)) AS sent_at,
    minIfState(event_time, CAST(status = 'delivered' AS UInt8)) AS delivered_at,
    minIfState(event_time, CAST(status = 'read' AS UInt8)) AS read_at,
    minIfState(event_time, CAST(status = 'played' AS UInt8)) AS played_at,
    minIfState(event_time, CAST(status = 'failed' AS UInt8)) AS failed_at,
    maxState(CAST(status = 'failed' AS UInt8)) AS failed
FROM {{.Database}}.status_events
WHERE message_id != ''
GROUP BY phone_number_id, message_id, recipient_key, month;

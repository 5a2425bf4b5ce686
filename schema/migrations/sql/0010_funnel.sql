-- The delivery funnel, resolved: one net row per message and recipient in
-- funnel_messages, kept up to date by the funnel resolver
-- (processor/funnel), so that the funnel counts rows instead of resolving
-- every message's statuses at query time.
--
-- message_states: message_lifecycle again, with a small index granularity,
-- so that the resolver can read the state of the messages it was told about
-- without reading whole months. Its rows are kept a month longer than
-- funnel_messages' (where the server has a TTL): a message's state must not
-- lose its early statuses while its resolved row is still there. Fed by
-- message_states_mv from status_events;
-- the resolver's first pass copies message_lifecycle in, for the statuses
-- stored before this migration (a status in both counts once: every
-- aggregate is a minimum or a maximum).
CREATE TABLE IF NOT EXISTS {{.Database}}.message_states
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
{{.Retention "month + INTERVAL 1 MONTH"}}
SETTINGS index_granularity = 256;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Database}}.message_states_mv
TO {{.Database}}.message_states
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

-- funnel_touched: which messages got a status, and when the insert
-- happened (the server's clock), fed by message_states_touched_mv from
-- status_events. The resolver reads it from its last pass on, less a slack
-- for inserts that became visible after that pass read (milliseconds after
-- their stamp), and drops days it no longer needs. The view's name sorts
-- after message_states_mv, and 18.16 runs an insert's views one after the
-- other in the order of their names, so there message_states holds a status
-- by the time its message shows up here. Elsewhere, and for an insert
-- stamped before a pass began but visible only after it read, the slack
-- covers it (a server clock stepped back by more than the slack would not
-- be covered). Where the
-- server has no TTL (18.16), only the resolver drops old days: with
-- --funnel-interval 0 on every instance, drop them by hand.
CREATE TABLE IF NOT EXISTS {{.Database}}.funnel_touched
(
    inserted_at     DateTime,
    phone_number_id String,
    message_id      String,
    recipient_key   String
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(inserted_at)
ORDER BY inserted_at
{{.Retention "inserted_at"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Database}}.message_states_touched_mv
TO {{.Database}}.funnel_touched
AS SELECT
    now() AS inserted_at,
    phone_number_id,
    message_id,
    if(participant_hash != '', participant_hash, recipient_hash) AS recipient_key
FROM {{.Database}}.status_events
WHERE message_id != '';

-- funnel_messages: a multiset of resolved rows, n the multiplicity, written
-- only by the funnel resolver. Rows with equal columns sum in merges and
-- vanish at 0, and every query sums, so a row counts the same before and
-- after merges.
--
-- kind 0 rows are messages: each message and recipient nets one. The
-- resolver replaces a message's row by inserting the rows it nets with
-- n = -1 and the new one with n = 1, in one insert. first is the time of the
-- first status (sent, delivered, read, played or failed); stage is 1 sent,
-- 2 delivered, 3 read (read or played), 4 failed (once failed, always
-- failed); to_deliver and to_read are the seconds from sent to delivered (or
-- a later stage) and to read, -1 when unknown. The n_* columns are n where
-- the row counts as sent (not failed), delivered, read, failed, or has a
-- to_deliver or to_read, and 0 elsewhere.
--
-- Kinds 1 to 3 are the same rows summed by the hour of first and by number,
-- WABA, campaign and template (message_id, recipient_key and stage empty),
-- which the resolver inserts with each message row, with the same n, in the
-- same insert and so in the same part: kind 1 the counts (the n_* columns),
-- kind 2 how many messages (n) took to_deliver seconds, kind 3 to_read. A
-- funnel reads them for whole hours and the message rows only for the parts
-- of hours at the ends of its range.
--
-- The day of first and the kind lead the sorting key: a funnel reads only the
-- days and kinds it asks for, and the resolver finds a message's rows by its
-- key and the days its first status can be on (first only ever moves
-- earlier).
CREATE TABLE IF NOT EXISTS {{.Database}}.funnel_messages
(
    kind            UInt8,
    phone_number_id String,
    message_id      String,
    recipient_key   String,
    first           DateTime,
    waba_id         String,
    campaign        String,
    template        String,
    stage           UInt8,
    to_deliver      Int32,
    to_read         Int32,
    n               Int32,
    n_sent          Int32,
    n_delivered     Int32,
    n_read          Int32,
    n_failed        Int32,
    n_to_deliver    Int32,
    n_to_read       Int32
)
ENGINE = SummingMergeTree((n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read))
PARTITION BY toYYYYMM(first)
ORDER BY (toDate(first), kind, phone_number_id, message_id, recipient_key, first, waba_id, campaign, template, stage, to_deliver, to_read)
{{.Retention "first"}}
SETTINGS index_granularity = 256;

-- funnel_resolver: how far the resolver has read funnel_touched (the
-- server's clock at the start of each complete pass); the latest counts.
-- version is the watermark in seconds, so that merges keep the latest.
CREATE TABLE IF NOT EXISTS {{.Database}}.funnel_resolver
(
    id        UInt8,
    watermark DateTime,
    version   UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY id;

-- 0001_dead_letters.sql
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
CREATE TABLE IF NOT EXISTS wahook.dead_letters
(
    received_at DateTime,
    app         LowCardinality(String),
    raw_seq     UInt64,
    raw_msg_id  String,
    item        String,
    reason      LowCardinality(String),
    error       String,
    body        String
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (received_at, raw_msg_id, item)
TTL received_at + INTERVAL 90 DAY;

-- 0002_status_events.sql
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
CREATE TABLE IF NOT EXISTS wahook.status_events
(
    event_id             String,
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    message_id           String,
    status               LowCardinality(String),
    recipient_hash       String,
    recipient_user_hash  String,
    recipient_type       LowCardinality(String),
    group_id             String,
    participant_hash     String,
    error_codes          Array(Int32),
    pricing_billable     Int8,
    pricing_model        LowCardinality(String),
    pricing_type         LowCardinality(String),
    pricing_category     LowCardinality(String),
    conversation_id      String,
    conversation_origin  LowCardinality(String),
    conversation_expiry  DateTime,
    campaign             String,
    template             LowCardinality(String),
    extra                String,
    received_at          DateTime,
    app                  LowCardinality(String),
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
TTL received_at + INTERVAL 90 DAY;

-- 0003_errors.sql
-- errors: one row per error occurrence (schema.ErrorRow): of a status, of a
-- webhook value, of an inbound message, or of a send result (origin). An
-- occurrence is identified by its owner's event_id and its index within it.
--
-- ReplacingMergeTree for the same reason as status_events: copies of an
-- occurrence share (event_id, error_index) and the columns before them in the
-- sorting key, which come from the owning event. Count occurrences with
-- uniqExact(event_id, error_index) or FINAL, or read failures_by_minute.
CREATE TABLE IF NOT EXISTS wahook.errors
(
    event_id        String,
    error_index     UInt16,
    origin          LowCardinality(String),
    event_time      DateTime,
    waba_id         String,
    phone_number_id String,
    message_id      String,
    recipient_hash  String,
    code            Int32,
    title           LowCardinality(String),
    message         String,
    details         String,
    href            String,
    campaign        String,
    template        LowCardinality(String),
    received_at     DateTime,
    app             LowCardinality(String),
    raw_seq         UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id, error_index)
TTL received_at + INTERVAL 90 DAY;

-- 0004_inbound_messages.sql
-- inbound_messages: one row per inbound message (schema.InboundRow); the
-- message text is never stored, senders are keyed hashes. Deduplicated like
-- status_events: count with uniqExact(event_id) or FINAL.
CREATE TABLE IF NOT EXISTS wahook.inbound_messages
(
    event_id             String,
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    message_id           String,
    type                 LowCardinality(String),
    from_hash            String,
    from_user_hash       String,
    group_id             String,
    context_message_id   String,
    context_forwarded    UInt8,
    interactive_type     LowCardinality(String),
    referral_source_type LowCardinality(String),
    referral_source_id   String,
    referral_ctwa_clid   String,
    error_codes          Array(Int32),
    extra                String,
    received_at          DateTime,
    app                  LowCardinality(String),
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
TTL received_at + INTERVAL 90 DAY;

-- 0005_management_events.sql
-- management_events: one row per event of every other field
-- (schema.ManagementRow): number quality and limits, names, account,
-- templates, user preferences, calls, and unknown fields kept raw.
--
-- Deduplicated like status_events. phone_number_id stays out of the sorting
-- key: it may be resolved from the display number, so two copies of one
-- event could disagree on it; kind, waba_id and event_time are parts of the
-- event id.
CREATE TABLE IF NOT EXISTS wahook.management_events
(
    event_id             String,
    kind                 LowCardinality(String),
    field                LowCardinality(String),
    event_time           DateTime,
    waba_id              String,
    phone_number_id      String,
    display_phone_number String,
    event                LowCardinality(String),
    subject_id           String,
    subject_name         String,
    old_value            String,
    new_value            String,
    reason               String,
    raw                  String,
    received_at          DateTime,
    app                  LowCardinality(String),
    raw_seq              UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (kind, waba_id, event_time, event_id)
TTL received_at + INTERVAL 90 DAY;

-- 0006_failures_by_minute.sql
-- failures_by_minute: error occurrences by minute, number, code, origin,
-- WABA, template and campaign, fed from errors by failures_by_minute_mv.
--
-- error_keys holds the set of (event_id, error_index) of the occurrences, not
-- a count: an occurrence inserted twice (redelivery, replay, Meta retry) is
-- the same element twice, so uniqExactMerge(error_keys) counts it once, before
-- and after merges. Query it with GROUP BY and uniqExactMerge (README.md).
-- Every column but error_keys is in the sorting key, so merges combine the
-- states of equal keys; the key starts with the number and the minute like
-- the tables it summarizes.
CREATE TABLE IF NOT EXISTS wahook.failures_by_minute
(
    phone_number_id String,
    minute          DateTime,
    code            Int32,
    origin          LowCardinality(String),
    waba_id         String,
    template        LowCardinality(String),
    campaign        String,
    error_keys      AggregateFunction(uniqExact, String, UInt16)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (phone_number_id, minute, code, origin, waba_id, template, campaign);

CREATE MATERIALIZED VIEW IF NOT EXISTS wahook.failures_by_minute_mv
TO wahook.failures_by_minute
AS SELECT
    phone_number_id,
    toStartOfMinute(event_time) AS minute,
    code,
    origin,
    waba_id,
    template,
    campaign,
    uniqExactState(event_id, error_index) AS error_keys
FROM wahook.errors
GROUP BY phone_number_id, minute, code, origin, waba_id, template, campaign;

-- 0007_message_lifecycle.sql
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
CREATE TABLE IF NOT EXISTS wahook.message_lifecycle
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
TTL month + INTERVAL 90 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS wahook.message_lifecycle_mv
TO wahook.message_lifecycle
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
FROM wahook.status_events
WHERE message_id != ''
GROUP BY phone_number_id, message_id, recipient_key, month;

-- 0008_status_counts_by_minute.sql
-- status_counts_by_minute: statuses by minute, number, WABA, status, pricing
-- category and campaign, fed from status_events by
-- status_counts_by_minute_mv. events holds the set of event ids, so
-- uniqExactMerge(events) counts a status inserted twice once.
CREATE TABLE IF NOT EXISTS wahook.status_counts_by_minute
(
    phone_number_id  String,
    minute           DateTime,
    status           LowCardinality(String),
    pricing_category LowCardinality(String),
    waba_id          String,
    campaign         String,
    events           AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (phone_number_id, minute, status, pricing_category, waba_id, campaign);

CREATE MATERIALIZED VIEW IF NOT EXISTS wahook.status_counts_by_minute_mv
TO wahook.status_counts_by_minute
AS SELECT
    phone_number_id,
    toStartOfMinute(event_time) AS minute,
    status,
    pricing_category,
    waba_id,
    campaign,
    uniqExactState(event_id) AS events
FROM wahook.status_events
GROUP BY phone_number_id, minute, status, pricing_category, waba_id, campaign;

-- 0009_inbound_content.sql
-- inbound_messages.content: the text of an inbound message
-- (schema.InboundRow.Content), written only when an operator switches
-- content storage on (--store-content); '' otherwise. 18.16 has no
-- ADD COLUMN IF NOT EXISTS: Apply takes "already exists" as done.
ALTER TABLE wahook.inbound_messages ADD COLUMN content String DEFAULT '';

-- 0010_funnel.sql
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
CREATE TABLE IF NOT EXISTS wahook.message_states
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
TTL month + INTERVAL 1 MONTH + INTERVAL 90 DAY
SETTINGS index_granularity = 256;

CREATE MATERIALIZED VIEW IF NOT EXISTS wahook.message_states_mv
TO wahook.message_states
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
FROM wahook.status_events
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
CREATE TABLE IF NOT EXISTS wahook.funnel_touched
(
    inserted_at     DateTime,
    phone_number_id String,
    message_id      String,
    recipient_key   String
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(inserted_at)
ORDER BY inserted_at
TTL inserted_at + INTERVAL 90 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS wahook.message_states_touched_mv
TO wahook.funnel_touched
AS SELECT
    now() AS inserted_at,
    phone_number_id,
    message_id,
    if(participant_hash != '', participant_hash, recipient_hash) AS recipient_key
FROM wahook.status_events
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
CREATE TABLE IF NOT EXISTS wahook.funnel_messages
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
TTL first + INTERVAL 90 DAY
SETTINGS index_granularity = 256;

-- funnel_resolver: how far the resolver has read funnel_touched (the
-- server's clock at the start of each complete pass); the latest counts.
-- version is the watermark in seconds, so that merges keep the latest.
CREATE TABLE IF NOT EXISTS wahook.funnel_resolver
(
    id        UInt8,
    watermark DateTime,
    version   UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY id;

-- 0011_send_results.sql
-- send_results: one row per send result a sending service reported
-- (schema.SendResultRow, POST /api/v1/send-results or wahook.raw._send_results):
-- accepted ones are a message's earliest evidence when its statuses come
-- later or not at all, so /api/v1/throughput counts them as the pacing signal
-- does; failed ones also have their rows in errors (origin send_result).
-- Deduplicated like status_events: count with uniqExact(event_id) or FINAL.
CREATE TABLE IF NOT EXISTS wahook.send_results
(
    event_id        String,
    event_time      DateTime,
    waba_id         String,
    phone_number_id String,
    message_id      String,
    request_id      String,
    recipient_hash  String,
    status          LowCardinality(String),
    error_codes     Array(Int32),
    campaign        String,
    template        String,
    received_at     DateTime,
    app             LowCardinality(String),
    raw_seq         UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (phone_number_id, event_time, event_id)
TTL received_at + INTERVAL 90 DAY;

-- 0012_message_lifecycle_merge.sql
-- message_lifecycle becomes a Merge table over message_states, which holds
-- the same aggregate (0010): every status was aggregated twice, in two
-- tables that differed only in their index granularity, and their merges were
-- about half of ClickHouse's background work. Queries keep their text: a
-- Merge table reads its tables with their indexes, and has the same columns.
--
-- The old table is renamed, not copied or dropped (a rename changes only
-- metadata, however large the table), and stays under the Merge table, so
-- that the statuses stored before message_states existed still show. A status
-- in both tables counts once, as every query groups by message and
-- recipient with -Merge aggregates, all minima and maxima. No view feeds it any
-- more: message_lifecycle_0007 may be dropped once the funnel resolver's first
-- pass has copied it into message_states (docs/api.md).
--
-- The Merge table is made under another name and swapped in by the same
-- rename, so that queries always find a message_lifecycle (on a cluster with
-- a replica down too: the replicas up have made the whole rename). Apply runs
-- under a lock (cmd/wahook: a lease in wahook_leases), so that no other process
-- applies an earlier file meanwhile; each step may still run twice after a
-- crash (the rename then finds its target there, which counts as done), and
-- the last one fails the migration unless message_lifecycle is the Merge table.
DROP TABLE IF EXISTS wahook.message_lifecycle_mv;

CREATE TABLE IF NOT EXISTS wahook.message_lifecycle_merge AS wahook.message_states
ENGINE = Merge(wahook, '^message_states$|^message_lifecycle_0007$');

RENAME TABLE wahook.message_lifecycle TO wahook.message_lifecycle_0007,
             wahook.message_lifecycle_merge TO wahook.message_lifecycle;

DROP TABLE IF EXISTS wahook.message_lifecycle_merge;

SELECT throwIf((SELECT count() FROM system.tables
                WHERE database = 'wahook' AND name = 'message_lifecycle' AND engine = 'Merge') != 1);

-- 0013_settings.sql
-- settings: facts about the data in this database that every process must
-- agree with, one row per name (the last set wins). phone_hash_key_check is
-- a keyed digest of a fixed text under --phone-hash-key: a process whose key
-- gives another digest would store hashes that match none of the stored
-- ones, and statuses stored before would count twice (cmd/wahook).
CREATE TABLE IF NOT EXISTS wahook.settings
(
    name   String,
    value  String,
    set_at DateTime
)
ENGINE = ReplacingMergeTree(set_at)
ORDER BY name;


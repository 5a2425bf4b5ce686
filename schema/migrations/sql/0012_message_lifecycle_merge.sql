-- message_lifecycle becomes a Merge table over message_states, which holds
-- the same aggregate (0010): every status was aggregated twice, in two
-- tables that differed only in their index granularity, and their merges were
-- about half of ClickHouse's background work. Queries keep their text: a
-- Merge table reads message_states with its index, and has the same columns.
-- message_states keeps its rows a month longer than message_lifecycle did
-- (where the server has a TTL).
--
-- Every step may run twice, or in two processes at once. The view goes
-- first, so that no status lands in the old table after the copy. The copy
-- brings the statuses stored before message_states existed (the funnel
-- resolver's first pass copied them too; a status in both counts once: every
-- aggregate is a minimum or a maximum). It reads through merge(), which
-- matches message_states as well, so that it finds nothing to copy instead
-- of failing once the old table is gone; should it meet the new Merge table
-- (another process got further), it copies message_states into itself,
-- which changes nothing either. Dropping the new Merge table drops no data.
DROP TABLE IF EXISTS {{.Database}}.message_lifecycle_mv;

INSERT INTO {{.Database}}.message_states
    (phone_number_id, message_id, recipient_key, month, waba_id, campaign, template,
     sent_at, delivered_at, read_at, played_at, failed_at, failed)
SELECT phone_number_id, message_id, recipient_key, month, waba_id, campaign, template,
       sent_at, delivered_at, read_at, played_at, failed_at, failed
FROM merge({{.Database}}, '^message_(lifecycle|states)$')
WHERE _table = 'message_lifecycle';

DROP TABLE IF EXISTS {{.Database}}.message_lifecycle;

CREATE TABLE IF NOT EXISTS {{.Database}}.message_lifecycle AS {{.Database}}.message_states
ENGINE = Merge({{.Database}}, '^message_states$');

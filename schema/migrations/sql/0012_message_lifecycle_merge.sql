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
DROP TABLE IF EXISTS {{.Database}}.message_lifecycle_mv;

CREATE TABLE IF NOT EXISTS {{.Database}}.message_lifecycle_merge AS {{.Database}}.message_states
ENGINE = Merge({{.Database}}, '^message_states$|^message_lifecycle_0007$');

RENAME TABLE {{.Database}}.message_lifecycle TO {{.Database}}.message_lifecycle_0007,
             {{.Database}}.message_lifecycle_merge TO {{.Database}}.message_lifecycle;

DROP TABLE IF EXISTS {{.Database}}.message_lifecycle_merge;

SELECT throwIf((SELECT count() FROM system.tables
                WHERE database = '{{.Database}}' AND name = 'message_lifecycle' AND engine = 'Merge') != 1);

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
CREATE TABLE IF NOT EXISTS {{.Database}}.failures_by_minute
(
    phone_number_id String,
    minute          DateTime,
    code            Int32,
    origin          {{.LowCardinalityString}},
    waba_id         String,
    template        {{.LowCardinalityString}},
    campaign        String,
    error_keys      AggregateFunction(uniqExact, String, UInt16)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (phone_number_id, minute, code, origin, waba_id, template, campaign);

CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Database}}.failures_by_minute_mv
TO {{.Database}}.failures_by_minute
AS SELECT
    phone_number_id,
    toStartOfMinute(event_time) AS minute,
    code,
    origin,
    waba_id,
    template,
    campaign,
    uniqExactState(event_id, error_index) AS error_keys
FROM {{.Database}}.errors
GROUP BY phone_number_id, minute, code, origin, waba_id, template, campaign;

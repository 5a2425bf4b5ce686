-- status_counts_by_minute: statuses by minute, number, WABA, status, pricing
-- category and campaign, fed from status_events by
-- status_counts_by_minute_mv. events holds the set of event ids, so
-- uniqExactMerge(events) counts a status inserted twice once.
CREATE TABLE IF NOT EXISTS {{.Database}}.status_counts_by_minute
(
    phone_number_id  String,
    minute           DateTime,
    status           {{.LowCardinalityString}},
    pricing_category {{.LowCardinalityString}},
    waba_id          String,
    campaign         String,
    events           AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (phone_number_id, minute, status, pricing_category, waba_id, campaign);

CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Database}}.status_counts_by_minute_mv
TO {{.Database}}.status_counts_by_minute
AS SELECT
    phone_number_id,
    toStartOfMinute(event_time) AS minute,
    status,
    pricing_category,
    waba_id,
    campaign,
    uniqExactState(event_id) AS events
FROM {{.Database}}.status_events
GROUP BY phone_number_id, minute, status, pricing_category, waba_id, campaign;

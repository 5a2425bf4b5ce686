package dashboards

import (
	"fmt"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/wahook/wahook/schema"
)

// The SQL below runs on Debian's ClickHouse 18.16 and on current releases
// (the tests run each query against 18.16 with fixture data). It names
// tables without a database: the datasource's default database is wahook's.
// $__fromTime, $__toTime and $__interval_s are the ClickHouse plugin's
// macros: toDateTime(from), toDateTime(to), the panel's interval in seconds.

// classExpr is the error class of a code column, from wahook's catalogue
// (schema.ErrorCodes), so the dashboard classes codes as the API does.
func classExpr(col string) string {
	byClass := map[schema.ErrorClass][]string{}
	for _, c := range schema.ErrorCodes() {
		byClass[c.Class] = append(byClass[c.Class], fmt.Sprint(c.Code))
	}
	var parts []string
	for _, class := range schema.ErrorClasses() {
		if codes := byClass[class]; len(codes) > 0 {
			parts = append(parts, fmt.Sprintf("%s IN (%s), '%s'", col, strings.Join(codes, ", "), class))
		}
	}
	return "multiIf(" + strings.Join(parts, ",\n        ") + ",\n        '" + string(schema.ClassUnknown) + "')"
}

// verdictExpr is the verdict of a class column (schema.ClassVerdict).
func verdictExpr(col string) string {
	byVerdict := map[schema.Verdict][]string{}
	for _, class := range schema.ErrorClasses() {
		v := schema.ClassVerdict(class)
		byVerdict[v] = append(byVerdict[v], "'"+string(class)+"'")
	}
	verdicts := make([]string, 0, len(byVerdict))
	for v := range byVerdict {
		verdicts = append(verdicts, string(v))
	}
	sort.Strings(verdicts)
	var parts []string
	for _, v := range verdicts {
		parts = append(parts, fmt.Sprintf("%s IN (%s), '%s'", col, strings.Join(byVerdict[schema.Verdict(v)], ", "), v))
	}
	return "multiIf(" + strings.Join(parts, ", ") + ", '" + string(schema.VerdictNotRateLimit) + "')"
}

// bucket is the start of a panel interval holding the DateTime column col.
func bucket(col string) string {
	return fmt.Sprintf("toDateTime(intDiv(toUInt32(%s), $__interval_s) * $__interval_s)", col)
}

// SQL of the business dashboard's panels, by name.
var (
	// Failure occurrences by class over time, from the documented failures
	// aggregate (failures_by_minute, exact under duplicates).
	sqlFailuresByClass = `SELECT time, class, uniqExactMerge(error_keys) AS failures
FROM
(
    SELECT ` + bucket("minute") + ` AS time,
           ` + classExpr("code") + ` AS class,
           error_keys
    FROM failures_by_minute
    WHERE minute >= $__fromTime AND minute < $__toTime
)
GROUP BY time, class
ORDER BY time, class`

	sqlFailuresByVerdict = `SELECT time, verdict, uniqExactMerge(error_keys) AS failures
FROM
(
    SELECT ` + bucket("minute") + ` AS time,
           ` + verdictExpr(classExpr("code")) + ` AS verdict,
           error_keys
    FROM failures_by_minute
    WHERE minute >= $__fromTime AND minute < $__toTime
)
GROUP BY time, verdict
ORDER BY time, verdict`

	// The failure distribution by code with Meta's class and the verdict.
	sqlFailuresByCode = `SELECT code, class, ` + verdictExpr("class") + ` AS verdict, failures, numbers, campaigns
FROM
(
    SELECT code, ` + classExpr("code") + ` AS class,
           uniqExactMerge(error_keys) AS failures,
           uniqExact(phone_number_id) AS numbers,
           uniqExact(campaign) AS campaigns
    FROM failures_by_minute
    WHERE minute >= $__fromTime AND minute < $__toTime
    GROUP BY code
)
ORDER BY failures DESC, code`

	// Messages per second of each number (outbound once, at its sent status;
	// inbound) as a share of its tier: 1,000 after a THROUGHPUT_UPGRADE, 80
	// otherwise (coexistence numbers' 20 and --number-tier overrides are in
	// the API's throughput report, not here).
	sqlThroughputVsTier = `SELECT time, phone_number_id, round(100 * msgs / 60 / if(tier = 0, 80, tier), 2) AS utilization_pct
FROM
(
    SELECT time, phone_number_id, sum(n) AS msgs
    FROM
    (
        SELECT minute AS time, phone_number_id, uniqExactMerge(events) AS n
        FROM status_counts_by_minute
        WHERE status = 'sent' AND minute >= $__fromTime AND minute < $__toTime
        GROUP BY time, phone_number_id
        UNION ALL
        SELECT toStartOfMinute(event_time) AS time, phone_number_id, uniqExact(event_id) AS n
        FROM inbound_messages
        WHERE event_time >= $__fromTime AND event_time < $__toTime
        GROUP BY time, phone_number_id
    )
    GROUP BY time, phone_number_id
)
ANY LEFT JOIN
(
    SELECT phone_number_id, if(countIf(event = 'THROUGHPUT_UPGRADE') > 0, 1000, 80) AS tier
    FROM management_events
    WHERE kind = 'number' AND field = 'phone_number_quality_update' AND phone_number_id != ''
    GROUP BY phone_number_id
) USING phone_number_id
ORDER BY time, phone_number_id`

	// Quality and messaging-limit changes of each number, each event once:
	// the copy that names its number before a held one's copy without it
	// ('' sorted first, until ClickHouse merges them away).
	sqlQualityTimeline = `SELECT event_time AS time, phone_number_id, display_phone_number, event,
       old_value AS previous_limit, new_value AS messaging_limit
FROM management_events
WHERE kind = 'number' AND field = 'phone_number_quality_update'
  AND event_time >= $__fromTime AND event_time < $__toTime
ORDER BY time DESC, phone_number_id = '', phone_number_id
LIMIT 1 BY event_id`

	// The documented funnel (schema/migrations/README.md, "funnel") by
	// campaign and template, over the months of the range.
	sqlFunnel = `SELECT msg_campaign AS campaign, msg_template AS template,
       count() AS messages,
       countIf(has_failed = 0 AND (sent > 0 OR delivered > 0 OR read > 0 OR played > 0)) AS sent_count,
       countIf(has_failed = 0 AND (delivered > 0 OR read > 0 OR played > 0)) AS delivered_count,
       countIf(has_failed = 0 AND (read > 0 OR played > 0)) AS read_count,
       countIf(has_failed = 1) AS failed_count
FROM
(
    SELECT phone_number_id, message_id, recipient_key,
           maxMerge(campaign) AS msg_campaign,
           maxMerge(template) AS msg_template,
           minIfMerge(sent_at) AS sent,
           minIfMerge(delivered_at) AS delivered,
           minIfMerge(read_at) AS read,
           minIfMerge(played_at) AS played,
           maxMerge(failed) AS has_failed
    FROM message_lifecycle
    WHERE month >= toStartOfMonth(toDate($__fromTime)) AND month <= toStartOfMonth(toDate($__toTime))
    GROUP BY phone_number_id, message_id, recipient_key
)
GROUP BY campaign, template
ORDER BY messages DESC, campaign, template`

	// The documented status counts (status_counts) over time.
	sqlStatuses = `SELECT ` + bucket("minute") + ` AS time, status, uniqExactMerge(events) AS statuses
FROM status_counts_by_minute
WHERE minute >= $__fromTime AND minute < $__toTime
GROUP BY time, status
ORDER BY time, status`

	// The documented dead letters by reason.
	sqlDeadLetters = `SELECT reason, count() AS items, uniqExact(raw_msg_id) AS bodies
FROM dead_letters FINAL
WHERE received_at >= $__fromTime AND received_at < $__toTime
GROUP BY reason
ORDER BY items DESC, reason`
)

func chSeries(title, unit, sql string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).Unit(unit).Height(9).Span(12).
		Datasource(*clickHouseDS()).FillOpacity(30).LineWidth(1).
		WithTarget(chQuery("A", FormatTimeSeries, sql))
}

func chTable(title, sql string, span uint32) *table.PanelBuilder {
	return table.NewPanelBuilder().Title(title).Height(9).Span(span).
		Datasource(*clickHouseDS()).
		WithTarget(chQuery("A", FormatTable, sql))
}

var _ cog.Builder[variants.Dataquery] = (*clickHouseQueryBuilder)(nil)

// Business is the dashboard of what happened to the messages, on ClickHouse.
func Business() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("wahook: business").
		Uid("wahook-business").
		Tags([]string{"wahook"}).
		Refresh("1m").
		Time("now-24h", "now").
		Timezone("utc").
		WithRow(dashboard.NewRowBuilder("Failures: codes, classes, verdicts")).
		WithPanel(chSeries("Failures by class (131048 quality, 130429 throughput, ...)", "short", sqlFailuresByClass)).
		WithPanel(chSeries("Failures by verdict", "short", sqlFailuresByVerdict)).
		WithPanel(chTable("Failures by code, with class and verdict", sqlFailuresByCode, 24)).
		WithRow(dashboard.NewRowBuilder("Numbers: throughput, quality, messaging limit")).
		WithPanel(chSeries("Throughput against tier, per number (% of tier, per minute)", "percent", sqlThroughputVsTier)).
		WithPanel(chTable("Quality and messaging-limit changes", sqlQualityTimeline, 12)).
		WithRow(dashboard.NewRowBuilder("Delivery")).
		WithPanel(chTable("Funnel by campaign and template", sqlFunnel, 24)).
		WithPanel(chSeries("Statuses by status", "short", sqlStatuses)).
		WithPanel(chTable("Dead letters by reason", sqlDeadLetters, 12))
	return b.Build()
}

package dashboards

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/alerting"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/expr"

	"github.com/wahook/wahook/schema"
)

// The per-number alerts: wahook's metrics count errors by class and numbers
// by advice for the whole service (the Prometheus rules WahookQualityErrors,
// WahookThroughputErrors, WahookNumbersAtStop), with no number label, so
// the alerts that name the number are Grafana alert rules on ClickHouse,
// over the last 15 minutes of failures_by_minute, one alert instance per
// number. Their names say "Number" so that the two kinds, routed to one
// Alertmanager, neither group nor silence together.

// alertWindow is the range each rule reads, in seconds.
const alertWindow = 15 * 60

// errorsBy is the SQL of the failures of the last window per number whose
// code's class (or class's verdict) is one of values.
func errorsBy(column string, values ...string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	return `SELECT phone_number_id, toFloat64(uniqExactMerge(error_keys)) AS failures
FROM
(
    SELECT phone_number_id,
           ` + classExpr("code") + ` AS class,
           ` + verdictExpr("class") + ` AS verdict,
           error_keys
    FROM failures_by_minute
    WHERE minute >= $__fromTime AND minute < $__toTime
)
WHERE ` + column + ` IN (` + strings.Join(quoted, ", ") + `)
GROUP BY phone_number_id
ORDER BY phone_number_id`
}

func codesOf(class schema.ErrorClass) string {
	var codes []string
	for _, c := range schema.ErrorCodes() {
		if c.Class == class {
			codes = append(codes, fmt.Sprint(c.Code))
		}
	}
	return strings.Join(codes, ", ")
}

type alertSpec struct {
	uid, title, sql, summary, description, severity, forArg string
	above                                                   float64
}

var alertSpecs = []alertSpec{
	{
		uid: "wahook-quality-errors", title: "WahookNumberQualityErrors", severity: "critical", forArg: "0s", above: 0,
		sql:         errorsBy("class", string(schema.ClassQuality)),
		summary:     "Number {{ $labels.phone_number_id }}: {{ $values.A }} quality errors (" + codesOf(schema.ClassQuality) + ") in 15 minutes",
		description: "Meta limits the number for spam or quality; the verdict is stop: pause its campaigns and look at its templates and opt-ins.",
	},
	{
		uid: "wahook-throughput-errors", title: "WahookNumberThroughputErrors", severity: "warning", forArg: "5m", above: 10,
		sql:         errorsBy("class", string(schema.ClassThroughput)),
		summary:     "Number {{ $labels.phone_number_id }}: {{ $values.A }} throughput errors (" + codesOf(schema.ClassThroughput) + ") in 15 minutes",
		description: "The number sends faster than its tier: its verdict is slow_down. Senders that follow wahook_pacing's recommended rate should not see these.",
	},
	{
		uid: "wahook-numbers-stop", title: "WahookNumberStopErrors", severity: "critical", forArg: "0s", above: 0,
		sql:         errorsBy("verdict", string(schema.VerdictStop)),
		summary:     "Number {{ $labels.phone_number_id }}: {{ $values.A }} errors with the verdict stop in 15 minutes",
		description: "Errors whose verdict is stop (" + classesOf(schema.VerdictStop) + "): stop sending from the number; wahook_pacing carries its advice.",
	},
	{
		uid: "wahook-numbers-slow-down", title: "WahookNumberSlowDownErrors", severity: "warning", forArg: "5m", above: 10,
		sql:         errorsBy("verdict", string(schema.VerdictSlowDown)),
		summary:     "Number {{ $labels.phone_number_id }}: {{ $values.A }} errors with the verdict slow_down in 15 minutes",
		description: "Errors whose verdict is slow_down: the number should queue and send slower; wahook_pacing carries its recommended rate.",
	},
}

// classesOf lists the error classes whose verdict is v, in the catalogue's
// order.
func classesOf(v schema.Verdict) string {
	var out []string
	for _, c := range schema.ErrorClasses() {
		if schema.ClassVerdict(c) == v {
			out = append(out, string(c))
		}
	}
	return strings.Join(out, ", ")
}

// AlertRuleSQL is the SQL of each ClickHouse alert rule, by title.
func AlertRuleSQL() map[string]string {
	out := map[string]string{}
	for _, s := range alertSpecs {
		out[s.title] = s.sql
	}
	return out
}

// alertGroup is the rules' group and the Grafana folder they are in.
const alertGroup, alertFolder = "wahook-clickhouse", "wahook"

func alertRule(s alertSpec) *alerting.RuleBuilder {
	window := alerting.Duration(alertWindow)
	query := alerting.NewQueryBuilder("A").
		DatasourceUid(ClickHouseUID).
		RelativeTimeRange(window, 0).
		Model(chQuery("A", FormatTable, s.sql))
	threshold := alerting.NewQueryBuilder("B").
		DatasourceUid("__expr__").
		Model(expr.NewExprBuilder().TypeThreshold(expr.NewTypeThresholdBuilder().
			RefId("B").
			Expression("A").
			Conditions([]cog.Builder[expr.ExprTypeThresholdConditions]{
				expr.NewExprTypeThresholdConditionsBuilder().Evaluator(
					expr.NewExprTypeThresholdConditionsEvaluatorBuilder().
						Type(expr.ExprTypeThresholdConditionsEvaluatorTypeGt).
						Params([]float64{s.above})),
			})))
	return alerting.NewRuleBuilder(s.title).
		Uid(s.uid).
		OrgID(1).
		RuleGroup(alertGroup).
		Condition("B").
		WithQuery(query).
		WithQuery(threshold).
		For(s.forArg).
		NoDataState(alerting.RuleNoDataStateOK).
		ExecErrState(alerting.RuleExecErrStateError).
		Labels(map[string]string{"severity": s.severity, "service": "wahook"}).
		Annotations(map[string]string{"summary": s.summary, "description": s.description})
}

// provisioningFile is Grafana's file format for alert rules
// (provisioning/alerting): groups of rules, each rule as the SDK builds it.
type provisioningFile struct {
	APIVersion int                 `json:"apiVersion"`
	Groups     []provisioningGroup `json:"groups"`
}

type provisioningGroup struct {
	OrgID    int64           `json:"orgId"`
	Name     string          `json:"name"`
	Folder   string          `json:"folder"`
	Interval string          `json:"interval"`
	Rules    []alerting.Rule `json:"rules"`
}

// AlertRules is deploy/grafana/provisioning/alerting/wahook-clickhouse.json.
func AlertRules() ([]byte, error) {
	g := provisioningGroup{OrgID: 1, Name: alertGroup, Folder: alertFolder, Interval: "1m"}
	for _, s := range alertSpecs {
		r, err := alertRule(s).Build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.title, err)
		}
		g.Rules = append(g.Rules, r)
	}
	b, err := json.MarshalIndent(provisioningFile{APIVersion: 1, Groups: []provisioningGroup{g}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

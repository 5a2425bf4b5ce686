// Package dashboards builds wahook's Grafana dashboards with the Grafana
// foundation SDK: the service on Prometheus, the business on ClickHouse.
// cmd/dashgen writes them to deploy/grafana/dashboards; the tests check that
// the committed JSON is what this package builds, that every metric they name
// is one wahook exports and that every SQL query runs.
package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The datasource uids the dashboards refer to; deploy/grafana/provisioning
// defines them.
const (
	PrometheusUID = "prometheus"
	ClickHouseUID = "clickhouse"
)

// MetaLatencyBar is Meta's bar for a webhook's answer, in seconds.
const MetaLatencyBar = 0.25

func promDS() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr(PrometheusUID)}
}

func clickHouseDS() *common.DataSourceRef {
	return &common.DataSourceRef{Type: cog.ToPtr(ClickHouseType), Uid: cog.ToPtr(ClickHouseUID)}
}

func prom(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(promDS()).Expr(expr).LegendFormat(legend).Range()
}

func series(title, unit string, targets ...cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Unit(unit).Height(8).Span(12).
		FillOpacity(10).LineWidth(1)
	for _, t := range targets {
		p = p.WithTarget(t)
	}
	return p
}

// Files are the generated files by path under deploy/grafana: the
// dashboards and the ClickHouse alert rules.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, build := range map[string]func() (dashboard.Dashboard, error){
		"wahook-service.json":  Service,
		"wahook-business.json": Business,
	} {
		d, err := build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		numberPanels(&d)
		b, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out["dashboards/"+name] = append(b, '\n')
	}
	rules, err := AlertRules()
	if err != nil {
		return nil, err
	}
	out["provisioning/alerting/wahook-clickhouse.json"] = rules
	return out, nil
}

// Service is the dashboard of the running service, on Prometheus.
func Service() (dashboard.Dashboard, error) {
	rate := "$__rate_interval"
	b := dashboard.NewDashboardBuilder("wahook: service").
		Uid("wahook-service").
		Tags([]string{"wahook"}).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone("utc").
		WithRow(dashboard.NewRowBuilder("Ingest: Meta's webhooks")).
		WithPanel(series("Webhook POSTs by result", "reqps",
			prom("sum by (result) (rate(wahook_ingest_requests_total["+rate+"]))", "{{result}}"))).
		WithPanel(series("Answer latency against Meta's 250 ms bar", "s",
			prom("histogram_quantile(0.99, sum by (le) (rate(wahook_ingest_request_duration_seconds_bucket["+rate+"])))", "p99"),
			prom("histogram_quantile(0.5, sum by (le) (rate(wahook_ingest_request_duration_seconds_bucket["+rate+"])))", "p50"),
			prom("histogram_quantile(0.99, sum by (le) (rate(wahook_ingest_publish_duration_seconds_bucket["+rate+"])))", "JetStream ack p99")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Color: "green"}, {Value: cog.ToPtr(MetaLatencyBar), Color: "red"},
			})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine))).
		WithPanel(series("Answers: 2xx, 4xx, 503", "reqps",
			prom(`sum(rate(wahook_ingest_requests_total{result=~"ok|duplicate"}[`+rate+`]))`, "2xx"),
			prom(`sum(rate(wahook_ingest_requests_total{result=~"bad_signature|unknown_app|too_large|bad_encoding|incomplete"}[`+rate+`]))`, "4xx"),
			prom(`sum(rate(wahook_ingest_requests_total{result=~"unavailable|shed"}[`+rate+`]))`, "503"))).
		WithPanel(series("Signature failures by app and reason", "reqps",
			prom("sum by (app, reason) (rate(wahook_ingest_signature_failures_total["+rate+"]))", "{{app}} {{reason}}"))).
		WithRow(dashboard.NewRowBuilder("Stages: ClickHouse, EVENTS, pacing, funnel")).
		WithPanel(series("Stage 1: bodies stored vs written (lag grows while stored > written)", "ops",
			prom(`sum(rate(wahook_ingest_requests_total{result="ok"}[`+rate+`]))`, "stored in WAHOOK_RAW"),
			prom("sum(rate(wahook_processor_bodies_total["+rate+"]))", "written by stage 1"))).
		WithPanel(series("ClickHouse rows written by table", "rowsps",
			prom("sum by (table) (rate(wahook_processor_rows_total["+rate+"]))", "{{table}}"))).
		WithPanel(series("ClickHouse writes: failures and batch time", "short",
			prom("sum(rate(wahook_processor_write_failures_total["+rate+"]))", "failed batches/s"),
			prom("histogram_quantile(0.99, sum by (le) (rate(wahook_processor_flush_duration_seconds_bucket["+rate+"])))", "batch write p99 (s)"),
			prom("sum(rate(wahook_processor_dead_letters_total["+rate+"]))", "dead letters/s"))).
		WithPanel(series("Funnel lag and stage 2 events", "short",
			prom("max(wahook_funnel_lag_seconds)", "funnel lag (s)"),
			prom("sum by (result) (rate(wahook_stage2_events_total["+rate+"]))", "stage 2 {{result}}/s"),
			prom("sum(rate(wahook_stage2_signals_published_total["+rate+"]))", "pacing signals/s"))).
		// A stage 2 start or handover reads the message memory back; one
		// that failed or read part leaves the signal high for up to
		// --stage2-message-memory.
		WithPanel(series("Stage 2: message memory read back at starts and handovers", "short",
			prom("sum by (outcome) (increase(wahook_stage2_memory_warmups_total["+rate+"]))", "read-backs {{outcome}}"),
			prom("sum(increase(wahook_stage2_memory_warmed_messages_total["+rate+"]))", "messages remembered"))).
		// Meta's bans and restrictions of WABAs: every stage 2 instance
		// counts the whole bucket, so the max is the count.
		WithPanel(series("WABAs banned or restricted by Meta (wahook_accounts)", "short",
			prom("max by (state) (wahook_stage2_wabas)", "{{state}}"),
			prom("sum by (result) (increase(wahook_stage2_account_events_total["+rate+"]))", "account events {{result}}"))).
		WithRow(dashboard.NewRowBuilder("Query API and memory")).
		WithPanel(series("Query API by status, and 429s by limit", "reqps",
			prom("sum by (status) (rate(wahook_api_requests_total["+rate+"]))", "{{status}}"),
			prom("sum by (limit) (rate(wahook_api_rate_limited_total["+rate+"]))", "429 {{limit}}"))).
		WithPanel(series("Memory by instance", "bytes",
			prom("process_resident_memory_bytes"+wahookTargets, "RSS {{instance}}"),
			prom("go_memstats_heap_inuse_bytes"+wahookTargets, "heap {{instance}}"),
			prom("wahook_ingest_dedupe_bytes", "duplicate index {{instance}}")))
	return b.Build()
}

// wahookTargets keeps, of a metric every Go program exports (process_*,
// go_*), the series of the scrape targets that export a wahook_ metric: on a
// Prometheus shared with other services the panel shows wahook's processes
// only, whatever their jobs are named (compose's wahook-ingest, the chart's
// ingest, ...).
const wahookTargets = ` and on (job, instance) group by (job, instance) ({__name__=~"wahook_.+"})`

// numberPanels gives every row and panel its own id, in order.
func numberPanels(d *dashboard.Dashboard) {
	var id uint32
	for _, p := range d.Panels {
		id++
		switch {
		case p.Panel != nil:
			p.Panel.Id = cog.ToPtr(id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
}

package dashboards

import (
	"reflect"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
)

// ClickHouseFormat is the grafana-clickhouse-datasource plugin's result
// format: how a query's rows become frames.
type ClickHouseFormat int

// The formats the dashboards use.
const (
	FormatTimeSeries ClickHouseFormat = 0
	FormatTable      ClickHouseFormat = 1
)

// ClickHouseQuery is a raw-SQL query of the grafana-clickhouse-datasource
// plugin. The foundation SDK has no type for that plugin; this one is typed
// the same way as its own, so a panel's query is a value of known fields.
type ClickHouseQuery struct {
	RefID      string                `json:"refId"`
	Datasource *common.DataSourceRef `json:"datasource,omitempty"`
	EditorType string                `json:"editorType"`
	QueryType  string                `json:"queryType"`
	Format     ClickHouseFormat      `json:"format"`
	RawSQL     string                `json:"rawSql"`
}

// ImplementsDataqueryVariant marks ClickHouseQuery as a panel target.
func (ClickHouseQuery) ImplementsDataqueryVariant() {}

// DataqueryType is the plugin's id.
func (ClickHouseQuery) DataqueryType() string { return ClickHouseType }

// Validate is nil: the SQL is checked by running it (deploy/tools tests).
func (ClickHouseQuery) Validate() error { return nil }

// Equals compares two targets.
func (q ClickHouseQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(ClickHouseQuery)
	return ok && reflect.DeepEqual(q, o)
}

// ClickHouseType is the plugin id of Grafana's ClickHouse datasource.
const ClickHouseType = "grafana-clickhouse-datasource"

// clickHouseQueryBuilder builds a ClickHouseQuery for a panel.
type clickHouseQueryBuilder struct{ q ClickHouseQuery }

var _ cog.Builder[variants.Dataquery] = (*clickHouseQueryBuilder)(nil)

func (b *clickHouseQueryBuilder) Build() (variants.Dataquery, error) { return b.q, nil }

// chQuery is a raw-SQL target on the ClickHouse datasource.
func chQuery(refID string, format ClickHouseFormat, sql string) *clickHouseQueryBuilder {
	qt := "timeseries"
	if format == FormatTable {
		qt = "table"
	}
	return &clickHouseQueryBuilder{q: ClickHouseQuery{
		RefID: refID, Datasource: clickHouseDS(), EditorType: "sql", QueryType: qt, Format: format, RawSQL: sql,
	}}
}

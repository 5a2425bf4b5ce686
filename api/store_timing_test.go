package api_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// BenchmarkReports times each report over one day of generated traffic in
// a real ClickHouse: WAHOOK_BENCH_STATUS_EVENTS status events (default
// 1,000,000; the bar is for 10,000,000) for a third as many
// messages (sent, delivered, read; one in 33 failed with one of five
// codes), 50 numbers, 5 WABAs, 100 campaigns, 20 templates, the errors of
// the failed statuses and one inbound message per three outbound. The data
// is generated inside ClickHouse (INSERT ... SELECT FROM system.numbers), so
// the materialized views fill as they do from stage 1.
//
//	WAHOOK_BENCH_STATUS_EVENTS=10000000 go test -run x -bench Reports -benchtime 5x ./api
func BenchmarkReports(b *testing.B) {
	events := 1_000_000
	if v := os.Getenv("WAHOOK_BENCH_STATUS_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 {
			b.Fatalf("WAHOOK_BENCH_STATUS_EVENTS=%q", v)
		}
		events = n
	}
	ctx := context.Background()
	ch := schematest.ClickHouse(b)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for _, q := range generateSQL(ch.Database, events/3) {
		if err := ch.Conn.Exec(ctx, q); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}
	b.Logf("generated %d status events in %v", events, time.Since(start).Round(time.Millisecond))
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	day := "from=2026-03-14T00:00:00Z&to=2026-03-15T00:00:00Z"
	for _, r := range []struct{ name, report, params string }{
		{"errors_by_code", "errors", day},
		{"errors_by_code_number_campaign_hourly", "errors", day + "&group_by=code,number,campaign&step=1h"},
		{"errors_by_class_one_waba", "errors", day + "&group_by=class&waba_id=waba-3"},
		{"funnel_by_campaign", "funnel", day},
		{"funnel_one_number", "funnel", day + "&by=template&phone_number_id=106540352210007"},
		{"throughput_one_number_per_minute", "throughput", day + "&phone_number_id=106540352210007&step=1m"},
		{"numbers", "numbers", day},
		{"dead_letters", "dead-letters", day},
	} {
		values, err := url.ParseQuery(r.params)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(r.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := api.Run(ctx, store, r.report, values, start); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// generateSQL is the data set of BenchmarkReports: m messages over
// 2026-03-14 (UTC).
func generateSQL(db string, m int) []string {
	return []string{
		fmt.Sprintf(`INSERT INTO %[1]s.status_events (event_id, event_time, waba_id, phone_number_id, message_id, status,
    recipient_hash, error_codes, pricing_category, campaign, template, received_at)
SELECT
    concat(toString(m), '-', toString(s)),
    toDateTime('2026-03-14 00:00:00') + intDiv(m * 86400, %[2]d) + s * (1 + m %% 7),
    concat('waba-', toString(m %% 5)),
    concat('1065403522', toString(10000 + m %% 50)),
    concat('wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI', toString(m)),
    if(m %% 33 = 0 AND s > 0, 'failed', arrayElement(['sent', 'delivered', 'read'], s + 1)),
    hex(sipHash64(m %% 1000003)),
    if(m %% 33 = 0 AND s > 0, [toInt32(arrayElement([131026, 131049, 130429, 131048, 131056], (m %% 5) + 1))], emptyArrayInt32()),
    'marketing',
    concat('campaign-', toString(m %% 100)),
    concat('tpl_', toString(m %% 20)),
    toDateTime('2026-03-15 00:00:00')
FROM (SELECT number AS m FROM system.numbers LIMIT %[2]d) ARRAY JOIN [0, 1, 2] AS s`, db, m),
		fmt.Sprintf(`INSERT INTO %[1]s.errors (event_id, error_index, origin, event_time, waba_id, phone_number_id, message_id,
    recipient_hash, code, title, campaign, template, received_at)
SELECT event_id, 0, 'status', event_time, waba_id, phone_number_id, message_id, recipient_hash, error_codes[1], 'generated',
    campaign, template, received_at
FROM %[1]s.status_events WHERE status = 'failed'`, db),
		fmt.Sprintf(`INSERT INTO %[1]s.inbound_messages (event_id, event_time, waba_id, phone_number_id, message_id, type, from_hash, received_at)
SELECT concat('in-', toString(k)), toDateTime('2026-03-14 00:00:00') + intDiv(k * 86400, %[2]d),
    concat('waba-', toString(k %% 5)), concat('1065403522', toString(10000 + k %% 50)),
    concat('wamid.IN', toString(k)), 'text', hex(sipHash64(k %% 1000003)), toDateTime('2026-03-15 00:00:00')
FROM (SELECT number AS k FROM system.numbers LIMIT %[2]d)`, db, max(m/3, 1)),
	}
}

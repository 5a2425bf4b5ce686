package api_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// BenchmarkReports times each report over one day (yesterday) of generated traffic in
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
	start := time.Now() // the reports' "now"
	ch, day := generatedDay(b, events)
	// Reports are timed once ClickHouse has merged what was just written,
	// as it would have a day later, not while merges take the cores.
	settle := func() { settleMerges(b, ch) }
	settle()
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	dayParams := "from=" + day.Format(time.RFC3339) + "&to=" + day.AddDate(0, 0, 1).Format(time.RFC3339)
	byCampaign, err := url.ParseQuery(dayParams)
	if err != nil {
		b.Fatal(err)
	}
	// The baseline: the funnel before the resolver's first pass, resolved
	// at query time (what every funnel cost before the resolver).
	b.Run("funnel_by_campaign_at_query_time", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			f, err := api.Run(ctx, store, "funnel", byCampaign, start)
			if err != nil {
				b.Fatal(err)
			}
			if f.(*api.Funnel).AsOf != nil {
				b.Fatal("resolved already")
			}
		}
	})
	// The resolver's first pass resolves every message; the next one
	// rereads the last seconds of the generation (its slack).
	resolver := funnel.New(funnel.DefaultConfig(), ch.Conn, ch.Database, nil, zap.NewNop())
	for i := range 2 {
		start := time.Now()
		st, err := resolver.Pass(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("funnel pass %d: %+v in %v", i+1, st, time.Since(start).Round(time.Millisecond))
	}
	settle()
	for _, r := range []struct{ name, report, params string }{
		{"errors_by_code", "errors", dayParams},
		{"errors_by_code_number_campaign_hourly", "errors", dayParams + "&group_by=code,number,campaign&step=1h"},
		{"errors_by_class_one_waba", "errors", dayParams + "&group_by=class&waba_id=waba-3"},
		{"funnel_by_campaign", "funnel", dayParams},
		// Ends in parts of hours (10:17:23 to 10:17:23 the next day), read
		// from the message rows of their days.
		{"funnel_by_campaign_not_on_the_hour", "funnel", "from=" + day.Add(37043*time.Second).Format(time.RFC3339) +
			"&to=" + day.AddDate(0, 0, 1).Add(37043*time.Second).Format(time.RFC3339)},
		{"funnel_one_number", "funnel", dayParams + "&by=template&phone_number_id=106540352210007"},
		{"throughput_one_number_per_minute", "throughput", dayParams + "&phone_number_id=106540352210007&step=1m"},
		// The dashboard's number page: the day's last 15 minutes per second.
		{"throughput_one_number_per_second_15_minutes", "throughput", "from=" + day.AddDate(0, 0, 1).Add(-15*time.Minute).Format(time.RFC3339) +
			"&to=" + day.AddDate(0, 0, 1).Format(time.RFC3339) + "&phone_number_id=106540352210007&step=1s"},
		{"numbers", "numbers", dayParams},
		{"dead_letters", "dead-letters", dayParams},
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
	// A resolver pass after WAHOOK_BENCH_TOUCHED (default 1,000) messages
	// of the day got a status each, as over a few seconds of traffic: a
	// sent stamped at the day's start, which moves each message's first
	// status and durations, so that every one of them is rewritten.
	touched := 1000
	if v := os.Getenv("WAHOOK_BENCH_TOUCHED"); v != "" {
		var err error
		if touched, err = strconv.Atoi(v); err != nil {
			b.Fatalf("WAHOOK_BENCH_TOUCHED=%q", v)
		}
	}
	// Each pass also rereads what the passes of the last 5 s (the slack)
	// read: messages_per_pass says how many message states a pass read.
	b.Run(fmt.Sprintf("funnel_pass_%d_touched", touched), func(b *testing.B) {
		var read, changed int
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			// Messages spread over the day, each pass others.
			q := fmt.Sprintf(`INSERT INTO %[1]s.status_events (event_id, event_time, waba_id, phone_number_id, message_id, status, recipient_hash, campaign, template, received_at)
SELECT concat('early-', toString(m)), toDateTime('DAY0'), concat('waba-', toString(m %% 5)), concat('1065403522', toString(10000 + m %% 50)),
    concat('wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI', toString(m)), 'sent', hex(sipHash64(m %% 1000003)),
    concat('campaign-', toString(m %% 100)), concat('tpl_', toString(m %% 20)), toDateTime('DAY1')
FROM (SELECT (%[2]d + number * 7919) %% %[3]d AS m FROM system.numbers LIMIT %[4]d)`, ch.Database, i*touched*7919, events/3, touched)
			q = strings.NewReplacer("DAY0", day.Format(time.DateTime), "DAY1", day.AddDate(0, 0, 1).Format(time.DateTime)).Replace(q)
			if err := ch.Conn.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			st, err := resolver.Pass(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			read, changed = read+st.Messages, changed+st.Changed
		}
		b.ReportMetric(float64(read)/float64(b.N), "messages_per_pass")
		b.ReportMetric(float64(changed)/float64(b.N), "changed_per_pass")
	})
}

// generateSQL is the data set of BenchmarkReports: m messages over
// day (UTC), yesterday when the benchmark runs, so that late statuses
// arrive about a day after the first, as they would.
func generateSQL(db string, m int, day time.Time) []string {
	days := strings.NewReplacer("DAY0", day.Format(time.DateTime), "DAY1", day.AddDate(0, 0, 1).Format(time.DateTime))
	q := []string{
		fmt.Sprintf(`INSERT INTO %[1]s.status_events (event_id, event_time, waba_id, phone_number_id, message_id, status,
    recipient_hash, error_codes, pricing_category, campaign, template, received_at)
SELECT
    concat(toString(m), '-', toString(s)),
    toDateTime('DAY0') + intDiv(m * 86400, %[2]d) + s * (1 + m %% 7),
    concat('waba-', toString(m %% 5)),
    concat('1065403522', toString(10000 + m %% 50)),
    concat('wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI', toString(m)),
    if(m %% 33 = 0 AND s > 0, 'failed', arrayElement(['sent', 'delivered', 'read'], s + 1)),
    hex(sipHash64(m %% 1000003)),
    if(m %% 33 = 0 AND s > 0, [toInt32(arrayElement([131026, 131049, 130429, 131048, 131056], (m %% 5) + 1))], emptyArrayInt32()),
    'marketing',
    concat('campaign-', toString(m %% 100)),
    concat('tpl_', toString(m %% 20)),
    toDateTime('DAY1')
FROM (SELECT number AS m FROM system.numbers LIMIT %[2]d) ARRAY JOIN [0, 1, 2] AS s`, db, m),
		fmt.Sprintf(`INSERT INTO %[1]s.errors (event_id, error_index, origin, event_time, waba_id, phone_number_id, message_id,
    recipient_hash, code, title, campaign, template, received_at)
SELECT event_id, 0, 'status', event_time, waba_id, phone_number_id, message_id, recipient_hash, error_codes[1], 'generated',
    campaign, template, received_at
FROM %[1]s.status_events WHERE status = 'failed'`, db),
		fmt.Sprintf(`INSERT INTO %[1]s.inbound_messages (event_id, event_time, waba_id, phone_number_id, message_id, type, from_hash, received_at)
SELECT concat('in-', toString(k)), toDateTime('DAY0') + intDiv(k * 86400, %[2]d),
    concat('waba-', toString(k %% 5)), concat('1065403522', toString(10000 + k %% 50)),
    concat('wamid.IN', toString(k)), 'text', hex(sipHash64(k %% 1000003)), toDateTime('DAY1')
FROM (SELECT number AS k FROM system.numbers LIMIT %[2]d)`, db, max(m/3, 1)),
	}
	for i := range q {
		q[i] = days.Replace(q[i])
	}
	return q
}

// generatedDay is a fresh, migrated database holding yesterday (UTC) with
// about events status events of generateSQL's traffic, and that day.
func generatedDay(tb testing.TB, events int) (*schematest.ClickHouseDB, time.Time) {
	tb.Helper()
	ctx := context.Background()
	ch := schematest.ClickHouse(tb)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	day := start.UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	for _, q := range generateSQL(ch.Database, events/3, day) {
		if err := ch.Conn.Exec(ctx, q); err != nil {
			tb.Fatalf("%v\n%s", err, q)
		}
	}
	tb.Logf("generated %d status events in %v", events, time.Since(start).Round(time.Millisecond))
	return ch, day
}

// settleMerges waits until ClickHouse has merged what was just written: no
// merge in the database for 10 s, or 10 minutes passed.
func settleMerges(tb testing.TB, ch *schematest.ClickHouseDB) {
	tb.Helper()
	at := time.Now()
	quietSince := at
	testutil.Poll(10*time.Minute, func() bool {
		var merging uint64
		if err := ch.Conn.QueryRow(context.Background(), "SELECT count() FROM system.merges WHERE database = ?", ch.Database).Scan(&merging); err != nil {
			tb.Fatal(err)
		}
		if merging > 0 {
			quietSince = time.Now()
		}
		return time.Since(quietSince) >= 10*time.Second
	})
	tb.Logf("merges settled in %v", time.Since(at).Round(time.Second))
}

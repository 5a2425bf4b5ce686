package funnel_test

import (
	"context"
	"fmt"
	"hash/maphash"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"

	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// BenchmarkPassOnFilledTable is what a pass costs ClickHouse as
// message_states grows: on a fresh table (messages=0) and on one
// filled beforehand with the messages of months (WAHOOK_BENCH_FUNNEL_MESSAGES,
// 2,000,000 by default), each pass resolving WAHOOK_BENCH_FUNNEL_TOUCHED
// new messages (3,000 by default: five seconds at 600 webhooks/s) spread
// over the same key range. It reports ClickHouse's CPU for the pass's
// queries that read (system.query_log; its inserts into funnel_messages
// are not counted), per pass and per message read, and the pass's time;
// the benchmark's own loop, posting the statuses, is not timed.
//
//	go test ./processor/funnel -run '^$' -bench PassOnFilledTable -benchtime 10x
func BenchmarkPassOnFilledTable(b *testing.B) {
	filled := benchEnv(b, "WAHOOK_BENCH_FUNNEL_MESSAGES", 2_000_000)
	touched := benchEnv(b, "WAHOOK_BENCH_FUNNEL_TOUCHED", 3_000)
	for _, n := range []int{0, filled} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) { benchPass(b, n, touched) })
	}
}

func benchEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func benchPass(b *testing.B, filled, touched int) {
	ctx := context.Background()
	ch := schematest.ClickHouse(b)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		b.Fatal(err)
	}
	// The messages of months: one 'sent' each, a day apart at most, ids
	// spread over the key range like Meta's.
	for from := 0; from < filled; from += 1_000_000 {
		q := fmt.Sprintf(`INSERT INTO %s.message_states (phone_number_id, message_id, recipient_key, month, waba_id, campaign, template,
    sent_at, delivered_at, read_at, played_at, failed_at, failed)
SELECT 'p1', concat('wamid.', hex(sipHash64(number))), hex(sipHash64(number, 1)), toDate('2026-02-01'),
       maxState('waba-1'), maxState(concat('campaign-', toString(number %% 1000))), maxState('t1'),
       minIfState(toDateTime('2026-02-01 00:00:00') + number %% 86400, toUInt8(1)),
       minIfState(toDateTime(0), toUInt8(0)), minIfState(toDateTime(0), toUInt8(0)),
       minIfState(toDateTime(0), toUInt8(0)), minIfState(toDateTime(0), toUInt8(0)), maxState(toUInt8(0))
FROM numbers(%d, %d) GROUP BY number`, ch.Database, from, min(1_000_000, filled-from))
		if err := ch.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_memory_usage": 8 << 30})), q); err != nil {
			b.Fatal(err)
		}
	}
	// The resolver's own connection logs its queries (a pass sets its own
	// settings on its queries, so a context's would not last).
	logged, err := clickhouse.Open(&clickhouse.Options{
		Addr: []string{ch.Addr}, Auth: clickhouse.Auth{Database: ch.Database, Username: "default"},
		Settings: clickhouse.Settings{"log_queries": 1},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = logged.Close() })
	r := funnel.New(funnel.DefaultConfig(), logged, ch.Database, nil, zap.NewNop())
	setWatermark(b, ch, time.Now()) // no backfill: the filled messages are resolved already, as far as this is concerned
	w := chwriter.New(ch.Conn, ch.Database)
	seed := maphash.MakeSeed()
	var started time.Time
	if err := ch.Conn.QueryRow(ctx, "SELECT now()").Scan(&started); err != nil {
		b.Fatal(err)
	}
	messages := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// Only this round's messages are touched: the last pass resolved
		// the others, and its slack would have this one read them again.
		if err := ch.Conn.Exec(ctx, "TRUNCATE TABLE "+ch.Database+".funnel_touched"); err != nil {
			b.Fatal(err)
		}
		var rows schema.Rows
		at := time.Now().UTC().Truncate(time.Second)
		for j := range touched {
			id := fmt.Sprintf("wamid.%016X", maphash.String(seed, fmt.Sprint(i, j)))
			rows.Statuses = append(rows.Statuses, schema.StatusRow{
				Source:  schema.Source{App: "default", ReceivedAt: at},
				EventID: id + "/sent", EventTime: at, WabaID: "waba-1", PhoneNumberID: "p1", MessageID: id,
				Status: "sent", RecipientHash: fmt.Sprintf("%016X", maphash.String(seed, id)), Campaign: "campaign-7",
			})
		}
		if err := w.Write(ctx, &rows); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, err := r.Pass(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		messages += st.Messages
	}
	b.StopTimer()
	if err := ch.Conn.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		b.Fatal(err)
	}
	var cpuUs uint64
	if err := ch.Conn.QueryRow(ctx, `SELECT toUInt64(sum(ProfileEvents.Values[indexOf(ProfileEvents.Names, 'UserTimeMicroseconds')]
    + ProfileEvents.Values[indexOf(ProfileEvents.Names, 'SystemTimeMicroseconds')]))
FROM system.query_log
WHERE type = 2 AND event_time >= ? AND position(query, ?) > 0 AND query NOT LIKE 'INSERT%'`,
		started, ch.Database+".").Scan(&cpuUs); err != nil {
		b.Fatal(err)
	}
	if cpuUs == 0 {
		b.Fatal("no CPU logged for the passes' queries: query_log off?")
	}
	b.ReportMetric(float64(cpuUs)/1e3/float64(b.N), "ch-cpu-ms/pass")
	b.ReportMetric(float64(cpuUs)/float64(max(messages, 1)), "ch-cpu-µs/message")
}

package chwriter

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/schema"
)

// benchRows returns n statuses of n/3 messages (sent, delivered, read), a
// tenth of them failed with one error each, as a busy number produces them.
func benchRows(n int) *schema.Rows {
	rows := &schema.Rows{Statuses: make([]schema.StatusRow, 0, n), Errors: make([]schema.ErrorRow, 0, n/10+1)}
	steps := []string{"sent", "delivered", "read"}
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf("wamid.HBgLMTU1NTA3ODM4ODEVAgARGBI%016X", i/3)
		recipient := schema.EventID(schema.KindStatus, "recipient", fmt.Sprint(i/3))
		at := base.Add(time.Duration(i) * 10 * time.Millisecond)
		if i%10 == 9 {
			r := status(msg, recipient, "", "failed", at, 131026)
			r.Campaign = "spring_sale"
			rows.Statuses = append(rows.Statuses, r)
			rows.Errors = append(rows.Errors, failure(r, 0, 131026))
			continue
		}
		r := status(msg, recipient, "", steps[i%3], at)
		r.Campaign = "spring_sale"
		r.PricingBillable, r.PricingModel, r.PricingType, r.PricingCategory = 1, "PMP", "regular", "marketing"
		rows.Statuses = append(rows.Statuses, r)
	}
	return rows
}

// BenchmarkWrite inserts batches of statuses and their errors, each case
// into a fresh database. The rows of every iteration are the same, as for a
// redelivered batch: the inserts and the materialized views do the same work
// either way. The "rowwise" case is the baseline: the same INSERTs with
// batch.Append per row, the driver's usual path, which converts every value
// through any. The server runs on the same machine, so the figures include
// its work (and its background merges).
//
//	go test ./processor/chwriter -run '^$' -bench Write -benchtime 20x -count 5
//
// On a 2-vCPU VM with Debian's 18.16 on the same machine (medians of 5), per
// batch of 50,000 statuses and 5,000 errors: columns with blocks of 10,000
// rows 185k rows/s, 63 client-ms/op, 38 MB/op, 12k allocs/op; one block of
// 100,000: 169k rows/s, 110 client-ms/op, 161 MB/op; rowwise: 155k rows/s,
// 146 client-ms/op, 195 MB/op, 877k allocs/op. The wall time is mostly the
// server's: about 100 ms per INSERT with materialized views even for a few
// rows, so small batches are slow (5,000 statuses: 42k rows/s).
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{5_000, 50_000} {
		rows := benchRows(n)
		for _, block := range []int{DefaultConfig().BlockRows, 100_000} {
			b.Run(fmt.Sprintf("columns/statuses=%d/block=%d", n, block), func(b *testing.B) {
				w, _ := newWriter(b, WithBlockRows(block))
				benchLoop(b, rows, func() error { return w.Write(context.Background(), rows) })
			})
		}
		b.Run(fmt.Sprintf("rowwise/statuses=%d", n), func(b *testing.B) {
			_, ch := newWriter(b)
			benchLoop(b, rows, func() error { return writeRowwise(context.Background(), ch.Conn, ch.Database, rows) })
		})
	}
}

// benchLoop reports rows/s and the CPU time of this process per op
// (client-ms/op): the writer's own cost, apart from the server's.
func benchLoop(b *testing.B, rows *schema.Rows, write func() error) {
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	start := time.Now()
	for b.Loop() {
		if err := write(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(rows.Len()*b.N)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/float64(b.N), "client-ms/op")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func writeRowwise(ctx context.Context, conn driver.Conn, database string, rows *schema.Rows) error {
	batch, err := conn.PrepareBatch(ctx, insertQuery(database, &statusEvents))
	if err != nil {
		return err
	}
	for i := range rows.Statuses {
		r := &rows.Statuses[i]
		if err := batch.Append(r.EventID, r.EventTime, r.WabaID, r.PhoneNumberID, r.DisplayPhoneNumber, r.MessageID,
			r.Status, r.RecipientHash, r.RecipientUserHash, r.RecipientType, r.GroupID, r.ParticipantHash, r.ErrorCodes,
			r.PricingBillable, r.PricingModel, r.PricingType, r.PricingCategory, r.ConversationID, r.ConversationOrigin,
			r.ConversationExpiry, r.Campaign, r.Template, r.Extra, r.ReceivedAt, r.App, r.RawSeq); err != nil {
			_ = batch.Abort()
			return err
		}
	}
	if err := batch.Send(); err != nil {
		return err
	}
	batch, err = conn.PrepareBatch(ctx, insertQuery(database, &errorEvents))
	if err != nil {
		return err
	}
	for i := range rows.Errors {
		r := &rows.Errors[i]
		if err := batch.Append(r.EventID, r.Index, r.Origin, r.EventTime, r.WabaID, r.PhoneNumberID, r.MessageID,
			r.RecipientHash, r.Code, r.Title, r.Message, r.Details, r.Href, r.Campaign, r.Template,
			r.ReceivedAt, r.App, r.RawSeq); err != nil {
			_ = batch.Abort()
			return err
		}
	}
	return batch.Send()
}

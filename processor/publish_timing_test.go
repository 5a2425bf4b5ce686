package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// publishEventsOld is PublishEvents as it was before eventPublisher, kept
// as the baseline of BenchmarkPublishEvents: encoding/json per event, a
// nats.Msg and header map per event, jetstream's PublishMsgAsync, and a
// wait for every ack of each chunk of 4,096 before the next chunk.
func publishEventsOld(ctx context.Context, js jetstream.JetStream, rows *schema.Rows) error {
	const eventsChunk = 4096
	pafs := make([]jetstream.PubAckFuture, 0, eventsChunk)
	waitAcks := func() error {
		for _, paf := range pafs {
			select {
			case <-paf.Ok():
			case err := <-paf.Err():
				return fmt.Errorf("publish %s: %w", paf.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pafs = pafs[:0]
		return nil
	}
	pub := func(number string, k schema.Kind, id string, row any) error {
		data, err := json.Marshal(Event{Kind: k, V: 1, Row: row})
		if err != nil {
			return fmt.Errorf("encode %s event: %w", k, err)
		}
		msg := &nats.Msg{Subject: schema.EventsSubject(number, k), Data: data, Header: nats.Header{schema.HeaderMsgID: []string{id}}}
		paf, err := js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publish %s: %w", msg.Subject, err)
		}
		if pafs = append(pafs, paf); len(pafs) == eventsChunk {
			return waitAcks()
		}
		return nil
	}
	for i := range rows.Statuses {
		r := &rows.Statuses[i]
		if err := pub(r.PhoneNumberID, schema.KindStatus, r.EventID, r); err != nil {
			return err
		}
	}
	for i := range rows.Inbound {
		r := &rows.Inbound[i]
		if err := pub(r.PhoneNumberID, schema.KindInbound, r.EventID, r); err != nil {
			return err
		}
	}
	for i := range rows.Management {
		r := &rows.Management[i]
		if err := pub(r.PhoneNumberID, r.Kind, r.EventID, r); err != nil {
			return err
		}
	}
	return waitAcks()
}

// cpuTime is the CPU time this process has used (user and system); with
// the embedded nats-server in the process, it counts server and client.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublishEvents publishes batches of 50,000 status events (the
// default batch) to WAHOOK_EVENTS on an embedded nats-server with its file
// store, each batch with new event ids so that every one is stored. "old"
// is publishEventsOld; "new" is eventPublisher. Reports events/s and the
// CPU time of the process (client and server) per event.
//
//	go test ./processor -run '^$' -bench PublishEvents -benchtime 10x -count 3
func BenchmarkPublishEvents(b *testing.B) {
	const batch = 50_000
	base := normalizeBody(NewNormalizer(schema.NewHasher(normKey)), manyStatusesBody(1000), normSource(1))
	rows := &schema.Rows{}
	for len(rows.Statuses) < batch {
		rows.Statuses = append(rows.Statuses, base.Statuses...)
	}
	rows.Statuses = rows.Statuses[:batch]
	ids := make([]string, batch)
	for i := range rows.Statuses {
		ids[i] = rows.Statuses[i].EventID[:24]
	}
	round := 0
	renumber := func() { // new ids, as a new batch has
		round++
		for i := range rows.Statuses {
			rows.Statuses[i].EventID = ids[i] + strconv.Itoa(round) + "-" + strconv.Itoa(i)
		}
	}
	for _, impl := range []string{"old", "new"} {
		b.Run(impl, func(b *testing.B) {
			srv := schematest.StartJetStream(b)
			nc, err := nats.Connect(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			// As cmd/wahook sets it up.
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second), jetstream.WithPublishAsyncMaxPending(20000))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := EnsureEventsStream(ctx, js, DefaultEventsConfig(), false); err != nil {
				b.Fatal(err)
			}
			p := newEventPublisher(nc, eventsWindow)
			defer p.close()
			var wall, cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				renumber()
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				if impl == "old" {
					err = publishEventsOld(ctx, js, rows)
				} else {
					err = p.publish(ctx, rows)
				}
				if err != nil {
					b.Fatal(err)
				}
				wall, cpu = wall+time.Since(start), cpu+cpuTime()-cpu0
			}
			n := float64(b.N * batch)
			b.ReportMetric(n/wall.Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/event")
		})
	}
}

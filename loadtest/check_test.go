package loadtest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestLedgerCheckAgainstClickHouse writes rows for a ledger straight into
// a fresh database, with one event missing, one held under two event ids,
// one never posted, one POST's events stored although it never got a 200,
// and one error too many, and finds each of them.
func TestLedgerCheckAgainstClickHouse(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	m := quiet()
	m.Numbers, m.OutboundMPS, m.ReplyRate, m.PerPost = 2, 10, 0.2, 2
	m.Failures, _ = ParseFailureMix("131049=20%")
	g, posts := runTraffic(t, m, 5*time.Second)
	l := NewLedger(g)
	unacked := -1
	for i := range posts {
		l.Posted(&posts[i])
		if unacked < 0 && i > 3 && posts[i].items[0].kind == itemStatus && posts[i].items[0].sub == statusSent {
			unacked = i // posted, never a 200
			continue
		}
		l.Acked(&posts[i])
	}
	if unacked < 0 {
		t.Fatal("no POST to leave unacked")
	}

	statuses, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+ch.Database+".status_events (event_id, event_time, phone_number_id, message_id, status, recipient_hash, error_codes)")
	if err != nil {
		t.Fatal(err)
	}
	errs, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+ch.Database+".errors (event_id, error_index, origin, event_time, phone_number_id, code)")
	if err != nil {
		t.Fatal(err)
	}
	inbound, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+ch.Database+".inbound_messages (event_id, event_time, phone_number_id, message_id)")
	if err != nil {
		t.Fatal(err)
	}
	addStatus := func(id string, it item) {
		pn := g.fleet.numbers[it.number].PhoneNumberID
		var codes []int32
		if it.sub == statusFailed {
			codes = []int32{it.code}
			if err := errs.Append(id, uint16(0), "status", time.Unix(it.at, 0), pn, it.code); err != nil {
				t.Fatal(err)
			}
		}
		if err := statuses.Append(id, time.Unix(it.at, 0), pn, g.fleet.messageID(idOutbound, it.number, it.seq), statusNames[it.sub], "r", codes); err != nil {
			t.Fatal(err)
		}
	}
	var lost, dup, extraError bool
	var storedUnacked uint64
	written := map[string]bool{}
	for i, p := range posts {
		for _, it := range p.items {
			id := fmt.Sprintf("%d-%d-%d-%d", it.kind, it.number, it.seq, it.sub)
			if written[id] {
				continue // a retry or a repeat: the same event id
			}
			written[id] = true
			if i == unacked {
				storedUnacked++
			}
			switch {
			case it.kind == itemInbound:
				if err := inbound.Append(id, time.Unix(it.at, 0), g.fleet.numbers[it.number].PhoneNumberID, g.fleet.messageID(idInbound, it.number, it.seq)); err != nil {
					t.Fatal(err)
				}
			case !lost && i != unacked && it.sub == statusDelivered:
				lost = true // never written
			case !dup && i != unacked && it.sub == statusRead:
				dup = true
				addStatus(id, it)
				addStatus(id+"-other", it) // identity broken: a second id
			case !extraError && i != unacked && it.sub == statusFailed:
				extraError = true
				addStatus(id, it)
				if err := errs.Append(id, uint16(1), "status", time.Unix(it.at, 0), g.fleet.numbers[it.number].PhoneNumberID, int32(131026)); err != nil {
					t.Fatal(err)
				}
			default:
				addStatus(id, it)
			}
		}
	}
	// A status of this run's numbers that was never posted.
	addStatus("never", item{kind: itemStatus, number: 1, seq: 1 << 20, sub: statusSent, at: testStart.Unix()})
	for _, b := range []interface{ Send() error }{statuses, errs, inbound} {
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	if !lost || !dup || !extraError {
		t.Fatalf("lost %v, duplicate %v, extra error %v: the traffic lacked a case", lost, dup, extraError)
	}

	res, err := Check(ctx, ch.Conn, ch.Database, l, CheckConfig{Timeout: 10 * time.Second, Quiet: 500 * time.Millisecond, List: 5})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	res.WriteText(&text)
	t.Log(text.String())
	if res.Lost != 1 || res.ByKind["delivered"].Lost != 1 || len(res.LostList) != 1 {
		t.Errorf("lost %d (%v), want the one delivered status", res.Lost, res.LostList)
	}
	if res.Duplicates != 2 || res.ByKind["read"].Duplicates != 1 || res.ByKind["sent"].Duplicates != 1 {
		t.Errorf("duplicates %d %v, want a read under two ids and a sent never posted", res.Duplicates, res.DuplicateList)
	}
	if res.StoredUnacked != storedUnacked || storedUnacked == 0 {
		t.Errorf("stored without a 200: %d, want %d", res.StoredUnacked, storedUnacked)
	}
	if res.FailuresMatch || len(res.FailureDiffs) != 1 || !strings.Contains(res.FailureDiffs[0], "code 131026: ledger 0, failures_by_minute 1") {
		t.Errorf("failure differences %v, want the one extra 131026", res.FailureDiffs)
	}
	if res.Drained || res.OK() || res.Expected != l.Totals().Events || res.Found != res.Expected-1 {
		t.Errorf("drained %v, ok %v, expected %d of %d, found %d", res.Drained, res.OK(), res.Expected, l.Totals().Events, res.Found)
	}

	// While the service reports a backlog (stage 1 waiting out its ack
	// wait after a crash), the counts standing still do not end the wait.
	backlogUntil := time.Now().Add(2 * time.Second)
	var asked atomic.Int64
	res, err = Check(ctx, ch.Conn, ch.Database, l, CheckConfig{Timeout: 10 * time.Second, Quiet: 300 * time.Millisecond, List: 5,
		Backlog: func(context.Context) (uint64, error) {
			asked.Add(1)
			if time.Now().Before(backlogUntil) {
				return 3, nil
			}
			return 0, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.WaitS < 2 || asked.Load() == 0 {
		t.Errorf("the check ended after %.1fs (backlog asked %d times) while the service still had a backlog for 2s", res.WaitS, asked.Load())
	}
}

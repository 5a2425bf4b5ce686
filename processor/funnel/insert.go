package funnel

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/wahook/wahook/schema"
)

// This file nets a pass's resolved rows against what funnel_messages holds
// and writes the difference with its share of the hourly sums.

// resolved is a message's state and the row Resolve makes of it (ok false:
// none).
type resolved struct {
	State
	row Row
	ok  bool
	// key and dims are row's key and dimensions hashed, when ok.
	key, dims memKey
}

// netRow is a distinct row of funnel_messages and its net multiplicity.
type netRow struct {
	Row
	n int64
}

const rowColumns = "phone_number_id, message_id, recipient_key, first, waba_id, campaign, template, stage, to_deliver, to_read"

// netted returns the rows funnel_messages nets (multiplicity not 0) for the
// messages of states, by message: those the memory knows, none for those it
// knows are new, and the others' looked up (each counted in st). A
// message's first status only ever moves earlier, so its rows are on the days from that of its first status now to
// today (or its latest status, if the clocks disagree): the lookup names
// each key with each of those days, which the table's sorting key begins
// with, and reads only their granules. The keys and days go in lookups of
// LookupKeys at most; each (day, key) is named in one of them, so the rows
// each finds are distinct, and together they are all the messages' rows.
func (r *Resolver) netted(ctx context.Context, states []resolved, now uint32, st *PassStats) (map[msgKey][]netRow, error) {
	out := map[msgKey][]netRow{}
	var keys *ext.Table
	n := 0
	for _, s := range states {
		row := s.row
		if !s.ok {
			continue // no status that counts: never had a row
		}
		switch had, rc := r.mem.recall(s.key, s.dims, row); {
		case rc == remembered:
			out[row.key()] = []netRow{{had, 1}}
			st.Known++
			continue
		case rc == unknown && r.mem.isNew(s.key, row.First):
			st.New++
			continue
		}
		last := now
		for _, t := range []uint32{s.Sent, s.Delivered, s.Read, s.Played, s.Failed} {
			if t != never {
				last = max(last, t)
			}
		}
		// A row's first is its message's first status then, which a later
		// status can only have moved earlier: it is on the day of the first
		// status now or after it, up to today (or the latest status, when
		// the clocks disagree); a day before too, as the table's days are
		// the server's time zone's. Past any retention, no days more.
		const day, maxDays = 86400, 400
		for d := row.First/day - 1; d <= min(last/day+1, row.First/day+maxDays); d++ {
			if keys == nil {
				var err error
				if keys, err = newKeysTable(); err != nil {
					return nil, fmt.Errorf("funnel: rows: %w", err)
				}
			}
			if err := keys.Append(time.Unix(int64(d)*day, 0).UTC(), uint8(KindMessage), s.PhoneNumberID, s.MessageID, s.RecipientKey); err != nil {
				return nil, fmt.Errorf("funnel: rows: %w", err)
			}
			if n++; n == r.cfg.LookupKeys {
				st.Lookups++
				if err := r.lookup(ctx, keys, n, out); err != nil {
					return nil, err
				}
				keys, n = nil, 0
			}
		}
	}
	if n > 0 {
		st.Lookups++
		if err := r.lookup(ctx, keys, n, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// newKeysTable is an empty table of the (day, key) pairs a lookup names.
func newKeysTable() (*ext.Table, error) {
	return ext.NewTable("funnel_keys",
		ext.Column("day", column.Type("Date")), ext.Column("kind", column.Type("UInt8")), ext.Column("phone_number_id", column.Type("String")),
		ext.Column("message_id", column.Type("String")), ext.Column("recipient_key", column.Type("String")))
}

// lookup adds to out the rows funnel_messages nets for the n (day, key)
// pairs of keys.
func (r *Resolver) lookup(ctx context.Context, keys *ext.Table, n int, out map[msgKey][]netRow) error {
	qctx := clickhouse.Context(ctx, clickhouse.WithExternalTable(keys))
	rows, err := r.conn.Query(qctx, fmt.Sprintf(`SELECT phone_number_id, message_id, recipient_key, toUInt32(first), waba_id, campaign, template,
       stage, to_deliver, to_read, sum(n) AS c
FROM %s
WHERE (toDate(first), kind, phone_number_id, message_id, recipient_key) IN funnel_keys
GROUP BY %s
HAVING c != 0`, r.table("funnel_messages"), rowColumns))
	if err != nil {
		return fmt.Errorf("funnel: rows (%d keys and days): %w", n, err)
	}
	defer rows.Close()
	for rows.Next() {
		var x netRow
		if err := rows.Scan(&x.PhoneNumberID, &x.MessageID, &x.RecipientKey, &x.First, &x.WabaID, &x.Campaign, &x.Template,
			&x.Stage, &x.ToDeliver, &x.ToRead, &x.n); err != nil {
			return fmt.Errorf("funnel: rows: %w", err)
		}
		out[x.key()] = append(out[x.key()], x)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("funnel: rows: %w", err)
	}
	return nil
}

// diff returns the rows to insert so that each message of states nets
// exactly its resolved row (none for a message without a first status),
// and how many messages change. Messages in have but not in states are
// left alone: they were touched after states was read, and the next pass
// resolves them.
func diff(states []resolved, have map[msgKey][]netRow) (out []netRow, changed int) {
	for _, s := range states {
		want, ok := s.row, s.ok
		cur := have[msgKey{s.PhoneNumberID, s.MessageID, s.RecipientKey}]
		if ok && len(cur) == 1 && cur[0].n == 1 && cur[0].Row == want {
			continue
		}
		if !ok && len(cur) == 0 {
			continue
		}
		changed++
		for _, c := range cur {
			out = append(out, netRow{c.Row, -c.n})
		}
		if ok {
			out = append(out, netRow{want, 1})
		}
	}
	return out, changed
}

// Kinds of funnel_messages rows, and the span of its sums: the table's
// format is schema's (schema/funnel.go), shared with the API.
const (
	KindMessage   = schema.FunnelKindMessage
	KindCounts    = schema.FunnelKindCounts
	KindToDeliver = schema.FunnelKindToDeliver
	KindToRead    = schema.FunnelKindToRead
	SumSeconds    = schema.FunnelSumSeconds
)

// insert writes rows in one batch: each message row, and with it, with the
// same multiplicity, its share of the hourly sums (kinds 1 to 3), so that
// the sums always are those of the message rows, batch by batch. The shares
// of one hour, number, WABA, campaign and template (and to_deliver or
// to_read) are added up before the insert, as the table's merges would add
// them, and those that add up to nothing are left out: the batch has a row
// per message and a few per hour instead of up to four per message.
func (r *Resolver) insert(ctx context.Context, rows []netRow) error {
	c := fold(rows)
	b, err := r.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (kind, %s, %s)", r.table("funnel_messages"), rowColumns, countColumns))
	if err != nil {
		return fmt.Errorf("funnel: insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a sent batch cannot be aborted; nothing to report
	cols := []any{c.kind, c.phone, c.message, c.recipient, c.first, c.waba, c.campaign, c.template, c.stage, c.toDeliver, c.toRead}
	for i := range c.counts {
		cols = append(cols, c.counts[i])
	}
	for i, v := range cols {
		if err := b.Column(i).Append(v); err != nil {
			return fmt.Errorf("funnel: insert: column %d: %w", i, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("funnel: insert: %w", err)
	}
	return nil
}

// fold is the columns insert writes for rows.
func fold(rows []netRow) insertCols {
	var c insertCols
	sums := map[sumKey]*[7]int32{}
	var order []sumKey // the sums in the order first met, for a stable batch
	add := func(k sumKey, v [7]int32) {
		t, ok := sums[k]
		if !ok {
			t = new([7]int32)
			sums[k] = t
			order = append(order, k)
		}
		for i := range v {
			t[i] += v[i]
		}
	}
	for _, x := range rows {
		n := int32(x.n)
		cnt := x.Counts(n)
		c.add(KindMessage, x.Row, x.First, cnt)
		k := sumKey{kind: KindCounts, phone: x.PhoneNumberID, hour: x.First / SumSeconds * SumSeconds,
			waba: x.WabaID, campaign: x.Campaign, template: x.Template}
		add(k, cnt)
		if x.ToDeliver >= 0 {
			k.kind, k.toDeliver = KindToDeliver, x.ToDeliver
			add(k, [7]int32{n})
			k.toDeliver = 0
		}
		if x.ToRead >= 0 {
			k.kind, k.toRead = KindToRead, x.ToRead
			add(k, [7]int32{n})
		}
	}
	for _, k := range order {
		if v := sums[k]; *v != ([7]int32{}) {
			c.add(k.kind, Row{PhoneNumberID: k.phone, WabaID: k.waba, Campaign: k.campaign, Template: k.template,
				ToDeliver: k.toDeliver, ToRead: k.toRead}, k.hour, *v)
		}
	}
	return c
}

// sumKey is a row of kinds 1 to 3 less its sums: hour is the start of the
// hour of first.
type sumKey struct {
	kind                            uint8
	phone, waba, campaign, template string
	hour                            uint32
	toDeliver, toRead               int32
}

// insertCols are the columns of an insert into funnel_messages, in the
// order of "kind, rowColumns, countColumns".
type insertCols struct {
	kind, stage                                         []uint8
	phone, message, recipient, waba, campaign, template []string
	first                                               []time.Time
	toDeliver, toRead                                   []int32
	counts                                              [7][]int32
}

func (c *insertCols) add(kind uint8, x Row, first uint32, counts [7]int32) {
	c.kind = append(c.kind, kind)
	c.phone = append(c.phone, x.PhoneNumberID)
	c.message = append(c.message, x.MessageID)
	c.recipient = append(c.recipient, x.RecipientKey)
	c.first = append(c.first, time.Unix(int64(first), 0).UTC())
	c.waba = append(c.waba, x.WabaID)
	c.campaign = append(c.campaign, x.Campaign)
	c.template = append(c.template, x.Template)
	c.stage = append(c.stage, x.Stage)
	c.toDeliver = append(c.toDeliver, x.ToDeliver)
	c.toRead = append(c.toRead, x.ToRead)
	for i, v := range counts {
		c.counts[i] = append(c.counts[i], v)
	}
}

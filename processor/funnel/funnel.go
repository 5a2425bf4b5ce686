// Package funnel keeps the delivery funnel resolved: one net row per message
// and recipient in ClickHouse's funnel_messages, so that the funnel is a
// sum over rows rather than a resolution of every message's statuses at
// query time (docs/api.md, "The funnel, resolved").
//
// A Resolver pass reads which messages got a status since its last pass
// (funnel_touched, with a slack for inserts that became visible late),
// computes their state from message_states, reads the rows funnel_messages
// nets for them, and inserts, in one batch per part of about PassMessages
// messages, each of those rows with the opposite multiplicity and the new
// row. A message whose row is already
// right costs no write. Each pass nets whatever funnel_messages holds for a
// message, and the watermark moves only after a pass has written
// everything, so a pass cut short (an insert that failed half way, a crash)
// is done again by the next one, which repairs what it left. Only one
// instance may resolve at a time: Run holds a lease in a KV bucket, stops a
// pass that loses it, and checks it before every write.
package funnel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// Config tunes a Resolver.
type Config struct {
	// Interval is the time between passes.
	Interval time.Duration
	// Slack is how far before its last watermark a pass reads
	// funnel_touched again: an insert stamped before the watermark but
	// visible only after the pass read, within Slack, is not missed.
	Slack time.Duration
	// LeaseTTL is how long the lease outlives its holder's last renewal.
	LeaseTTL time.Duration
	// LookupKeys is the most message-days one lookup of funnel_messages
	// names (0: DefaultLookupKeys, set by New). A pass over many messages, or over
	// messages whose first status is long past, makes several lookups,
	// so that its memory stays bounded.
	LookupKeys int
	// PassMessages is about the most messages a pass resolves at once (0:
	// DefaultPassMessages, set by New): a pass with more touched since the last one,
	// after an outage or a burst, resolves them in parts by a hash of the
	// message id, so that its memory stays bounded.
	PassMessages int
}

// DefaultPassMessages bounds the message states a pass holds to ~20 MB.
const DefaultPassMessages = 50_000

// DefaultLookupKeys bounds a lookup's table of message-days to ~10-20 MB.
const DefaultLookupKeys = 100_000

// DefaultConfig returns the defaults: a pass every 5 s, 5 s of slack, a
// 30 s lease.
func DefaultConfig() Config {
	return Config{Interval: 5 * time.Second, Slack: 5 * time.Second, LeaseTTL: 30 * time.Second}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return errors.New("funnel interval must be positive")
	case c.Slack < time.Second:
		return errors.New("funnel slack must be at least 1s")
	case c.LeaseTTL <= 0:
		return errors.New("funnel lease TTL must be positive")
	case c.LookupKeys < 0:
		return errors.New("funnel lookup keys must not be negative")
	case c.PassMessages < 0:
		return errors.New("funnel pass messages must not be negative")
	}
	return nil
}

// never is the sentinel of a status that never came (schema.FunnelNever).
const never = schema.FunnelNever

// Stages of a resolved row.
const (
	StageSent      = 1
	StageDelivered = 2
	StageRead      = 3 // read or played
	StageFailed    = 4 // once failed, always failed
)

// Row is one resolved message and recipient, as funnel_messages holds it.
type Row struct {
	PhoneNumberID, MessageID, RecipientKey string
	First                                  uint32 // unix seconds of the first status
	WabaID, Campaign, Template             string
	Stage                                  uint8
	ToDeliver, ToRead                      int32 // seconds, -1 when unknown
}

func (r Row) key() msgKey { return msgKey{r.PhoneNumberID, r.MessageID, r.RecipientKey} }

type msgKey struct{ phone, message, recipient string }

// State is what message_states holds for a message: the first time of each
// status (never when it did not come), whether it ever failed, and its
// dimensions.
type State struct {
	PhoneNumberID, MessageID, RecipientKey string
	WabaID, Campaign, Template             string
	Sent, Delivered, Read, Played, Failed  uint32
	HasFailed                              bool
}

// Resolve is the funnel's rule for one message: it counts once, at its first
// status; a failed message is failed whatever else came; a later stage
// implies the earlier ones (a read message was delivered even if its
// delivered status was lost); the durations are from sent, when sent came
// and the later status is not earlier. ok is false for a message with none
// of these statuses.
func Resolve(s State) (r Row, ok bool) {
	delivered := min(s.Delivered, s.Read, s.Played)
	read := min(s.Read, s.Played)
	first := min(s.Sent, delivered, s.Failed)
	if first == never {
		return Row{}, false
	}
	r = Row{
		PhoneNumberID: s.PhoneNumberID, MessageID: s.MessageID, RecipientKey: s.RecipientKey,
		First: first, WabaID: s.WabaID, Campaign: s.Campaign, Template: s.Template,
		Stage: StageSent, ToDeliver: -1, ToRead: -1,
	}
	switch {
	case s.HasFailed:
		r.Stage = StageFailed
		return r, true
	case read != never:
		r.Stage = StageRead
	case delivered != never:
		r.Stage = StageDelivered
	}
	if s.Sent != never {
		if delivered != never && delivered >= s.Sent {
			r.ToDeliver = int32(delivered - s.Sent)
		}
		if read != never && read >= s.Sent {
			r.ToRead = int32(read - s.Sent)
		}
	}
	return r, true
}

// Resolver keeps funnel_messages up to date. Its methods are not safe for
// concurrent use.
type Resolver struct {
	conn driver.Conn
	db   string
	cfg  Config
	log  *zap.Logger
	m    *metrics
}

// New returns a resolver of the tables in database db. m may be nil.
func New(conn driver.Conn, db string, cfg Config, log *zap.Logger, m *Metrics) *Resolver {
	if cfg.LookupKeys == 0 {
		cfg.LookupKeys = DefaultLookupKeys
	}
	if cfg.PassMessages == 0 {
		cfg.PassMessages = DefaultPassMessages
	}
	r := &Resolver{conn: conn, db: db, cfg: cfg, log: log}
	if m != nil {
		r.m = m.m
	}
	return r
}

func (r *Resolver) table(name string) string { return r.db + "." + name }

// PassStats is what one pass did.
type PassStats struct {
	Backfill  bool      // the pass resolved every message (no watermark yet)
	Watermark time.Time // funnel_touched is read up to here
	Messages  int       // messages whose state was read
	Changed   int       // messages whose row changed
	Rows      int       // rows inserted (n = -1 and n = 1)
	Lookups   int       // queries of funnel_messages' rows (LookupKeys message-days each at most)
	Parts     int       // parts the touched messages were resolved in (PassMessages each, about)
}

// Watermark returns the time up to which funnel_messages reflects every
// status, and false when no pass has completed.
func Watermark(ctx context.Context, conn driver.Conn, db string) (time.Time, bool, error) {
	var w uint32
	var n uint64
	// Each watermark is a time up to which a pass had read everything, by
	// the server's clock: the latest is the one that counts.
	row := conn.QueryRow(ctx, fmt.Sprintf("SELECT toUInt32(max(watermark)), count() FROM %s.%s", db, schema.FunnelResolverTable))
	if err := row.Scan(&w, &n); err != nil {
		return time.Time{}, false, err
	}
	if n == 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(int64(w), 0).UTC(), true, nil
}

// Pass brings funnel_messages up to date once. With no watermark yet (a new
// database, or one made before the resolver existed) it resolves every
// message; otherwise only those touched since the watermark, less the
// slack. The watermark moves only when the pass has written everything.
// stillHeld, when not nil, is asked before each write; a pass whose lease
// is gone writes nothing more (parts written before are right, and the
// watermark does not move).
func (r *Resolver) Pass(ctx context.Context, stillHeld func() bool) (PassStats, error) {
	start := time.Now()
	st, err := r.pass(ctx, stillHeld)
	if r.m != nil {
		r.m.observe(st, err, time.Since(start))
	}
	return st, err
}

var errLeaseLost = errors.New("funnel: lease lost during the pass; nothing more written")

func (r *Resolver) pass(ctx context.Context, stillHeld func() bool) (PassStats, error) {
	var st PassStats
	held := func() error {
		if stillHeld != nil && !stillHeld() {
			return errLeaseLost
		}
		return nil
	}
	var now uint32
	if err := r.conn.QueryRow(ctx, "SELECT toUInt32(now())").Scan(&now); err != nil {
		return st, fmt.Errorf("funnel: %w", err)
	}
	wm, ok, err := Watermark(ctx, r.conn, r.db)
	if err != nil {
		return st, fmt.Errorf("funnel: watermark: %w", err)
	}
	if !ok {
		st.Backfill = true
		if err := r.backfill(ctx, held); err != nil {
			return st, err
		}
	} else {
		// One thread: a pass's lookups leave ClickHouse's other cores to
		// stage 1's inserts.
		ctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_threads": 1}))
		from := uint32(max(wm.Unix()-int64(r.cfg.Slack/time.Second), 0))
		since := fmt.Sprintf("inserted_at >= toDateTime(%d)", from)
		// Statuses touch a message each, so this counts a message once or
		// more: parts are as many as needed or more.
		var touches uint64
		if err := r.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE %s", r.table("funnel_touched"), since)).Scan(&touches); err != nil {
			return st, fmt.Errorf("funnel: touched: %w", err)
		}
		per := uint64(r.cfg.PassMessages)
		st.Parts = max(int((touches+per-1)/per), 1)
		for part := range st.Parts {
			// The part's messages among those touched, filtered inside the
			// subquery, so that each part's set and lookups are its own.
			in := since
			if st.Parts > 1 {
				in = fmt.Sprintf("%s AND cityHash64(message_id) %% %d = %d", since, st.Parts, part)
			}
			cond := fmt.Sprintf("(phone_number_id, message_id, recipient_key) IN (SELECT phone_number_id, message_id, recipient_key FROM %s WHERE %s)",
				r.table("funnel_touched"), in)
			if err := r.resolvePart(ctx, cond, now, &st, held); err != nil {
				return st, err
			}
		}
		r.dropTouched(ctx, from)
	}
	if err := held(); err != nil {
		return st, err
	}
	if err := r.setWatermark(ctx, now); err != nil {
		return st, err
	}
	st.Watermark = time.Unix(int64(now), 0).UTC()
	return st, nil
}

// resolvePart resolves the messages where cond holds and writes the rows
// that change, adding to st.
func (r *Resolver) resolvePart(ctx context.Context, cond string, now uint32, st *PassStats, held func() error) error {
	states, err := r.states(ctx, cond)
	if err != nil {
		return err
	}
	st.Messages += len(states)
	if len(states) == 0 {
		return nil
	}
	want := make([]resolved, len(states))
	for i, s := range states {
		want[i].State = s
		want[i].row, want[i].ok = Resolve(s)
	}
	have, lookups, err := r.netted(ctx, want, now)
	st.Lookups += lookups
	if err != nil {
		return err
	}
	rows, changed := diff(want, have)
	st.Changed += changed
	st.Rows += len(rows)
	if len(rows) == 0 {
		return nil
	}
	if err := held(); err != nil {
		return err
	}
	return r.insert(ctx, rows)
}

// stateSQL selects message_states, resolved into State's fields (named w,
// c, t, s, de, rd0, pl, fa, f), for the messages where cond holds.
func (r *Resolver) stateSQL(cond string) string {
	nz := func(col, as string) string {
		return fmt.Sprintf("if(minIfMerge(%[1]s) > toDateTime(0), toUInt32(minIfMerge(%[1]s)), %[2]d) AS %[3]s", col, never, as)
	}
	return fmt.Sprintf(`SELECT phone_number_id, message_id, recipient_key,
       maxMerge(waba_id) AS w, maxMerge(campaign) AS c, maxMerge(template) AS t,
       %s, %s, %s, %s, %s, maxMerge(failed) AS f
FROM %s
WHERE %s
GROUP BY phone_number_id, message_id, recipient_key`,
		nz("sent_at", "s"), nz("delivered_at", "de"), nz("read_at", "rd0"), nz("played_at", "pl"), nz("failed_at", "fa"),
		r.table("message_states"), cond)
}

func (r *Resolver) states(ctx context.Context, cond string) ([]State, error) {
	rows, err := r.conn.Query(ctx, r.stateSQL(cond))
	if err != nil {
		return nil, fmt.Errorf("funnel: states: %w", err)
	}
	defer rows.Close()
	var out []State
	for rows.Next() {
		var s State
		var failed uint8
		if err := rows.Scan(&s.PhoneNumberID, &s.MessageID, &s.RecipientKey, &s.WabaID, &s.Campaign, &s.Template,
			&s.Sent, &s.Delivered, &s.Read, &s.Played, &s.Failed, &failed); err != nil {
			return nil, fmt.Errorf("funnel: states: %w", err)
		}
		s.HasFailed = failed != 0
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("funnel: states: %w", err)
	}
	return out, nil
}

// resolved is a message's state and the row Resolve makes of it (ok false:
// none).
type resolved struct {
	State
	row Row
	ok  bool
}

// netRow is a distinct row of funnel_messages and its net multiplicity.
type netRow struct {
	Row
	n int64
}

const rowColumns = "phone_number_id, message_id, recipient_key, first, waba_id, campaign, template, stage, to_deliver, to_read"

// netted returns the rows funnel_messages nets (multiplicity not 0) for the
// messages of states, by message. A message's first status only ever moves
// earlier, so its rows are on the days from that of its first status now to
// today (or its latest status, if the clocks disagree): the lookup names
// each key with each of those days, which the table's sorting key begins
// with, and reads only their granules. The keys and days go in lookups of
// LookupKeys at most; each (day, key) is named in one of them, so the rows
// each finds are distinct, and together they are all the messages' rows.
func (r *Resolver) netted(ctx context.Context, states []resolved, now uint32) (map[msgKey][]netRow, int, error) {
	out := map[msgKey][]netRow{}
	var keys *ext.Table
	n, lookups := 0, 0
	for _, s := range states {
		row := s.row
		if !s.ok {
			continue // no status that counts: never had a row
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
					return nil, lookups, fmt.Errorf("funnel: rows: %w", err)
				}
			}
			if err := keys.Append(time.Unix(int64(d)*day, 0).UTC(), uint8(KindMessage), s.PhoneNumberID, s.MessageID, s.RecipientKey); err != nil {
				return nil, lookups, fmt.Errorf("funnel: rows: %w", err)
			}
			if n++; n == r.cfg.LookupKeys {
				lookups++
				if err := r.lookup(ctx, keys, n, out); err != nil {
					return nil, lookups, err
				}
				keys, n = nil, 0
			}
		}
	}
	if n > 0 {
		lookups++
		if err := r.lookup(ctx, keys, n, out); err != nil {
			return nil, lookups, err
		}
	}
	return out, lookups, nil
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

// countColumns are funnel_messages' sums: n, and n where the row counts as
// sent, delivered, read, failed, or has a to_deliver or to_read.
const countColumns = "n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read"

// Counts are the values of funnel_messages' n, n_sent, n_delivered, n_read,
// n_failed, n_to_deliver and n_to_read for the row with multiplicity n.
func (r Row) Counts(n int32) [7]int32 {
	if0 := func(cond bool) int32 {
		if cond {
			return n
		}
		return 0
	}
	return [7]int32{n, if0(r.Stage != StageFailed), if0(r.Stage == StageDelivered || r.Stage == StageRead), if0(r.Stage == StageRead),
		if0(r.Stage == StageFailed), if0(r.ToDeliver >= 0), if0(r.ToRead >= 0)}
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
// the sums always are those of the message rows, part by part.
func (r *Resolver) insert(ctx context.Context, rows []netRow) error {
	b, err := r.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (kind, %s, %s)", r.table("funnel_messages"), rowColumns, countColumns))
	if err != nil {
		return fmt.Errorf("funnel: insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a sent batch cannot be aborted; nothing to report
	for _, x := range rows {
		n := int32(x.n)
		c := x.Counts(n)
		first := time.Unix(int64(x.First), 0).UTC()
		hourOf := time.Unix(int64(x.First/SumSeconds*SumSeconds), 0).UTC()
		appends := [][]any{
			{uint8(KindMessage), x.PhoneNumberID, x.MessageID, x.RecipientKey, first, x.WabaID, x.Campaign, x.Template,
				x.Stage, x.ToDeliver, x.ToRead, c[0], c[1], c[2], c[3], c[4], c[5], c[6]},
			{uint8(KindCounts), x.PhoneNumberID, "", "", hourOf, x.WabaID, x.Campaign, x.Template,
				uint8(0), int32(0), int32(0), c[0], c[1], c[2], c[3], c[4], c[5], c[6]},
		}
		if x.ToDeliver >= 0 {
			appends = append(appends, []any{uint8(KindToDeliver), x.PhoneNumberID, "", "", hourOf, x.WabaID, x.Campaign, x.Template,
				uint8(0), x.ToDeliver, int32(0), n, int32(0), int32(0), int32(0), int32(0), int32(0), int32(0)})
		}
		if x.ToRead >= 0 {
			appends = append(appends, []any{uint8(KindToRead), x.PhoneNumberID, "", "", hourOf, x.WabaID, x.Campaign, x.Template,
				uint8(0), int32(0), x.ToRead, n, int32(0), int32(0), int32(0), int32(0), int32(0), int32(0)})
		}
		for _, a := range appends {
			if err := b.Append(a...); err != nil {
				return fmt.Errorf("funnel: insert: %w", err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("funnel: insert: %w", err)
	}
	return nil
}

// backfill resolves every message of message_states into an emptied
// funnel_messages, inside ClickHouse. A backfill cut short leaves no
// watermark, so the next pass starts it again from empty.
// held is asked before each write: errLeaseLost once the lease is gone.
func (r *Resolver) backfill(ctx context.Context, held func() error) error {
	r.log.Info("funnel: resolving every message (no watermark yet)")
	start := time.Now()
	bctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"max_bytes_before_external_group_by": 2 << 30,
		"max_execution_time":                 0,
	}))
	// The statuses stored before message_states existed (copied again
	// after a backfill cut short: a copy changes no minimum or maximum).
	if err := r.conn.Exec(bctx, fmt.Sprintf(`INSERT INTO %s
SELECT phone_number_id, message_id, recipient_key, month, waba_id, campaign, template,
       sent_at, delivered_at, read_at, played_at, failed_at, failed
FROM %s`, r.table("message_states"), r.table("message_lifecycle"))); err != nil {
		return fmt.Errorf("funnel: backfill: %w", err)
	}
	if err := held(); err != nil {
		return err
	}
	if err := r.conn.Exec(ctx, "TRUNCATE TABLE "+r.table("funnel_messages")); err != nil {
		return fmt.Errorf("funnel: backfill: %w", err)
	}
	// The same rule as Resolve, in SQL.
	sql := fmt.Sprintf(`INSERT INTO %[1]s (kind, %[2]s, %[9]s)
SELECT 0, phone_number_id, message_id, recipient_key, toDateTime(first), w, c, t, stage, to_deliver, to_read,
       1, stage != %[4]d, stage = %[6]d OR stage = %[7]d, stage = %[6]d, stage = %[4]d, to_deliver >= 0, to_read >= 0
FROM
(
    SELECT phone_number_id, message_id, recipient_key, w, c, t, first,
           multiIf(f = 1, %[4]d, rd != %[5]d, %[6]d, dl != %[5]d, %[7]d, %[8]d) AS stage,
           if(f = 0 AND s != %[5]d AND dl != %[5]d AND dl >= s, toInt32(dl - s), -1) AS to_deliver,
           if(f = 0 AND s != %[5]d AND rd != %[5]d AND rd >= s, toInt32(rd - s), -1) AS to_read
    FROM
    (
        SELECT phone_number_id, message_id, recipient_key, w, c, t, f, s,
               least(least(de, rd0), pl) AS dl, least(rd0, pl) AS rd, least(least(s, dl), fa) AS first
        FROM (%[3]s)
    )
    WHERE first != %[5]d
)`, r.table("funnel_messages"), rowColumns, r.stateSQL("1"),
		StageFailed, never, StageRead, StageDelivered, StageSent, countColumns)
	if err := held(); err != nil {
		return err
	}
	if err := r.conn.Exec(bctx, sql); err != nil {
		return fmt.Errorf("funnel: backfill: %w", err)
	}
	// The hourly sums of the message rows, as insert adds them.
	dims := "phone_number_id, toStartOfHour(first) AS hour, waba_id, campaign, template"
	for _, q := range []string{
		fmt.Sprintf(`SELECT %d, phone_number_id, '', '', hour, waba_id, campaign, template, 0, 0, 0,
       sum(n), sum(n_sent), sum(n_delivered), sum(n_read), sum(n_failed), sum(n_to_deliver), sum(n_to_read)
FROM %s WHERE kind = %d GROUP BY %s`, KindCounts, r.table("funnel_messages"), KindMessage, dims),
		fmt.Sprintf(`SELECT %d, phone_number_id, '', '', hour, waba_id, campaign, template, 0, to_deliver, 0, sum(n_to_deliver), 0, 0, 0, 0, 0, 0
FROM %s WHERE kind = %d AND n_to_deliver != 0 GROUP BY %s, to_deliver`, KindToDeliver, r.table("funnel_messages"), KindMessage, dims),
		fmt.Sprintf(`SELECT %d, phone_number_id, '', '', hour, waba_id, campaign, template, 0, 0, to_read, sum(n_to_read), 0, 0, 0, 0, 0, 0
FROM %s WHERE kind = %d AND n_to_read != 0 GROUP BY %s, to_read`, KindToRead, r.table("funnel_messages"), KindMessage, dims),
	} {
		if err := held(); err != nil {
			return err
		}
		if err := r.conn.Exec(bctx, fmt.Sprintf("INSERT INTO %s (kind, %s, %s) %s", r.table("funnel_messages"), rowColumns, countColumns, q)); err != nil {
			return fmt.Errorf("funnel: backfill: %w", err)
		}
	}
	r.log.Info("funnel: every message resolved", zap.Duration("took", time.Since(start)))
	return nil
}

func (r *Resolver) setWatermark(ctx context.Context, at uint32) error {
	b, err := r.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (id, watermark, version)", r.table("funnel_resolver")))
	if err != nil {
		return fmt.Errorf("funnel: watermark: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a sent batch cannot be aborted
	// The version is the watermark: merges keep the latest.
	if err := b.Append(uint8(1), time.Unix(int64(at), 0).UTC(), uint64(at)); err != nil {
		return fmt.Errorf("funnel: watermark: %w", err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("funnel: watermark: %w", err)
	}
	return nil
}

// dropTouched drops the days of funnel_touched that end more than a day
// before from: no pass reads them again. A failure only keeps them longer.
func (r *Resolver) dropTouched(ctx context.Context, from uint32) {
	cutoff := time.Unix(int64(from), 0).UTC().AddDate(0, 0, -1).Format("20060102")
	rows, err := r.conn.Query(ctx, "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = 'funnel_touched' AND active AND partition < ?", r.db, cutoff)
	if err != nil {
		r.log.Warn("funnel: listing old days of funnel_touched", zap.Error(err))
		return
	}
	var days []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err == nil {
			days = append(days, d)
		}
	}
	rows.Close()
	for _, d := range days {
		if err := r.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION %s", r.table("funnel_touched"), d)); err != nil {
			r.log.Warn("funnel: dropping an old day of funnel_touched", zap.String("day", d), zap.Error(err))
		}
	}
}

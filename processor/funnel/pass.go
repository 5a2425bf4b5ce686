package funnel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// This file is a pass: which messages changed since the watermark, their
// states read part by part, resolved, written, and the watermark moved.

// PassStats is what one pass did.
type PassStats struct {
	Backfill  bool      // the pass resolved every message (no watermark yet)
	Watermark time.Time // funnel_touched is read up to here
	Messages  int       // messages whose state was read
	Changed   int       // messages whose row changed
	Rows      int       // message rows inserted (n = -1 and n = 1)
	Inserts   int       // INSERTs into funnel_messages (about InsertRows message rows each at most)
	Lookups   int       // queries of funnel_messages' rows (LookupKeys message-days each at most)
	Parts     int       // parts the touched messages were resolved in (PassMessages each, about)
	Known     int       // messages whose rows the resolver remembered (not looked up)
	New       int       // messages known to have no rows yet (not looked up)
}

// Pass brings funnel_messages up to date once. With no watermark yet (a new
// database, or one made before the resolver existed) it resolves every
// message; otherwise only those touched since the watermark, less the
// slack. The watermark moves only when the pass has written everything.
// stillHeld, when not nil, is asked before each write; a pass whose lease
// is gone writes nothing more (the batches written before are right, each
// message in them replaced whole, and the watermark does not move).
func (r *Resolver) Pass(ctx context.Context, stillHeld func() bool) (PassStats, error) {
	start := time.Now()
	st, err := r.pass(ctx, stillHeld)
	if err != nil || st.Backfill {
		// What a failed pass wrote is not known for sure, and a backfill
		// wrote every row: the next pass begins the memory again.
		r.mem.forget()
	}
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
	// On a cluster, what stage 1 wrote through another replica before now
	// less the slack is read here (awaitFetches).
	if err := r.awaitFetches(ctx, "funnel_touched", "message_states"); err != nil {
		return st, err
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
		if !r.mem.valid {
			if err := r.beginMemory(ctx, now); err != nil {
				return st, err
			}
		}
		from := uint32(max(wm.Unix()-int64(r.cfg.Slack/time.Second), 0))
		since := fmt.Sprintf("inserted_at >= toDateTime(%d)", from)
		// Statuses touch a message each, so this counts a message once or
		// more: parts are as many as needed or more.
		var touches uint64
		if err := r.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE %s", r.table("funnel_touched"), since)).Scan(&touches); err != nil {
			return st, fmt.Errorf("funnel: touched: %w", err)
		}
		per := uint64(r.cfg.PassMessages)
		parts := max(int((touches+per-1)/per), 1)
		var bounds []msgBound
		if parts > 1 {
			if bounds, err = r.partBounds(ctx, since, parts); err != nil {
				return st, err
			}
		}
		st.Parts = len(bounds) + 1
		for part := range st.Parts {
			// The part's messages among those touched, filtered inside the
			// subquery, so that each part's set and lookups are its own;
			// and the same range of message_states' key outside it, so that
			// the part reads only the granules of its range: parts by a
			// hash of the message id each read nearly every granule of
			// message_states once it holds more granules than a part has
			// messages, a pass's reads growing with its parts times the
			// table.
			rng := keyRange(bounds, part)
			in := since
			if rng != "" {
				in = since + " AND " + rng
			}
			// The set in where, which picks the granules and the rows,
			// names messages, not (message, recipient) pairs: on
			// ClickHouse 18.16 a set on all three key columns costs far
			// more, and more as the table grows (with 10 M messages in
			// message_states, a part of 3,000 messages took 0.21 s where
			// the set of messages took 0.12 s; docs/performance.md). A
			// message's recipients are all read then, and having keeps
			// those touched, exactly.
			touched := func(cols string) string {
				return fmt.Sprintf("(%[1]s) IN (SELECT %[1]s FROM %[2]s WHERE %[3]s)", cols, r.table("funnel_touched"), in)
			}
			where := touched("phone_number_id, message_id")
			if rng != "" {
				where = rng + " AND " + where
			}
			if err := r.resolvePart(ctx, where, touched("phone_number_id, message_id, recipient_key"), now, &st, held); err != nil {
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

// msgBound is a message's place in message_states' key order (a phone
// number id and a message id: a message's recipients are never split).
type msgBound struct{ phone, message string }

// partBounds returns up to parts-1 messages, in key order, that split the
// messages touched since (a condition on funnel_touched) into parts of
// about the same size: every so many of a sample of them (those whose
// message id hashes to 0 modulo PassMessages/64, about 64 a part).
func (r *Resolver) partBounds(ctx context.Context, since string, parts int) ([]msgBound, error) {
	every := max(r.cfg.PassMessages/64, 1)
	rows, err := r.conn.Query(ctx, fmt.Sprintf(`SELECT phone_number_id, message_id FROM %s
WHERE %s AND cityHash64(message_id) %% %d = 0
GROUP BY phone_number_id, message_id
ORDER BY phone_number_id, message_id`, r.table("funnel_touched"), since, every))
	if err != nil {
		return nil, fmt.Errorf("funnel: parts: %w", err)
	}
	defer rows.Close()
	var sample []msgBound
	for rows.Next() {
		var b msgBound
		if err := rows.Scan(&b.phone, &b.message); err != nil {
			return nil, fmt.Errorf("funnel: parts: %w", err)
		}
		sample = append(sample, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("funnel: parts: %w", err)
	}
	return splitSample(sample, parts), nil
}

// splitSample returns the bounds between parts (at most parts-1, fewer
// when the sample is smaller): the sample's elements at every
// len(sample)/parts, in its (key) order, none twice.
func splitSample(sample []msgBound, parts int) []msgBound {
	var bounds []msgBound
	for i := 1; i < parts; i++ {
		j := i * len(sample) / parts
		if j == 0 || len(bounds) > 0 && bounds[len(bounds)-1] == sample[j] {
			continue
		}
		bounds = append(bounds, sample[j])
	}
	return bounds
}

// keyRange is the condition on (phone_number_id, message_id) of part i of
// the parts bounds splits the key order into: from bounds[i-1] (included)
// to bounds[i] (excluded); "" for the whole order (no bounds).
func keyRange(bounds []msgBound, i int) string {
	var conds []string
	if i > 0 {
		b := bounds[i-1]
		conds = append(conds, fmt.Sprintf("(phone_number_id > %[1]s OR phone_number_id = %[1]s AND message_id >= %[2]s)", chString(b.phone), chString(b.message)))
	}
	if i < len(bounds) {
		b := bounds[i]
		conds = append(conds, fmt.Sprintf("(phone_number_id < %[1]s OR phone_number_id = %[1]s AND message_id < %[2]s)", chString(b.phone), chString(b.message)))
	}
	return strings.Join(conds, " AND ")
}

// chString is s as a ClickHouse string literal.
func chString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// resolvePart resolves the messages of message_states where the condition
// where holds on its rows and having on their keys, and writes the rows
// that change, adding to st.
func (r *Resolver) resolvePart(ctx context.Context, where, having string, now uint32, st *PassStats, held func() error) error {
	states, err := r.states(ctx, where, having)
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
		if want[i].ok {
			want[i].key, want[i].dims = r.mem.key(want[i].row), r.mem.dims(want[i].row)
		}
	}
	have, err := r.netted(ctx, want, now, st)
	if err != nil {
		return err
	}
	rows, changed := diff(want, have)
	st.Changed += changed
	// In batches of InsertRows message rows, or a few more: a message's
	// rows (its old ones taken back, its new one) are never split, so that
	// every message nets exactly one row, old or new, whichever batches
	// landed. Each batch carries its rows' share of the hourly sums, so
	// that what landed before a failure is right as it stands: the pass
	// fails, the memory is forgotten, and the next pass nets the messages
	// against what funnel_messages then holds.
	for start := 0; start < len(rows); {
		end := min(start+r.cfg.InsertRows, len(rows))
		for end < len(rows) && rows[end].key() == rows[end-1].key() {
			end++
		}
		if err := held(); err != nil {
			return err
		}
		if err := r.insert(ctx, rows[start:end]); err != nil {
			return err
		}
		st.Inserts++
		st.Rows += end - start
		start = end
	}
	// Each message now nets exactly its resolved row.
	for _, s := range want {
		if s.ok {
			r.mem.put(s.key, s.dims, s.row, now)
		}
	}
	return nil
}

// stateSQL selects message_states, resolved into State's fields (named w,
// c, t, s, de, rd0, pl, fa, f), for the messages where the condition where
// holds on their rows and having ("": any) on their keys.
func (r *Resolver) stateSQL(where, having string) string {
	if having != "" {
		having = "\nHAVING " + having
	}
	nz := func(col, as string) string {
		return fmt.Sprintf("if(minIfMerge(%[1]s) > toDateTime(0), toUInt32(minIfMerge(%[1]s)), %[2]d) AS %[3]s", col, never, as)
	}
	return fmt.Sprintf(`SELECT phone_number_id, message_id, recipient_key,
       maxMerge(waba_id) AS w, maxMerge(campaign) AS c, maxMerge(template) AS t,
       %s, %s, %s, %s, %s, maxMerge(failed) AS f
FROM %s
WHERE %s
GROUP BY phone_number_id, message_id, recipient_key%s`,
		nz("sent_at", "s"), nz("delivered_at", "de"), nz("read_at", "rd0"), nz("played_at", "pl"), nz("failed_at", "fa"),
		r.table("message_states"), where, having)
}

func (r *Resolver) states(ctx context.Context, where, having string) ([]State, error) {
	rows, err := r.conn.Query(ctx, r.stateSQL(where, having))
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

// oldLifecycle names the table that holds the statuses stored before
// message_states existed: message_lifecycle_0007 (message_lifecycle until
// 0012_message_lifecycle_merge made that a Merge table over it and
// message_states), message_lifecycle before that migration, or none.
func (r *Resolver) oldLifecycle(ctx context.Context) (string, error) {
	var name string
	err := r.conn.QueryRow(ctx, `SELECT name FROM system.tables WHERE database = ?
  AND (name = 'message_lifecycle_0007' OR name = 'message_lifecycle' AND engine != 'Merge')
ORDER BY name DESC LIMIT 1`, r.db).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return name, err
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
		// Every backfill starts from an emptied table: a block like one
		// a cut-short backfill inserted is new data, never a retry.
		"insert_deduplicate": 0,
	}))
	// The statuses stored before message_states existed (copied again
	// after a backfill cut short: a copy changes no minimum or maximum).
	if src, err := r.oldLifecycle(ctx); err != nil {
		return fmt.Errorf("funnel: backfill: %w", err)
	} else if src != "" {
		if err := r.conn.Exec(bctx, fmt.Sprintf(`INSERT INTO %s
SELECT phone_number_id, message_id, recipient_key, month, waba_id, campaign, template,
       sent_at, delivered_at, read_at, played_at, failed_at, failed
FROM %s`, r.table("message_states"), r.table(src))); err != nil {
			return fmt.Errorf("funnel: backfill: %w", err)
		}
	}
	if err := held(); err != nil {
		return err
	}
	// On ClickHouse 18.16 replicas, a TRUNCATE through the replica that
	// has just inserted into funnel_messages (a backfill redone right after
	// one cut short) was seen to wait minutes: the leader, which runs it,
	// waited for its fetch of that replica's new part.
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
)`, r.table("funnel_messages"), rowColumns, r.stateSQL("1", ""),
		StageFailed, never, StageRead, StageDelivered, StageSent, countColumns)
	if err := held(); err != nil {
		return err
	}
	if err := r.conn.Exec(bctx, sql); err != nil {
		return fmt.Errorf("funnel: backfill: %w", err)
	}
	// The hourly sums of the message rows, as insert adds them.
	// UTC hours by arithmetic, as insert cuts them: toStartOfHour follows
	// the server's time zone.
	dims := "phone_number_id, toDateTime(intDiv(toUInt32(first), 3600) * 3600) AS hour, waba_id, campaign, template"
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

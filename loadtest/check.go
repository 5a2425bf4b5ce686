package loadtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// CheckConfig bounds the end-to-end check.
type CheckConfig struct {
	// Timeout is the longest wait for ClickHouse to hold every event the
	// ledger has (the service drains its queue after the run).
	Timeout time.Duration
	// Quiet ends the wait early once the counts have not changed for this
	// long.
	Quiet time.Duration
	// List is the most differences listed of each sort.
	List int
	// Since is when the run started: dead letters since then are counted.
	Since time.Time
	// Backlog, when set, tells how many bodies the service has yet to
	// process (stage 1's pending and unacked RAW messages). While it is
	// above 0, the wait goes on however long the counts stand still: after
	// a crash the redelivery waits out stage 1's ack wait, and a quiet
	// spell alone reported bodies still on their way as lost.
	Backlog func(context.Context) (uint64, error)
}

// quietOver reports whether the wait may end for want of progress since
// lastChange: the counts stood still for Quiet, and the service has no
// backlog (or none is known).
func (cfg CheckConfig) quietOver(ctx context.Context, lastChange time.Time) bool {
	if cfg.Quiet <= 0 || time.Since(lastChange) <= cfg.Quiet {
		return false
	}
	if cfg.Backlog == nil {
		return true
	}
	n, err := cfg.Backlog(ctx)
	return err == nil && n == 0
}

// DefaultCheckConfig waits up to 60 s, or 5 s without progress (and
// without backlog, when Backlog is set), and lists
// up to 20 differences of each sort.
func DefaultCheckConfig() CheckConfig {
	return CheckConfig{Timeout: time.Minute, Quiet: 5 * time.Second, List: 20}
}

// CheckResult compares ClickHouse with the ledger: every event whose body
// got a 200 must be there exactly once.
type CheckResult struct {
	Database string  `json:"database"`
	Drained  bool    `json:"drained"` // every acked event arrived before the timeout or the quiet time
	WaitS    float64 `json:"wait_s"`
	// Expected is the ledger's acked events; Found how many of them
	// ClickHouse has.
	Expected uint64 `json:"expected"`
	Found    uint64 `json:"found"`
	// Lost are acked events ClickHouse lacks. Duplicates are events held
	// under more than one event id (identity broken), a second identity of
	// one event, or events the run never posted (above the ledger).
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	// StoredUnacked are events whose bodies were posted but never got a
	// 200 within the run's attempts, and were stored anyway (a timeout
	// after the store). Meta would have posted them again: not an error.
	StoredUnacked uint64               `json:"stored_without_200"`
	ByKind        map[string]KindCheck `json:"by_kind"`
	// FailuresMatch tells whether failures_by_minute holds the ledger's
	// failure distribution (by number, minute and code) exactly.
	FailuresMatch bool     `json:"failures_match"`
	FailureDiffs  []string `json:"failure_differences,omitempty"`
	// DeadLetters counts dead letters received since the run started (any
	// sender's); UnknownKeys the rows of keys stage 1 did not know in the
	// run's bodies. Both should be 0.
	DeadLetters   uint64         `json:"dead_letters_since_start"`
	UnknownKeys   uint64         `json:"unknown_key_rows"`
	LostList      []string       `json:"lost_list,omitempty"`
	DuplicateList []string       `json:"duplicate_list,omitempty"`
	Storage       []TableStorage `json:"storage,omitempty"`
}

// KindCheck is the check of one kind of event.
type KindCheck struct {
	Expected   uint64 `json:"expected"`
	Found      uint64 `json:"found"`
	Lost       uint64 `json:"lost,omitempty"`
	Duplicates uint64 `json:"duplicates,omitempty"`
}

// TableStorage is what a table of the database holds on disk.
type TableStorage struct {
	Table             string `json:"table"`
	Rows              uint64 `json:"rows"`
	CompressedBytes   uint64 `json:"compressed_bytes"`
	UncompressedBytes uint64 `json:"uncompressed_bytes"`
}

// OK is true when nothing was lost or duplicated and the failure
// distribution matches, of a run that had events answered 200: with none
// (every POST refused, or a run misconfigured) there is nothing checked.
func (r *CheckResult) OK() bool {
	return r.Expected > 0 && r.Lost == 0 && r.Duplicates == 0 && r.FailuresMatch
}

// OpenClickHouse connects to the database of a DSN
// (clickhouse://host:9000/wahook; the database defaults to wahook), with
// the native protocol.
func OpenClickHouse(ctx context.Context, dsn string) (driver.Conn, string, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("clickhouse dsn: %w", err)
	}
	db := opts.Auth.Database
	if db == "" {
		db = "wahook"
	}
	opts.Auth.Database = "default"
	opts.DialTimeout = 5 * time.Second
	opts.ReadTimeout = time.Minute
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, "", fmt.Errorf("clickhouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("clickhouse %v: %w", opts.Addr, err)
	}
	return conn, db, nil
}

// checker holds one check's state.
type checker struct {
	conn    driver.Conn
	db      string
	l       *Ledger
	f       *fleet
	cfg     CheckConfig
	numbers string // SQL list of phone number ids
	wabas   string // SQL list of WABA ids
	res     *CheckResult
	// seen marks the events found, shaped like the ledger.
	seenOut, seenIn, seenEcho [][]uint8
	seenNumber                map[numberEventKey]bool
	// extraFailures are failed statuses stored without a 200.
	extraFailures map[FailureKey]uint64
}

// Check waits until ClickHouse holds the events of the ledger (or the
// timeout, or no progress for cfg.Quiet), then compares them one by one;
// while some are missing and the counts still move, it compares again.
func Check(ctx context.Context, conn driver.Conn, database string, l *Ledger, cfg CheckConfig) (*CheckResult, error) {
	if cfg.List <= 0 {
		cfg.List = 20
	}
	start := time.Now()
	first := newChecker(conn, database, l, cfg)
	if err := first.wait(ctx, start); err != nil {
		return nil, err
	}
	var lastFound uint64
	lastChange := time.Now()
	for {
		c := newChecker(conn, database, l, cfg)
		for _, step := range []func(context.Context) error{c.statuses, c.inbound, c.echoes, c.numberEvents, c.lost, c.failures, c.extras} {
			if err := step(ctx); err != nil {
				return nil, err
			}
		}
		res := c.res
		res.WaitS = time.Since(start).Seconds()
		res.Drained = res.Lost == 0
		if res.Found != lastFound {
			lastFound, lastChange = res.Found, time.Now()
		}
		if res.Lost == 0 && res.FailuresMatch || time.Since(start) > cfg.Timeout ||
			cfg.quietOver(ctx, lastChange) && !replicating(ctx, conn, database) {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// replicating reports whether the server the check reads from still has
// replication work queued for the database (parts to fetch, merges to
// make): a replica back from a restart holds what the others stored only
// once it has fetched it, so counts that stand still meanwhile are not
// the end. A server without replicated tables has none.
func replicating(ctx context.Context, conn driver.Conn, database string) bool {
	var queued uint64
	if err := conn.QueryRow(ctx, "SELECT toUInt64(sum(queue_size)) FROM system.replicas WHERE database = ?", database).Scan(&queued); err != nil {
		return false // not known: the quiet time decides, as before
	}
	return queued > 0
}

func newChecker(conn driver.Conn, database string, l *Ledger, cfg CheckConfig) *checker {
	return &checker{conn: conn, db: database, l: l, f: l.fleet, cfg: cfg,
		numbers: sqlList(l.fleet.phoneNumberIDs()), wabas: sqlList(l.fleet.wabas),
		res:        &CheckResult{Database: database, ByKind: map[string]KindCheck{}},
		seenOut:    make([][]uint8, len(l.fleet.numbers)),
		seenIn:     make([][]uint8, len(l.fleet.numbers)),
		seenEcho:   make([][]uint8, len(l.fleet.numbers)),
		seenNumber: map[numberEventKey]bool{}, extraFailures: map[FailureKey]uint64{},
	}
}

func (c *checker) q(s string) string { return strings.ReplaceAll(s, "{db}", c.db) }

// progress is the counts the wait watches.
type progress [4]uint64

func (c *checker) progress(ctx context.Context) (progress, error) {
	var p progress
	err := c.conn.QueryRow(ctx, c.q(`SELECT
	(SELECT uniqExact(event_id) FROM {db}.status_events WHERE phone_number_id IN `+c.numbers+`),
	(SELECT uniqExact(event_id) FROM {db}.inbound_messages WHERE phone_number_id IN `+c.numbers+`),
	(SELECT uniqExact(event_id) FROM {db}.management_events WHERE waba_id IN `+c.wabas+`
		AND field IN ('phone_number_quality_update', 'smb_message_echoes')),
	(SELECT toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute
		WHERE phone_number_id IN `+c.numbers+` AND origin = 'status')`)).Scan(&p[0], &p[1], &p[2], &p[3])
	return p, err
}

// wait polls until the counts reach the ledger's, or the timeout, or no
// change for cfg.Quiet.
func (c *checker) wait(ctx context.Context, start time.Time) error {
	t := c.l.Totals()
	k := t.ByKind
	want := progress{k["sent"] + k["delivered"] + k["read"] + k["failed"], k["inbound"],
		k["echo"] + k["quality"] + k["throughput_upgrade"], k["failed"]}
	var last progress
	lastChange := start
	for {
		p, err := c.progress(ctx)
		if err == nil {
			if p != last {
				last, lastChange = p, time.Now()
			}
			if p[0] >= want[0] && p[1] >= want[1] && p[2] >= want[2] && p[3] >= want[3] {
				return nil
			}
		}
		if time.Since(start) > c.cfg.Timeout || c.cfg.quietOver(ctx, lastChange) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *checker) list(dst *[]string, format string, a ...any) {
	if len(*dst) < c.cfg.List {
		*dst = append(*dst, fmt.Sprintf(format, a...))
	}
}

// found counts an event present under ids event ids in state st; first
// tells whether it is the first identity seen of the event.
func (c *checker) found(kind string, st ledgerState, ids uint64, first bool, what string) {
	kc := c.res.ByKind[kind]
	switch {
	case st == stateUnknown:
		kc.Duplicates += ids
		c.list(&c.res.DuplicateList, "%s %s: in ClickHouse, never posted", kind, what)
	case !first:
		kc.Duplicates += ids
		c.list(&c.res.DuplicateList, "%s %s: a second identity (other recipient or time)", kind, what)
	default:
		if ids > 1 {
			kc.Duplicates += ids - 1
			c.list(&c.res.DuplicateList, "%s %s: %d event ids", kind, what, ids)
		}
		if st == stateAcked {
			kc.Found++
		} else {
			c.res.StoredUnacked++
		}
	}
	c.res.ByKind[kind] = kc
}

func mark(s [][]uint8, n int32, seq uint32, bit uint8) (first bool) {
	return setBit(slot(s, n, seq), bit)
}

func (c *checker) statuses(ctx context.Context) error {
	rows, err := c.conn.Query(ctx, c.q(`SELECT phone_number_id, message_id, status, toUInt32(event_time),
	any(error_codes), uniqExact(event_id)
FROM {db}.status_events WHERE phone_number_id IN `+c.numbers+`
GROUP BY phone_number_id, message_id, status, recipient_hash, event_time`))
	if err != nil {
		return fmt.Errorf("status events: %w", err)
	}
	defer rows.Close()
	index := c.f.numberIndex()
	for rows.Next() {
		var pnid, mid, status string
		var at uint32
		var codes []int32
		var ids uint64
		if err := rows.Scan(&pnid, &mid, &status, &at, &codes, &ids); err != nil {
			return fmt.Errorf("status events: %w", err)
		}
		kind, n, seq, ok := c.f.parseMessageID(mid)
		s := statusIndex(status)
		what := pnid + " " + mid + " " + status
		if !ok || kind != idOutbound || index[pnid] != n || s < 0 {
			c.found("status", stateUnknown, ids, true, what)
			continue
		}
		st := c.l.statusState(n, seq, s)
		c.found(statusNames[s], st, ids, mark(c.seenOut, n, seq, 1<<s), what)
		if st == statePosted && s == statusFailed && len(codes) > 0 {
			c.extraFailures[FailureKey{int(n), int64(at) - int64(at)%60, codes[0]}]++
		}
	}
	return rows.Err()
}

func statusIndex(s string) int {
	for i, n := range statusNames {
		if n == s {
			return i
		}
	}
	return -1
}

func (c *checker) inbound(ctx context.Context) error {
	rows, err := c.conn.Query(ctx, c.q(`SELECT phone_number_id, message_id, uniqExact(event_id)
FROM {db}.inbound_messages WHERE phone_number_id IN `+c.numbers+`
GROUP BY phone_number_id, message_id`))
	if err != nil {
		return fmt.Errorf("inbound messages: %w", err)
	}
	defer rows.Close()
	index := c.f.numberIndex()
	for rows.Next() {
		var pnid, mid string
		var ids uint64
		if err := rows.Scan(&pnid, &mid, &ids); err != nil {
			return fmt.Errorf("inbound messages: %w", err)
		}
		kind, n, seq, ok := c.f.parseMessageID(mid)
		if !ok || kind != idInbound || index[pnid] != n {
			c.found("inbound", stateUnknown, ids, true, pnid+" "+mid)
			continue
		}
		c.found("inbound", c.l.messageState(false, n, seq), ids, mark(c.seenIn, n, seq, 1), pnid+" "+mid)
	}
	return rows.Err()
}

func (c *checker) echoes(ctx context.Context) error {
	rows, err := c.conn.Query(ctx, c.q(`SELECT subject_id, uniqExact(event_id)
FROM {db}.management_events WHERE waba_id IN `+c.wabas+` AND field = 'smb_message_echoes'
GROUP BY subject_id`))
	if err != nil {
		return fmt.Errorf("echoes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var mid string
		var ids uint64
		if err := rows.Scan(&mid, &ids); err != nil {
			return fmt.Errorf("echoes: %w", err)
		}
		kind, n, seq, ok := c.f.parseMessageID(mid)
		if !ok || kind != idEcho {
			c.found("echo", stateUnknown, ids, true, mid)
			continue
		}
		c.found("echo", c.l.messageState(true, n, seq), ids, mark(c.seenEcho, n, seq, 1), mid)
	}
	return rows.Err()
}

func (c *checker) numberEvents(ctx context.Context) error {
	rows, err := c.conn.Query(ctx, c.q(`SELECT display_phone_number, event, toUInt32(event_time), uniqExact(event_id)
FROM {db}.management_events WHERE waba_id IN `+c.wabas+` AND field = 'phone_number_quality_update'
GROUP BY display_phone_number, event, event_time`))
	if err != nil {
		return fmt.Errorf("number events: %w", err)
	}
	defer rows.Close()
	display := map[string]int32{}
	for i, n := range c.f.numbers {
		display[n.Display] = int32(i)
	}
	for rows.Next() {
		var disp, event string
		var at uint32
		var ids uint64
		if err := rows.Scan(&disp, &event, &at, &ids); err != nil {
			return fmt.Errorf("number events: %w", err)
		}
		what := disp + " " + event + " " + fmt.Sprint(at)
		n, okN := display[disp]
		ev := -1
		for i, e := range numberEvents {
			if e.event == event {
				ev = i
			}
		}
		kind := "quality"
		if ev == eventThroughput {
			kind = "throughput_upgrade"
		}
		if !okN || ev < 0 {
			c.found(kind, stateUnknown, ids, true, what)
			continue
		}
		key := numberEventKey{n, uint8(ev), int64(at)}
		first := !c.seenNumber[key]
		c.seenNumber[key] = true
		c.found(kind, c.l.numberEventState(n, uint8(ev), int64(at)), ids, first, what)
	}
	return rows.Err()
}

// lost lists the acked events that were not found.
func (c *checker) lost(context.Context) error {
	c.l.acked(func(e ackedEvent) {
		kind := e.kind.String()
		kc := c.res.ByKind[kind]
		kc.Expected++
		c.res.Expected++
		var found bool
		var what string
		switch e.kind {
		case KindSent, KindDelivered, KindRead, KindFailed:
			found = !setBit(slot(c.seenOut, e.number, e.seq), 1<<e.kind)
			what = c.f.numbers[e.number].PhoneNumberID + " " + c.f.messageID(idOutbound, e.number, e.seq) + " " + kind
		case KindInbound, KindEcho:
			s, k := c.seenIn, byte(idInbound)
			if e.kind == KindEcho {
				s, k = c.seenEcho, idEcho
			}
			found = !setBit(slot(s, e.number, e.seq), 1)
			what = c.f.numbers[e.number].PhoneNumberID + " " + c.f.messageID(k, e.number, e.seq)
		default:
			found = c.seenNumber[numberEventKey{e.number, e.event, e.at}]
			what = fmt.Sprintf("%s %s %d", c.f.numbers[e.number].Display, numberEvents[e.event].event, e.at)
		}
		if !found {
			kc.Lost++
			c.res.Lost++
			c.list(&c.res.LostList, "%s %s", kind, what)
		}
		c.res.ByKind[kind] = kc
	})
	for _, kc := range c.res.ByKind {
		c.res.Found += kc.Found
		c.res.Duplicates += kc.Duplicates
	}
	return nil
}

// failures compares failures_by_minute with the ledger's distribution, plus
// the failures stored without a 200.
func (c *checker) failures(ctx context.Context) error {
	want := c.l.Failures()
	for k, n := range c.extraFailures {
		want[k] += n
	}
	rows, err := c.conn.Query(ctx, c.q(`SELECT phone_number_id, toUInt32(minute), code, toUInt64(uniqExactMerge(error_keys))
FROM {db}.failures_by_minute WHERE phone_number_id IN `+c.numbers+` AND origin = 'status'
GROUP BY phone_number_id, minute, code`))
	if err != nil {
		return fmt.Errorf("failures by minute: %w", err)
	}
	defer rows.Close()
	index := c.f.numberIndex()
	got := map[FailureKey]uint64{}
	for rows.Next() {
		var pnid string
		var minute uint32
		var code int32
		var n uint64
		if err := rows.Scan(&pnid, &minute, &code, &n); err != nil {
			return fmt.Errorf("failures by minute: %w", err)
		}
		got[FailureKey{int(index[pnid]), int64(minute), code}] += n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	keys := map[FailureKey]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]FailureKey, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Number != b.Number {
			return a.Number < b.Number
		}
		if a.Minute != b.Minute {
			return a.Minute < b.Minute
		}
		return a.Code < b.Code
	})
	c.res.FailuresMatch = true
	for _, k := range sorted {
		if want[k] != got[k] {
			c.res.FailuresMatch = false
			c.list(&c.res.FailureDiffs, "%s minute %s code %d: ledger %d, failures_by_minute %d",
				c.f.numbers[k.Number].PhoneNumberID, time.Unix(k.Minute, 0).UTC().Format("2006-01-02 15:04"), k.Code, want[k], got[k])
		}
	}
	return nil
}

// extras counts dead letters and unknown keys, and reads the tables' sizes.
func (c *checker) extras(ctx context.Context) error {
	since := c.cfg.Since
	if since.IsZero() {
		since = time.Unix(c.l.Totals().FirstSecond, 0)
	}
	// These tables may not exist on an old schema; a missing answer is 0.
	// FINAL: a row written twice (a retried insert) is one.
	_ = c.conn.QueryRow(ctx, c.q(fmt.Sprintf("SELECT count() FROM {db}.dead_letters FINAL WHERE received_at >= toDateTime(%d)", since.Unix()))).Scan(&c.res.DeadLetters)
	_ = c.conn.QueryRow(ctx, c.q(`SELECT count() FROM {db}.management_events FINAL WHERE waba_id IN `+c.wabas+` AND field = '_unknown_keys'`)).Scan(&c.res.UnknownKeys)
	rows, err := c.conn.Query(ctx, `SELECT table, sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes)
FROM system.parts WHERE database = '`+strings.ReplaceAll(c.db, "'", "")+`' AND active
GROUP BY table ORDER BY table`)
	if err != nil {
		return nil // sizes are extra information
	}
	defer rows.Close()
	for rows.Next() {
		var t TableStorage
		if err := rows.Scan(&t.Table, &t.Rows, &t.CompressedBytes, &t.UncompressedBytes); err != nil {
			return nil
		}
		c.res.Storage = append(c.res.Storage, t)
	}
	return nil
}

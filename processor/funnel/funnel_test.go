package funnel_test

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// st is one status of a message as posted.
type st struct {
	name string
	at   time.Time
}

// msg is a message to one recipient, with the statuses ClickHouse holds.
type msg struct {
	phone, id, recipient, participant string
	campaign, template                string
	statuses                          []st
}

func (m *msg) key() string {
	r := m.recipient
	if m.participant != "" {
		r = m.participant
	}
	return m.phone + "/" + m.id + "/" + r
}

// world is what the test posted, and writes it to ClickHouse as stage 1
// would.
type world struct {
	t    *testing.T
	ch   *schematest.ClickHouseDB
	w    *chwriter.Writer
	msgs map[string]*msg
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(context.Background(), ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ch: ch, w: chwriter.New(ch.Conn, ch.Database), msgs: map[string]*msg{}}
}

// post writes statuses of messages in one insert, and remembers them.
func (w *world) post(items ...struct {
	m *msg
	s st
}) {
	w.t.Helper()
	var rows schema.Rows
	for _, it := range items {
		k := it.m.key()
		m := w.msgs[k]
		if m == nil {
			cp := *it.m
			cp.statuses = nil
			m = &cp
			w.msgs[k] = m
		}
		m.statuses = append(m.statuses, it.s)
		rows.Statuses = append(rows.Statuses, schema.StatusRow{
			Source:          schema.Source{App: "default", ReceivedAt: it.s.at},
			EventID:         fmt.Sprintf("%s/%s/%d", k, it.s.name, it.s.at.Unix()),
			EventTime:       it.s.at,
			WabaID:          "waba-1",
			PhoneNumberID:   m.phone,
			MessageID:       m.id,
			Status:          it.s.name,
			RecipientHash:   m.recipient,
			ParticipantHash: m.participant,
			Campaign:        m.campaign,
			Template:        m.template,
		})
	}
	if err := w.w.Write(context.Background(), &rows); err != nil {
		w.t.Fatal(err)
	}
}

func item(m *msg, name string, at time.Time) struct {
	m *msg
	s st
} {
	return struct {
		m *msg
		s st
	}{m, st{name, at}}
}

// expect is the funnel row of a message, computed from its statuses apart
// from the package's rule; ok is false when none counts.
func expect(m *msg) (funnel.Row, bool) {
	first := map[string]time.Time{}
	for _, s := range m.statuses {
		if f, ok := first[s.name]; !ok || s.at.Before(f) {
			first[s.name] = s.at
		}
	}
	earliest := func(names ...string) (time.Time, bool) {
		var out time.Time
		found := false
		for _, n := range names {
			if at, ok := first[n]; ok && (!found || at.Before(out)) {
				out, found = at, true
			}
		}
		return out, found
	}
	begin, ok := earliest("sent", "delivered", "read", "played", "failed")
	if !ok {
		return funnel.Row{}, false
	}
	r := funnel.Row{PhoneNumberID: m.phone, MessageID: m.id, RecipientKey: m.recipient, First: uint32(begin.Unix()),
		WabaID: "waba-1", Campaign: m.campaign, Template: m.template, Stage: funnel.StageSent, ToDeliver: -1, ToRead: -1}
	if m.participant != "" {
		r.RecipientKey = m.participant
	}
	if _, failed := first["failed"]; failed {
		r.Stage = funnel.StageFailed
		return r, true
	}
	sent, hasSent := first["sent"]
	if at, ok := earliest("delivered", "read", "played"); ok {
		r.Stage = funnel.StageDelivered
		if hasSent && !at.Before(sent) {
			r.ToDeliver = int32(at.Sub(sent) / time.Second)
		}
	}
	if at, ok := earliest("read", "played"); ok {
		r.Stage = funnel.StageRead
		if hasSent && !at.Before(sent) {
			r.ToRead = int32(at.Sub(sent) / time.Second)
		}
	}
	return r, true
}

type netted struct {
	funnel.Row
	n int64
}

// net reads what funnel_messages nets, by message.
func net(t *testing.T, ch *schematest.ClickHouseDB) map[string][]netted {
	t.Helper()
	rows, err := ch.Conn.Query(context.Background(), fmt.Sprintf(`SELECT phone_number_id, message_id, recipient_key, toUInt32(first),
       waba_id, campaign, template, stage, to_deliver, to_read, sum(n) AS c,
       [sum(n_sent), sum(n_delivered), sum(n_read), sum(n_failed), sum(n_to_deliver), sum(n_to_read)]
FROM %s.funnel_messages
WHERE kind = 0
GROUP BY phone_number_id, message_id, recipient_key, first, waba_id, campaign, template, stage, to_deliver, to_read
HAVING c != 0`, ch.Database))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]netted{}
	for rows.Next() {
		var x netted
		var sums []int64
		if err := rows.Scan(&x.PhoneNumberID, &x.MessageID, &x.RecipientKey, &x.First, &x.WabaID, &x.Campaign, &x.Template,
			&x.Stage, &x.ToDeliver, &x.ToRead, &x.n, &sums); err != nil {
			t.Fatal(err)
		}
		// The sums of a row are its multiplicity where it counts.
		want := x.Counts(int32(x.n))
		for i, v := range sums {
			if v != int64(want[i+1]) {
				t.Errorf("%+v: sums %v, want %v", x, sums, want[1:])
				break
			}
		}
		k := x.PhoneNumberID + "/" + x.MessageID + "/" + x.RecipientKey
		out[k] = append(out[k], x)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// mismatches lists how funnel_messages differs from one row per message
// as expect computes it.
func (w *world) mismatches() []string {
	w.t.Helper()
	got := net(w.t, w.ch)
	var out []string
	for k, m := range w.msgs {
		want, ok := expect(m)
		g := got[k]
		delete(got, k)
		switch {
		case !ok && len(g) != 0:
			out = append(out, fmt.Sprintf("%s: rows %+v, want none", k, g))
		case ok && (len(g) != 1 || g[0].n != 1 || g[0].Row != want):
			out = append(out, fmt.Sprintf("%s: rows %+v, want %+v once", k, g, want))
		}
	}
	for k, g := range got {
		out = append(out, fmt.Sprintf("%s: rows %+v of a message never posted", k, g))
	}
	out = append(out, w.sumMismatches()...)
	sort.Strings(out)
	return out
}

// sumMismatches lists where the hourly sums (kinds 1 to 3) differ from the
// sums of the message rows.
func (w *world) sumMismatches() []string {
	w.t.Helper()
	dims := "phone_number_id, waba_id, campaign, template"
	read := func(q string) map[string]int64 {
		rows, err := w.ch.Conn.Query(context.Background(), strings.ReplaceAll(q, "{T}", w.ch.Database+".funnel_messages"))
		if err != nil {
			w.t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				w.t.Fatal(err)
			}
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	var out []string
	for _, c := range []struct{ name, fromMessages, fromSums string }{
		{"counts",
			"SELECT concat(toString(tuple(" + dims + ", toStartOfHour(first))), c) AS k, sum(v) FROM {T} ARRAY JOIN ['n', 's', 'd', 'r', 'f', 'td', 'tr'] AS c, [n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read] AS v WHERE kind = 0 GROUP BY k",
			"SELECT concat(toString(tuple(" + dims + ", first)), c) AS k, sum(v) FROM {T} ARRAY JOIN ['n', 's', 'd', 'r', 'f', 'td', 'tr'] AS c, [n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read] AS v WHERE kind = 1 GROUP BY k"},
		{"to_deliver",
			"SELECT toString(tuple(" + dims + ", toStartOfHour(first), to_deliver)) AS k, sum(n_to_deliver) FROM {T} WHERE kind = 0 GROUP BY k",
			"SELECT toString(tuple(" + dims + ", first, to_deliver)) AS k, sum(n) FROM {T} WHERE kind = 2 GROUP BY k"},
		{"to_read",
			"SELECT toString(tuple(" + dims + ", toStartOfHour(first), to_read)) AS k, sum(n_to_read) FROM {T} WHERE kind = 0 GROUP BY k",
			"SELECT toString(tuple(" + dims + ", first, to_read)) AS k, sum(n) FROM {T} WHERE kind = 3 GROUP BY k"},
	} {
		want, got := read(c.fromMessages), read(c.fromSums)
		if fmt.Sprint(want) != fmt.Sprint(got) {
			out = append(out, fmt.Sprintf("%s: hourly sums %v, the message rows sum to %v", c.name, got, want))
		}
		if len(want) == 0 && len(w.msgs) > 0 && c.name == "counts" {
			out = append(out, "no hourly counts at all")
		}
	}
	return out
}

func (w *world) check() {
	w.t.Helper()
	for _, m := range w.mismatches() {
		w.t.Error(m)
	}
}

func pass(t *testing.T, r *funnel.Resolver) funnel.PassStats {
	t.Helper()
	st, err := r.Pass(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestResolve(t *testing.T) {
	const never = 4294967295
	base := funnel.State{PhoneNumberID: "p", MessageID: "m", RecipientKey: "r", Sent: never, Delivered: never, Read: never, Played: never, Failed: never}
	with := func(f func(*funnel.State)) funnel.State { s := base; f(&s); return s }
	for _, c := range []struct {
		name  string
		s     funnel.State
		ok    bool
		first uint32
		stage uint8
		d, r  int32
	}{
		{"no status that counts", base, false, 0, 0, 0, 0},
		{"sent", with(func(s *funnel.State) { s.Sent = 100 }), true, 100, funnel.StageSent, -1, -1},
		{"delivered", with(func(s *funnel.State) { s.Sent, s.Delivered = 100, 103 }), true, 100, funnel.StageDelivered, 3, -1},
		{"read implies delivered", with(func(s *funnel.State) { s.Sent, s.Read = 100, 110 }), true, 100, funnel.StageRead, 10, 10},
		{"played is read", with(func(s *funnel.State) { s.Sent, s.Delivered, s.Played = 100, 101, 150 }), true, 100, funnel.StageRead, 1, 50},
		{"delivered before sent came", with(func(s *funnel.State) { s.Delivered = 105 }), true, 105, funnel.StageDelivered, -1, -1},
		{"sent stamped after delivered", with(func(s *funnel.State) { s.Sent, s.Delivered = 107, 105 }), true, 105, funnel.StageDelivered, -1, -1},
		{"failed after read", with(func(s *funnel.State) {
			s.Sent, s.Read, s.Failed, s.HasFailed = 100, 110, 120, true
		}), true, 100, funnel.StageFailed, -1, -1},
		{"failed only", with(func(s *funnel.State) { s.Failed, s.HasFailed = 90, true }), true, 90, funnel.StageFailed, -1, -1},
	} {
		r, ok := funnel.Resolve(c.s)
		if ok != c.ok || (ok && (r.First != c.first || r.Stage != c.stage || r.ToDeliver != c.d || r.ToRead != c.r)) {
			t.Errorf("%s: %+v %v, want first %d stage %d durations %d %d", c.name, r, ok, c.first, c.stage, c.d, c.r)
		}
	}
}

// A first pass resolves everything; later passes follow new statuses:
// out of order (a sent stamped before the first status), late reads, a
// failure after delivery, duplicates, messages across months and group
// participants; and they write nothing when nothing changed.
func TestPassFollowsStatuses(t *testing.T) {
	// The defaults; and lookups of 300 message-days, with passes in parts
	// of about 3 messages: each message here spans 265 days or more, so
	// its days are split between lookups, and a pass has several parts.
	for _, small := range []bool{false, true} {
		t.Run(fmt.Sprintf("small=%v", small), func(t *testing.T) { testPassFollowsStatuses(t, small) })
	}
}

func testPassFollowsStatuses(t *testing.T, small bool) {
	w := newWorld(t)
	cfg := funnel.DefaultConfig()
	if small {
		cfg.LookupKeys, cfg.PassMessages = 300, 3
	}
	r := funnel.New(cfg, w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	a := &msg{phone: "p1", id: "wamid.A", recipient: "r1", campaign: "c1", template: "t1"}
	b := &msg{phone: "p1", id: "wamid.B", recipient: "r2", campaign: "c1", template: "t1"}
	c := &msg{phone: "p1", id: "wamid.C", recipient: "r3", campaign: "c2"}
	d := &msg{phone: "p2", id: "wamid.D", recipient: "r4", campaign: "c2"}
	g1 := &msg{phone: "p2", id: "wamid.G", recipient: "group-1", participant: "u1"}
	g2 := &msg{phone: "p2", id: "wamid.G", recipient: "group-1", participant: "u2"}
	x := &msg{phone: "p2", id: "wamid.X", recipient: "r5"}
	f := &msg{phone: "p1", id: "wamid.F", recipient: "r6"}
	monthEnd := time.Date(2026, 3, 31, 23, 59, 58, 0, time.UTC)
	// Sent long before today (years of clock skew or an old replay).
	old := &msg{phone: "p1", id: "wamid.OLD", recipient: "r8", campaign: "c1"}
	longAgo := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	// Its first status moves to the day before when its sent comes.
	mid := &msg{phone: "p2", id: "wamid.MID", recipient: "r9", campaign: "c3"}
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	w.post(item(a, "sent", t0), item(a, "delivered", t0.Add(3*time.Second)),
		item(b, "delivered", t0.Add(10*time.Second)),
		item(c, "sent", t0), item(c, "delivered", t0.Add(2*time.Second)),
		item(d, "sent", t0), item(d, "delivered", t0.Add(2*time.Second)),
		item(g1, "sent", t0), item(g2, "sent", t0), item(g1, "read", t0.Add(30*time.Second)),
		item(x, "deleted", t0),
		item(f, "sent", monthEnd),
		item(old, "sent", longAgo),
		item(mid, "delivered", midnight.Add(5*time.Second)))

	st := pass(t, r)
	if !st.Backfill || st.Watermark.IsZero() {
		t.Fatalf("first pass %+v, want a backfill", st)
	}
	w.check()
	if n := len(net(t, w.ch)); n != 9 {
		t.Errorf("%d messages resolved, want 9", n)
	}

	w.post(item(b, "sent", t0.Add(5*time.Second)),
		item(d, "read", t0.Add(2*time.Hour)),
		item(a, "delivered", t0.Add(3*time.Second)), // Meta's retry of the same status
		item(c, "failed", t0.Add(4*time.Second)),
		item(f, "delivered", monthEnd.Add(7*time.Second)),
		item(g2, "delivered", t0.Add(9*time.Second)),
		item(old, "delivered", longAgo.Add(time.Hour)),
		item(mid, "sent", midnight.Add(-2*time.Second)))
	w.post(item(&msg{phone: "p1", id: "wamid.E", recipient: "r7", campaign: "c9"}, "sent", t0.Add(time.Minute)))
	st = pass(t, r)
	if st.Backfill || st.Changed != 8 {
		t.Errorf("second pass %+v, want 8 messages changed (b, c, d, f, g2, old, mid and e)", st)
	}
	t.Logf("second pass: %+v", st)
	// 11 messages of 265 days or more each (old's 400): ~3,000
	// message-days; 9 statuses or more since the slack's start.
	if small && (st.Lookups < 9 || st.Parts < 3) {
		t.Errorf("second pass %+v: want 9 lookups or more of 300 message-days, in 3 parts or more", st)
	}
	if !small && (st.Lookups != 1 || st.Parts != 1) {
		t.Errorf("second pass %+v: want 1 lookup, in 1 part", st)
	}
	w.check()

	st = pass(t, r)
	if st.Changed != 0 || st.Rows != 0 {
		t.Errorf("a pass with nothing new wrote %+v", st)
	}
	// Merges change nothing.
	if err := w.ch.Conn.Exec(context.Background(), "OPTIMIZE TABLE "+w.ch.Database+".funnel_messages FINAL"); err != nil {
		t.Fatal(err)
	}
	w.check()
}

// What a cut-short insert or a second resolver leaves behind is repaired by
// the next pass over the message: a row counted twice, a row taken back
// without its replacement, a stray row; and a backfill cut short starts
// again from empty.
func TestPassRepairsWhatItFinds(t *testing.T) {
	w := newWorld(t)
	r := funnel.New(funnel.DefaultConfig(), w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	a := &msg{phone: "p1", id: "wamid.A", recipient: "r1", campaign: "c1"}
	b := &msg{phone: "p1", id: "wamid.B", recipient: "r2", campaign: "c1"}
	c := &msg{phone: "p1", id: "wamid.C", recipient: "r3", campaign: "c1"}
	w.post(item(a, "sent", t0), item(b, "sent", t0), item(c, "sent", t0))
	junk := func(m *msg, stage uint8, n int8) {
		t.Helper()
		batch, err := w.ch.Conn.PrepareBatch(context.Background(), "INSERT INTO "+w.ch.Database+
			".funnel_messages (kind, phone_number_id, message_id, recipient_key, first, waba_id, campaign, template, stage, to_deliver, to_read, "+
			"n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read)")
		if err != nil {
			t.Fatal(err)
		}
		want, ok := expect(w.msgs[m.key()])
		if !ok {
			t.Fatalf("%s: no row to damage", m.key())
		}
		want.Stage, want.ToDeliver, want.ToRead = stage, -1, -1
		c := want.Counts(int32(n))
		// The message row and its share of the hourly counts, in one
		// insert, as the resolver writes them.
		if err := batch.Append(uint8(funnel.KindMessage), m.phone, m.id, m.recipient, time.Unix(int64(want.First), 0).UTC(), "waba-1", m.campaign, "", stage, int32(-1), int32(-1),
			c[0], c[1], c[2], c[3], c[4], c[5], c[6]); err != nil {
			t.Fatal(err)
		}
		if err := batch.Append(uint8(funnel.KindCounts), m.phone, "", "", time.Unix(int64(want.First/funnel.SumSeconds*funnel.SumSeconds), 0).UTC(), "waba-1", m.campaign, "", uint8(0), int32(0), int32(0),
			c[0], c[1], c[2], c[3], c[4], c[5], c[6]); err != nil {
			t.Fatal(err)
		}
		if err := batch.Send(); err != nil {
			t.Fatal(err)
		}
	}
	// A backfill cut short: rows, no watermark.
	junk(a, funnel.StageRead, 1)
	if st := pass(t, r); !st.Backfill {
		t.Fatalf("%+v, want a backfill", st)
	}
	w.check()

	junk(a, funnel.StageSent, 1)  // a's row twice
	junk(b, funnel.StageSent, -1) // b's row taken back, not replaced
	junk(c, funnel.StageRead, 1)  // a stray row beside c's
	if got := w.mismatches(); len(got) != 3 {
		t.Fatalf("the damage is not visible: %v", got)
	}
	// Each message gets a status again (a duplicate), so the pass looks at it.
	w.post(item(a, "sent", t0), item(b, "sent", t0), item(c, "sent", t0))
	if st := pass(t, r); st.Changed != 3 {
		t.Errorf("%+v, want 3 messages repaired", st)
	}
	w.check()
}

// On a database whose statuses predate message_states (an upgrade from
// before 0010_funnel), the migration that makes message_lifecycle a Merge
// table over message_states and the renamed old table (0012) keeps showing
// them, and the resolver's first pass copies them into message_states and
// resolves them. The migration run again, after a crash between its rename
// and its create or after it finished, changes nothing.
func TestBackfillAfterUpgrade(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	before := fstest.MapFS{}
	var upgrade []byte
	err := fs.WalkDir(migrations.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Files(), path)
		switch {
		case err != nil:
			return err
		case strings.HasPrefix(path, "0012_"):
			upgrade = b
		case path < "0012_":
			before[path] = &fstest.MapFile{Data: b}
		}
		return nil
	})
	if err != nil || upgrade == nil {
		t.Fatalf("migrations: %v, 0012 found: %v", err, upgrade != nil)
	}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(before)); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ch: ch, w: chwriter.New(ch.Conn, ch.Database), msgs: map[string]*msg{}}
	a := &msg{phone: "p1", id: "wamid.A", recipient: "r1", campaign: "c1"}
	b := &msg{phone: "p2", id: "wamid.B", recipient: "r2", campaign: "c2"}
	w.post(item(a, "sent", t0), item(a, "read", t0.Add(time.Minute)), item(b, "sent", t0), item(b, "failed", t0.Add(time.Second)))
	for _, table := range []string{"message_states", "funnel_touched"} {
		if err := ch.Conn.Exec(ctx, "TRUNCATE TABLE "+ch.Database+"."+table); err != nil {
			t.Fatal(err)
		}
	}
	lifecycle := func() string {
		t.Helper()
		var out []string
		rows, err := ch.Conn.Query(ctx, `SELECT phone_number_id, message_id, maxMerge(campaign), toUInt32(minIfMerge(sent_at)),
       toUInt32(minIfMerge(read_at)), maxMerge(failed) FROM `+ch.Database+`.message_lifecycle
GROUP BY phone_number_id, message_id, recipient_key ORDER BY phone_number_id, message_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var p, id, c string
			var sent, read uint32
			var failed uint8
			if err := rows.Scan(&p, &id, &c, &sent, &read, &failed); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(p, id, c, sent-uint32(t0.Unix()), read, failed))
		}
		return strings.Join(out, "; ")
	}
	old := lifecycle()
	if !strings.Contains(old, "wamid.A") || !strings.Contains(old, "wamid.B") {
		t.Fatalf("message_lifecycle before the upgrade: %q", old)
	}
	// A process that died after the migration's first two statements.
	for _, q := range []string{
		"DROP TABLE IF EXISTS {db}.message_lifecycle_mv",
		"CREATE TABLE IF NOT EXISTS {db}.message_lifecycle_merge AS {db}.message_states ENGINE = Merge({db}, '^message_states$|^message_lifecycle_0007$')",
	} {
		if err := ch.Conn.Exec(ctx, strings.ReplaceAll(q, "{db}", ch.Database)); err != nil {
			t.Fatal(err)
		}
	}
	both := fstest.MapFS{"0012_upgrade.sql": &fstest.MapFile{Data: upgrade}}
	for k, v := range before {
		both[k] = v
	}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(both)); err != nil {
		t.Fatal(err)
	}
	var engine string
	if err := ch.Conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = 'message_lifecycle'", ch.Database).Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "Merge" {
		t.Fatalf("message_lifecycle is a %s table after the upgrade, want Merge", engine)
	}
	if got := lifecycle(); got != old {
		t.Fatalf("message_lifecycle after the upgrade:\n%s\nwant\n%s", got, old)
	}
	r := funnel.New(funnel.DefaultConfig(), ch.Conn, ch.Database, nil, zaptest.NewLogger(t))
	if st := pass(t, r); !st.Backfill {
		t.Fatalf("%+v, want a backfill", st)
	}
	w.check()
	var states uint64
	if err := ch.Conn.QueryRow(ctx, "SELECT uniqExact(message_id) FROM "+ch.Database+".message_states").Scan(&states); err != nil || states != 2 {
		t.Fatalf("message_states holds %d messages after the first pass (%v), want the 2 stored before it existed", states, err)
	}
	// The whole file again, as after a crash before it was recorded.
	both["0013_again.sql"] = &fstest.MapFile{Data: upgrade}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(both)); err != nil {
		t.Fatalf("0012 again: %v", err)
	}
	if got := lifecycle(); got != old {
		t.Fatalf("message_lifecycle after 0012 ran again:\n%s\nwant\n%s", got, old)
	}
	var tables string
	if err := ch.Conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(concat(name, ':', engine)), ' ') FROM (SELECT name, engine FROM system.tables WHERE database = ? AND name LIKE 'message_lifecycle%' ORDER BY name)", ch.Database).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if want := "message_lifecycle:Merge message_lifecycle_0007:AggregatingMergeTree"; tables != want {
		t.Fatalf("tables %s, want %s", tables, want)
	}
	// Should the old table be back under its name (a process applying 0007
	// without the lock), the migration fails instead of recording itself.
	if err := ch.Conn.Exec(ctx, "RENAME TABLE "+ch.Database+".message_lifecycle TO "+ch.Database+".message_lifecycle_moved"); err != nil {
		t.Fatal(err)
	}
	if err := ch.Conn.Exec(ctx, "CREATE TABLE "+ch.Database+".message_lifecycle AS "+ch.Database+".message_lifecycle_0007"); err != nil {
		t.Fatal(err)
	}
	both["0014_again.sql"] = &fstest.MapFile{Data: upgrade}
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database, migrations.WithFiles(both)); err == nil {
		t.Fatal("0012 recorded with message_lifecycle an AggregatingMergeTree")
	}
	// Later statuses of those messages find their state whole.
	w.post(item(a, "delivered", t0.Add(2*time.Second)))
	pass(t, r)
	w.check()
}

// A pass reads funnel_touched from its watermark less the slack: an insert
// that became visible after a pass read, stamped up to the slack before that
// pass's watermark, is still resolved; one stamped earlier than that is not
// (the slack is the bound).
func TestPassSlack(t *testing.T) {
	for _, c := range []struct {
		name     string
		ahead    time.Duration // the watermark's lead over the insert's stamp
		resolved bool
	}{
		{"within the slack", 10 * time.Second, true},
		{"beyond the slack", 40 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			cfg := funnel.DefaultConfig()
			cfg.Slack = 15 * time.Second
			r := funnel.New(cfg, w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
			pass(t, r) // the backfill of nothing
			h := &msg{phone: "p1", id: "wamid.H", recipient: "r1"}
			w.post(item(h, "sent", t0))
			// As if a pass had begun c.ahead after the insert was stamped
			// and had not seen it.
			var stamped uint32
			if err := w.ch.Conn.QueryRow(context.Background(), "SELECT toUInt32(max(inserted_at)) FROM "+w.ch.Database+".funnel_touched").Scan(&stamped); err != nil {
				t.Fatal(err)
			}
			setWatermark(t, w.ch, time.Unix(int64(stamped), 0).Add(c.ahead))
			pass(t, r)
			if got := len(net(t, w.ch)) == 1; got != c.resolved {
				t.Errorf("resolved %v, want %v", got, c.resolved)
			}
		})
	}
}

// A pass resolves the (message, recipient) pairs that got a status, not
// every recipient of those messages: the other participants of a group
// message are neither returned by its query nor written.
func TestPassReadsTouchedRecipientsOnly(t *testing.T) {
	w := newWorld(t)
	r := funnel.New(funnel.DefaultConfig(), w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	var g [3]*msg
	for i := range g {
		g[i] = &msg{phone: "p1", id: "wamid.G", recipient: "group-1", participant: fmt.Sprintf("u%d", i), campaign: "c1"}
		w.post(item(g[i], "sent", t0))
	}
	if st := pass(t, r); !st.Backfill {
		t.Fatalf("first pass %+v, want a backfill", st)
	}
	// Only what comes next is touched (the backfill resolved the rest).
	if err := w.ch.Conn.Exec(context.Background(), "TRUNCATE TABLE "+w.ch.Database+".funnel_touched"); err != nil {
		t.Fatal(err)
	}
	w.post(item(g[1], "delivered", t0.Add(4*time.Second)))
	if st := pass(t, r); st.Messages != 1 || st.Changed != 1 {
		t.Errorf("pass %+v, want 1 message read and changed (u1's)", st)
	}
	w.check()
}

func setWatermark(t testing.TB, ch *schematest.ClickHouseDB, at time.Time) {
	t.Helper()
	b, err := ch.Conn.PrepareBatch(context.Background(), "INSERT INTO "+ch.Database+".funnel_resolver (id, watermark, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(uint8(1), at.UTC(), uint64(time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// One instance holds the lease at a time; a silent holder loses it after the
// TTL, and finds it taken; a released lease is free at once.
func TestLease(t *testing.T) {
	ctx := context.Background()
	js := jetStream(t)
	ttl := time.Second
	l1, err := funnel.NewLease(ctx, js, funnel.LeaseKey, "one", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := funnel.NewLease(ctx, js, funnel.LeaseKey, "two", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	hold := func(l *funnel.Lease) bool {
		t.Helper()
		ok, err := l.Hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !hold(l1) || hold(l2) || !hold(l1) || !l1.Valid() {
		t.Fatal("the first instance should take and renew the lease, the second not get it")
	}
	// l1 goes silent: l2 gets it once the entry has expired.
	testutil.Eventually(t, 5*time.Second, "the lease of a silent holder to expire", func() (bool, string) {
		return hold(l2), "the second instance does not hold it"
	})
	if l1.Valid() {
		t.Error("a silent holder still believes it may write")
	}
	if hold(l1) {
		t.Fatal("two holders")
	}
	l2.Release(ctx)
	if !hold(l1) {
		t.Fatal("a released lease is not free")
	}
}

// Two resolvers run against one database while statuses keep coming: only
// the lease holder passes, and the funnel ends exact; with messages sent
// before the resolvers began, and with messages sent after (which each
// tenure's memory takes for new, or for rows dated ahead of it).
func TestTwoResolvers(t *testing.T) {
	for _, c := range []struct {
		name string
		base time.Time
	}{{"sent before", t0}, {"sent after", time.Now().Add(time.Minute).Truncate(time.Second)}} {
		t.Run(c.name, func(t *testing.T) { testTwoResolvers(t, c.base) })
	}
}

func testTwoResolvers(t *testing.T, base time.Time) {
	w := newWorld(t)
	js := jetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	// Passes a second apart at most: by default one that took 2 s on
	// loaded cores puts the next 18 s off.
	cfg := funnel.Config{Interval: 100 * time.Millisecond, MaxWait: time.Second, Slack: time.Second, LeaseTTL: time.Second}
	names := []string{"sent", "delivered", "read"}
	post := func(round int) {
		for i := range 40 {
			m := &msg{phone: fmt.Sprint("p", i%3), id: fmt.Sprint("wamid.", i), recipient: fmt.Sprint("r", i), campaign: fmt.Sprint("c", i%4)}
			// Statuses arrive out of order: read before sent in odd messages.
			name := names[round]
			if i%2 == 1 {
				name = names[2-round]
			}
			w.post(item(m, name, base.Add(time.Duration(i*10+[]int{0, 3, 9}[slicesIndex(names, name)])*time.Second)))
		}
	}
	post(0) // before either starts: both want to backfill
	var wg sync.WaitGroup
	var leases []*funnel.Lease
	for i := range 2 {
		lease, err := funnel.NewLease(ctx, js, funnel.LeaseKey, fmt.Sprint("instance-", i), cfg.LeaseTTL, 1)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
		r := funnel.New(cfg, w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx, lease) }()
	}
	// Never do both believe they may write.
	both := make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if leases[0].Valid() && leases[1].Valid() {
				select {
				case both <- struct{}{}:
				default:
				}
			}
			time.Sleep(time.Millisecond) // the watcher's sampling interval
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	for round := 1; round < 3; round++ {
		post(round)
		// Rounds spread over the passes of both instances, so that
		// the lease changes hands between them: the pacing is the test.
		time.Sleep(150 * time.Millisecond)
	}
	testutil.Eventually(t, 40*time.Second, "the funnel to converge", func() (bool, string) {
		got := w.mismatches()
		return len(got) == 0, fmt.Sprint(got)
	})
	select {
	case <-both:
		t.Error("both instances held the lease at once")
	default:
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// aheadWorld is a world with a resolver past its first pass (the backfill
// of nothing), and a time for statuses sent after the resolver's memory
// begins (its next pass), by its clock: ahead of it here, so that the test
// need not wait.
func aheadWorld(t *testing.T) (*world, *funnel.Resolver, time.Time) {
	w := newWorld(t)
	r := funnel.New(funnel.DefaultConfig(), w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	pass(t, r)
	return w, r, time.Now().Add(10 * time.Minute).Truncate(time.Second)
}

// A resolver that holds the lease remembers the rows it wrote and knows
// which messages are new, so that it looks up only the others; what it
// skips still nets exactly. A second resolver (a new tenure) remembers
// nothing, and still does not take rows dated ahead of its start, written
// by the first, for new ones.
func TestPassRemembers(t *testing.T) {
	w, r, base := aheadWorld(t)
	var msgs []*msg
	for i := range 10 {
		msgs = append(msgs, &msg{phone: "p1", id: fmt.Sprint("wamid.N", i), recipient: fmt.Sprint("r", i), campaign: "c1"})
	}
	oldMsg := &msg{phone: "p1", id: "wamid.OLD", recipient: "r0", campaign: "c1"}
	postAll := func(name string, after time.Duration) {
		t.Helper()
		var items []struct {
			m *msg
			s st
		}
		for i, m := range msgs {
			items = append(items, item(m, name, base.Add(time.Duration(i)*time.Second+after)))
		}
		w.post(items...)
	}
	postAll("sent", 0)
	w.post(item(oldMsg, "sent", t0))
	st := pass(t, r)
	t.Logf("first pass: %+v", st)
	if st.New != 10 || st.Known != 0 || st.Lookups != 1 || st.Changed != 11 {
		t.Errorf("first pass %+v: want the 10 messages new, one lookup (of the message sent before), 11 changed", st)
	}
	w.check()

	postAll("delivered", 2*time.Second)
	w.post(item(oldMsg, "delivered", t0.Add(time.Second)))
	st = pass(t, r)
	t.Logf("second pass: %+v", st)
	if st.Known != 11 || st.New != 0 || st.Lookups != 0 || st.Changed != 11 {
		t.Errorf("second pass %+v: want all 11 known, no lookup, 11 changed", st)
	}
	w.check()

	// A new tenure: rows ahead of its start are not new to it.
	r2 := funnel.New(funnel.DefaultConfig(), w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	postAll("read", 5*time.Second)
	st = pass(t, r2)
	t.Logf("a new resolver's pass: %+v", st)
	if st.Known != 0 || st.New != 0 || st.Lookups == 0 || st.Changed != 10 {
		t.Errorf("new resolver %+v: want every message looked up, 10 changed", st)
	}
	w.check()
}

// With room for few messages, the memory forgets its oldest and looks them
// up again, and keeps what it would forget that is dated ahead of its h:
// the funnel stays exact, pass after pass. Unbounded, it looks up only the
// messages it never saw that were sent before its start.
func TestPassMemoryBounded(t *testing.T) {
	run := func(size int) funnel.PassStats {
		w := newWorld(t)
		cfg := funnel.DefaultConfig()
		cfg.MemoryMessages = size
		r := funnel.New(cfg, w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
		pass(t, r)
		ahead := time.Now().Add(10 * time.Minute).Truncate(time.Second)
		var total funnel.PassStats
		names := []string{"sent", "delivered", "read"}
		for round := range 6 {
			// Each round sends 3 messages (one dated before the memory
			// began, two after) and moves those of the two rounds before on.
			var items []struct {
				m *msg
				s st
			}
			for back := 0; back < 3 && back <= round; back++ {
				for i := range 3 {
					m := &msg{phone: "p2", id: fmt.Sprint("wamid.R", round-back, "-", i), recipient: fmt.Sprint("r", i), campaign: "c2"}
					base := ahead
					if i == 0 {
						base = t0
					}
					items = append(items, item(m, names[back], base.Add(time.Duration((round-back)*60+back*5+i)*time.Second)))
				}
			}
			w.post(items...)
			st := pass(t, r)
			total.Messages += st.Messages
			total.Known += st.Known
			total.New += st.New
			w.check()
		}
		t.Logf("memory of %d messages, 6 passes: %d messages, %d known, %d new, %d looked up",
			size, total.Messages, total.Known, total.New, total.Messages-total.Known-total.New)
		return total
	}
	all := run(0)
	// 18 messages first seen: 6 sent before the memory began, looked up,
	// and 12 new; every other state read (a pass reads the slack before
	// its watermark again) is known.
	if all.New != 12 || all.Messages-all.Known-all.New != 6 {
		t.Errorf("unbounded: %+v, want 12 new and 6 looked up", all)
	}
	few := run(4)
	if looked := few.Messages - few.Known - few.New; looked <= 6 || few.Known == 0 {
		t.Errorf("memory of 4: %+v (%d looked up), want more than 6 looked up and some known", few, looked)
	}
}

// A message the resolver remembers whose later status brings another
// campaign nets its old row with the old campaign, which the memory no
// longer has in full: the resolver looks it up instead of recalling it, and
// the funnel stays exact; the others are recalled.
func TestPassRedimensioned(t *testing.T) {
	w, r, base := aheadWorld(t)
	var msgs []*msg
	for i := range 3 {
		msgs = append(msgs, &msg{phone: "p3", id: fmt.Sprint("wamid.D", i), recipient: fmt.Sprint("r", i), campaign: "c1", template: "t1"})
	}
	for _, m := range msgs {
		w.post(item(m, "sent", base))
	}
	if st := pass(t, r); st.New != 3 || st.Changed != 3 {
		t.Fatalf("first pass %+v: want 3 new, 3 changed", st)
	}
	w.check()
	// A larger campaign (the state keeps the largest) for one message, a
	// larger template for another.
	w.msgs[msgs[0].key()].campaign = "c9"
	w.msgs[msgs[1].key()].template = "t9"
	for _, m := range msgs {
		w.post(item(m, "delivered", base.Add(2*time.Second)))
	}
	st := pass(t, r)
	t.Logf("second pass: %+v", st)
	if st.Known != 1 || st.New != 0 || st.Lookups == 0 || st.Changed != 3 {
		t.Errorf("second pass %+v: want 1 recalled, the 2 redimensioned looked up, 3 changed", st)
	}
	w.check()
}

// A part's rows go out in INSERTs of about InsertRows message rows, each
// with its own share of the hourly sums and never splitting a message's
// rows: a pass cut short between two of them leaves every message netting
// one row (old or new) and sums that match the message rows, and the next
// pass nets the messages against what landed and ends exact.
func TestPassInsertsInBatches(t *testing.T) {
	w := newWorld(t)
	cfg := funnel.DefaultConfig()
	cfg.InsertRows = 3
	r := funnel.New(cfg, w.ch.Conn, w.ch.Database, nil, zaptest.NewLogger(t))
	if st := pass(t, r); !st.Backfill {
		t.Fatalf("%+v, want a backfill first", st)
	}
	var msgs []*msg
	for i := range 10 {
		msgs = append(msgs, &msg{phone: "p1", id: fmt.Sprint("wamid.B", i), recipient: fmt.Sprint("r", i), campaign: fmt.Sprint("campaign-", i%4)})
	}
	postAll := func(name string, after time.Duration) {
		t.Helper()
		var items []struct {
			m *msg
			s st
		}
		for i, m := range msgs {
			items = append(items, item(m, name, t0.Add(time.Duration(i)*time.Second+after)))
		}
		w.post(items...)
	}
	postAll("sent", 0)
	st := pass(t, r)
	if st.Rows != 10 || st.Inserts != 4 {
		t.Errorf("%+v: want 10 rows in 4 inserts of 3 at most", st)
	}
	w.check()

	// Every message delivered: a row taken back and a new one each, 20
	// rows in 5 inserts of 4 (3 rows would split a message); the lease is
	// lost after the third.
	postAll("delivered", 2*time.Second)
	checks := 0
	st, err := r.Pass(context.Background(), func() bool { checks++; return checks <= 3 })
	if err == nil || !strings.Contains(err.Error(), "lease lost") || st.Inserts != 3 || st.Rows != 12 {
		t.Fatalf("%+v, %v: want the pass to stop after 3 inserts of 4 rows, its lease lost", st, err)
	}
	if got := w.mismatches(); len(got) == 0 {
		t.Error("the pass cut short left the funnel as if it had finished")
	}
	for _, m := range msgs {
		if g := net(t, w.ch)[m.key()]; len(g) != 1 || g[0].n != 1 {
			t.Errorf("%s nets %+v after the pass cut short, want one row, old or new", m.key(), g)
		}
	}
	if got := w.sumMismatches(); len(got) != 0 {
		t.Errorf("the inserts that landed left the hourly sums apart from their message rows: %v", got)
	}
	st = pass(t, r)
	if st.Changed == 0 || st.Inserts == 0 {
		t.Errorf("%+v: want the next pass to finish the work", st)
	}
	w.check()
	if err := w.ch.Conn.Exec(context.Background(), "OPTIMIZE TABLE "+w.ch.Database+".funnel_messages FINAL"); err != nil {
		t.Fatal(err)
	}
	w.check()
}

package funnel

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// This file is what a resolver remembers of funnel_messages while it holds
// the lease, so that a pass looks up only the messages whose rows it cannot
// know. Looking a message's rows up costs a read of a granule of
// funnel_messages per message (message ids are random, so each names its
// own), which made the lookups the largest part of the whole system's CPU
// (docs/performance.md); most messages a pass sees are either new or were
// resolved by one of the last passes.
//
// Under the lease the resolver is funnel_messages' only writer, and after it
// writes a message's difference the message nets exactly the row it
// resolved. The memory holds, for a tenure of the lease:
//
//   - known: the row each message it resolved nets now (in two generations,
//     so that it stays bounded), by the hash of the message's key, with the
//     row's strings hashed too (memKey, memRow);
//   - h, a time: every message with rows in funnel_messages that is not
//     known has a first status at or before h, or is in future;
//   - future: the messages that had rows with a first status after h when
//     the tenure began (rows dated ahead of the clock, written by an earlier
//     tenure; normally none).
//
// A message's first status only ever moves earlier, so a message that is
// neither known nor in future and whose first status is after h has no
// rows: it is new, and its lookup is skipped. Forgetting the oldest
// generation moves h up to that generation's start, keeping the rows dated
// after it (into the young generation), so the statement stays true. A
// pass that fails, loses the lease or backfills, and a new tenure, forget
// everything: the next pass begins again with h its own start.
type memory struct {
	valid bool
	h     uint32
	// young and old are the known rows; youngStart is the start of the
	// pass that began young.
	young, old map[memKey]memRow
	youngStart uint32
	future     map[memKey]uint32
	// size is how many known messages make a generation full.
	size int
	// seeds key the hashes of the memory's keys and dimensions.
	seeds [2]maphash.Seed
}

// memKey is a message's key (phone number id, message id, recipient key),
// or a row's dimensions (WABA, campaign, template), hashed to 128 bits by
// two independently seeded hashes: two keys alike by chance, among the
// memory's 100,000, would take about 10^28 passes to meet. A message's
// strings are not kept: the pass has them in the state it read (its
// campaign alone is up to 512 characters, ~1 KB a message in all).
type memKey struct{ a, b uint64 }

// memRow is what the memory keeps of the row a message nets: the row but
// for the strings, which a pass takes from the message's state when they
// hash to dims.
type memRow struct {
	dims              memKey
	first             uint32
	toDeliver, toRead int32
	stage             uint8
}

// recall is what the memory knows of a message's rows.
type recall uint8

const (
	// unknown: the memory does not know the message's rows.
	unknown recall = iota
	// remembered: the message nets the row recalled.
	remembered
	// redimensioned: the message nets a row the memory knows, but with
	// dimensions other than the state's (a later status brought another
	// campaign or template): looked up, as the strings are not kept.
	redimensioned
)

// DefaultMemoryMessages bounds what a resolver remembers to ~7 MB (about
// 75 bytes a message, measured by TestMemoryFootprint: the maps' entries
// and their room to grow).
const DefaultMemoryMessages = 100_000

func newMemory(size int) memory {
	return memory{size: size, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
}

func (m *memory) forget() {
	*m = memory{size: m.size, seeds: m.seeds}
}

// hash returns the 128-bit hash of three strings: the hash a map of
// [3]string would use, once per seed, so that the same bytes split
// otherwise between the three hash apart.
func (m *memory) hash(x, y, z string) memKey {
	v := [3]string{x, y, z}
	return memKey{maphash.Comparable(m.seeds[0], v), maphash.Comparable(m.seeds[1], v)}
}

func (m *memory) key(r Row) memKey { return m.hash(r.PhoneNumberID, r.MessageID, r.RecipientKey) }

func (m *memory) dims(r Row) memKey { return m.hash(r.WabaID, r.Campaign, r.Template) }

// beginMemory makes the memory valid at a pass that started at now (the
// server's clock), reading the messages with rows dated after it.
func (r *Resolver) beginMemory(ctx context.Context, now uint32) error {
	m := &r.mem
	m.forget()
	if err := r.syncReplica(ctx); err != nil {
		return err
	}
	future := map[memKey]uint32{}
	rows, err := r.conn.Query(ctx, fmt.Sprintf(`SELECT phone_number_id, message_id, recipient_key, toUInt32(max(first))
FROM %s
WHERE toDate(first) >= toDate(toDateTime(%[2]d)) AND kind = %[3]d AND first > toDateTime(%[2]d)
GROUP BY phone_number_id, message_id, recipient_key
LIMIT %[4]d`, r.table("funnel_messages"), now, KindMessage, m.size+1))
	if err != nil {
		return fmt.Errorf("funnel: rows dated ahead: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k msgKey
		var first uint32
		if err := rows.Scan(&k.phone, &k.message, &k.recipient, &first); err != nil {
			return fmt.Errorf("funnel: rows dated ahead: %w", err)
		}
		future[m.hash(k.phone, k.message, k.recipient)] = first
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("funnel: rows dated ahead: %w", err)
	}
	m.valid, m.h, m.youngStart = true, now, now
	m.young, m.old, m.future = map[memKey]memRow{}, map[memKey]memRow{}, future
	if len(future) > m.size {
		// More than the memory holds: this tenure looks every message up.
		m.h, m.future = math.MaxUint32, nil
	}
	return nil
}

// recall returns the row the message of want (a row resolved from its
// state, whose key hashes to k and dimensions to dims) nets, when the
// memory knows it and its dimensions are want's.
func (m *memory) recall(k, dims memKey, want Row) (Row, recall) {
	if !m.valid {
		return Row{}, unknown
	}
	r, ok := m.young[k]
	if !ok {
		if r, ok = m.old[k]; !ok {
			return Row{}, unknown
		}
	}
	if r.dims != dims {
		return Row{}, redimensioned
	}
	had := want
	had.First, had.Stage, had.ToDeliver, had.ToRead = r.first, r.stage, r.toDeliver, r.toRead
	return had, remembered
}

// isNew reports whether a message whose key hashes to k and whose first
// status is first (not known) has no rows.
func (m *memory) isNew(k memKey, first uint32) bool {
	if !m.valid || first <= m.h {
		return false
	}
	_, ahead := m.future[k]
	return !ahead
}

// put records that the message whose key hashes to k nets row, whose
// dimensions hash to dims, during a pass that started at now.
func (m *memory) put(k, dims memKey, row Row, now uint32) {
	if !m.valid {
		return
	}
	if len(m.young) >= m.size/2 {
		m.rotate(now)
	}
	m.young[k] = memRow{dims: dims, first: row.First, toDeliver: row.ToDeliver, toRead: row.ToRead, stage: row.Stage}
	delete(m.old, k)
}

// rotate forgets the old generation, but for its rows dated after the
// young one's start, which becomes h.
func (m *memory) rotate(now uint32) {
	h := max(m.h, m.youngStart)
	for k, r := range m.old {
		if r.first > h {
			m.young[k] = r
		}
	}
	for k, first := range m.future {
		if first <= h {
			delete(m.future, k)
		}
	}
	m.h = h
	m.old, m.young, m.youngStart = m.young, map[memKey]memRow{}, now
}

// awaitFetches waits, when the tables are replicated, until this replica
// has fetched every insert another replica took more than the slack ago
// (less a second for rounding): its absolute_delay in system.replicas,
// which counts fetches and not merges, is under the slack. Each pass reads
// funnel_touched and message_states from its watermark less the slack: a
// status stage 1 wrote through another replica and stamped there, not yet
// fetched here when a pass moved the watermark past its stamp and the
// slack, was never folded. Waited for, every insert not yet fetched is
// stamped within the slack of the pass's clock (the replicas' clocks
// agreeing), and the next pass reads it. While a part is on a replica that
// is down, the wait times out and the passes fail: the funnel lags, and
// loses nothing. tables are the funnel's own names, never input.
func (r *Resolver) awaitFetches(ctx context.Context, tables ...string) error {
	if err := r.knowReplicated(ctx); err != nil || !*r.replicated {
		return err
	}
	allowed := max(int64(r.cfg.Slack/time.Second)-1, 0)
	start := time.Now()
	defer func() { r.synced += time.Since(start) }() // waiting is not work
	for {
		var delay uint64
		if err := r.conn.QueryRow(ctx, "SELECT max(absolute_delay) FROM system.replicas WHERE database = ? AND table IN ('"+strings.Join(tables, "', '")+"')", r.db).Scan(&delay); err != nil {
			return fmt.Errorf("funnel: this replica's delay: %w", err)
		}
		if int64(delay) <= allowed {
			if d := time.Since(start); d > time.Second {
				r.log.Info("funnel: this replica fetched what the others took", zap.Strings("tables", tables), zap.Duration("took", d))
			}
			return nil
		}
		if time.Since(start) >= syncReplicaTimeout {
			return fmt.Errorf("funnel: this replica of %v is %d s behind the others after %v (over the slack of %v): waiting for its fetches", tables, delay, syncReplicaTimeout, r.cfg.Slack)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// knowReplicated learns once whether the funnel's tables are replicated.
func (r *Resolver) knowReplicated(ctx context.Context) error {
	if r.replicated != nil {
		return nil
	}
	var engine string
	if err := r.conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = 'funnel_messages'", r.db).Scan(&engine); err != nil {
		return fmt.Errorf("funnel: funnel_messages' engine: %w", err)
	}
	replicated := strings.HasPrefix(engine, "Replicated")
	r.replicated = &replicated
	return nil
}

// syncReplicaTimeout bounds a wait for this replica to catch up
// (syncReplica, awaitFetches); a pass that times out fails, and the next
// tries again.
const syncReplicaTimeout = 60 * time.Second

// syncReplica brings the replica the resolver reads up to date with every
// part of funnel_messages another replica took, when the table is
// replicated. A tenure reads the rows to net its differences against
// (beginMemory); rows written by the last tenure (or by a failed pass of
// this one) through another replica, and not yet fetched here, would be
// taken for missing and written again in full: counted twice once the
// parts meet. While the part is on a replica that is down, the wait times
// out and the passes fail: the funnel lags, and counts nothing twice.
func (r *Resolver) syncReplica(ctx context.Context) error {
	if err := r.knowReplicated(ctx); err != nil || !*r.replicated {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, syncReplicaTimeout+10*time.Second)
	defer cancel()
	// The server waits receive_timeout for the replica's queue to empty.
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"receive_timeout": int(syncReplicaTimeout / time.Second)}))
	start := time.Now()
	err := r.conn.Exec(ctx, "SYSTEM SYNC REPLICA "+r.table("funnel_messages"))
	// Waiting is not work: Run paces passes by the time they took less it.
	r.synced += time.Since(start)
	if err != nil {
		return fmt.Errorf("funnel: waiting for this replica of funnel_messages to catch up: %w", err)
	}
	if d := time.Since(start); d > time.Second {
		r.log.Info("funnel: this replica of funnel_messages caught up", zap.Duration("took", d))
	}
	return nil
}

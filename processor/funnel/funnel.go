// Package funnel keeps the delivery funnel resolved: one net row per message
// and recipient in ClickHouse's funnel_messages, so that the funnel is a
// sum over rows rather than a resolution of every message's statuses at
// query time (docs/api.md, "The funnel, resolved").
//
// A Resolver pass reads which messages got a status since its last pass
// (funnel_touched, with a slack for inserts that became visible late),
// computes their state from message_states, reads the rows funnel_messages
// nets for them (those it does not know already, memory.go), and inserts,
// part by part of about PassMessages messages and in batches of about
// InsertRows message rows, each of those rows with the opposite
// multiplicity and the new row (a message's rows in one batch, each batch
// with its share of the hourly sums). A message whose row is already
// right costs no write. Each pass nets whatever funnel_messages holds for a
// message (or, under the lease, what the resolver wrote), and the watermark moves only after a pass has written
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

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// Config tunes a Resolver.
type Config struct {
	// Interval is the time between passes.
	Interval time.Duration
	// MaxWait is the longest wait after a pass before the next, or
	// Interval if longer (0: DefaultMaxWait, set by New). Passes are otherwise spaced by nine
	// times their length, so that under a burst the funnel lags rather
	// than stage 1's inserts; under a sustained load that needs more than
	// a tenth of the resolver's time, that spacing grows each pass's share
	// of messages, hence its length, hence the next spacing, without end.
	MaxWait time.Duration
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
	// after an outage or a burst, resolves them in parts, ranges of
	// message_states' key (phone number id, message id) of about as many
	// messages each, so that its memory stays bounded and each part reads
	// only its range's granules.
	PassMessages int
	// InsertRows is about the most message rows one INSERT into
	// funnel_messages carries (0: DefaultInsertRows, set by New; a batch
	// ends after a message's last row); a part with more is written in
	// several, each with its own share of the hourly sums.
	InsertRows int
	// MemoryMessages is about the most messages whose rows a resolver
	// remembers while it holds the lease, to skip their lookups (0:
	// DefaultMemoryMessages, set by New).
	MemoryMessages int
}

// DefaultMaxWait bounds the wait between passes, hence the funnel's lag and
// a pass's share of messages, under a sustained load: at 8,345 webhooks/s on
// 2 cores, with passes spaced by nine times their length alone, they took
// 1, 2, ~15, then ~150 s, and the funnel's lag grew for as long as the load
// lasted (docs/performance.md).
const DefaultMaxWait = time.Minute

// nextWait is how long the resolver waits after a pass that took took:
// what is left of the interval, or nine times took so that passes take a
// tenth of the time at most, but never more than maxWait (nor less than
// what is left of the interval).
func nextWait(interval, maxWait, took time.Duration) time.Duration {
	return max(interval-took, min(9*took, maxWait))
}

// DefaultPassMessages bounds what a part of a pass holds: the messages'
// states, the rows it inserts and the keys it looks up. At 50,000 a part
// held 336 MB in a heap profile of serve at 4,840 webhooks/s (states 91 MB,
// the insert 103, the lookups 31), the largest part of its peak RSS of
// 1.2 GiB.
const DefaultPassMessages = 20_000

// DefaultInsertRows bounds an insert's columns. Each message row comes with
// up to three rows of hourly sums (kinds 1 to 3), and with a campaign per
// message (Meta's biz_opaque_callback_data, up to 512 characters) those are not
// folded together: a part of 20,000 messages in one insert held 88 MB of
// the driver's string columns and its encoded block at serve's peak RSS at
// 6,628 webhooks/s (docs/performance.md). 8,192 message rows make at most
// 32,768 rows, ~20 MB with such campaigns. Smaller batches make more parts
// for ClickHouse to merge: 4,096 cost ClickHouse ~4 CPU-µs per webhook more
// than one insert per part, 8,192 ~2.
const DefaultInsertRows = 8192

// DefaultLookupKeys bounds a lookup's table of message-days to ~10-20 MB.
const DefaultLookupKeys = 100_000

// DefaultConfig returns the defaults: a pass every 5 s, 5 s of slack, a
// 30 s lease.
func DefaultConfig() Config {
	return Config{Interval: 5 * time.Second, MaxWait: DefaultMaxWait, Slack: 5 * time.Second, LeaseTTL: 30 * time.Second, MemoryMessages: DefaultMemoryMessages}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return errors.New("funnel interval must be positive")
	case c.MaxWait < 0:
		return errors.New("funnel max wait must not be negative")
	case c.Slack < time.Second:
		return errors.New("funnel slack must be at least 1s")
	case c.LeaseTTL <= 0:
		return errors.New("funnel lease TTL must be positive")
	case c.LookupKeys < 0:
		return errors.New("funnel lookup keys must not be negative")
	case c.PassMessages < 0:
		return errors.New("funnel pass messages must not be negative")
	case c.InsertRows < 0:
		return errors.New("funnel insert rows must not be negative")
	case c.MemoryMessages < 0:
		return errors.New("funnel memory messages must not be negative")
	}
	return nil
}

// Resolver keeps funnel_messages up to date. Its methods are not safe for
// concurrent use.
type Resolver struct {
	conn driver.Conn
	db   string
	cfg  Config
	log  *zap.Logger
	m    *metrics
	// mem is what the resolver knows of funnel_messages (memory.go);
	// tenure the lease's tenure it was learnt in.
	mem    memory
	tenure uint64
	// replicated tells, once known, whether funnel_messages is a
	// replicated table (syncReplica); synced is how long passes waited for
	// their replica since Run last looked.
	replicated *bool
	synced     time.Duration
}

// New returns a resolver of the tables in database db. m may be nil.
func New(cfg Config, conn driver.Conn, db string, m *Metrics, log *zap.Logger) *Resolver {
	if cfg.LookupKeys == 0 {
		cfg.LookupKeys = DefaultLookupKeys
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.PassMessages == 0 {
		cfg.PassMessages = DefaultPassMessages
	}
	if cfg.InsertRows <= 0 {
		cfg.InsertRows = DefaultInsertRows
	}
	if cfg.MemoryMessages == 0 {
		cfg.MemoryMessages = DefaultMemoryMessages
	}
	r := &Resolver{conn: conn, db: db, cfg: cfg, log: log, mem: newMemory(max(cfg.MemoryMessages, 2))}
	if m != nil {
		r.m = m.m
	}
	return r
}

func (r *Resolver) table(name string) string { return r.db + "." + name }

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

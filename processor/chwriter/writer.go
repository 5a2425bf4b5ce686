package chwriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/schema"
)

// Writer inserts schema.Rows into the tables of schema/migrations. It is safe
// for concurrent use.
type Writer struct {
	conn driver.Conn
	cfg  Config
	err  error // a bad database or config, returned by every call

	statuses, errors, inbound, management, sendResults, deadLetters string // INSERT queries

	scratch sync.Pool // *scratch
}

// New returns a Writer that inserts into the tables of database over conn, a
// native-protocol connection. A bad database name or option does not fail
// here: Write and Ping return the error.
func New(conn driver.Conn, database string, opts ...Option) *Writer {
	cfg := DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	w := &Writer{conn: conn, cfg: cfg}
	w.scratch.New = func() any { return new(scratch) }
	if w.err = checkDatabase(database); w.err == nil {
		w.err = cfg.Validate()
	}
	w.statuses = insertQuery(database, &statusEvents)
	w.errors = insertQuery(database, &errorEvents)
	w.inbound = insertQuery(database, &inboundMessages)
	w.management = insertQuery(database, &managementEvents)
	w.sendResults = insertQuery(database, &sendResults)
	w.deadLetters = insertQuery(database, &deadLetters)
	return w
}

// Write inserts each table's rows of rows: status_events, errors,
// inbound_messages, management_events, send_results and dead_letters, in that order, one
// INSERT per table that has rows. Empty Rows are a no-op.
//
// Write returns nil only when every insert succeeded. After an error, the
// tables before the failing one hold their rows, and the failing one may hold
// some: the caller writes the whole batch again, and the deduplicating tables
// and queries count each row once (README.md of schema/migrations). Write
// blocks until the server has answered, or ctx is done. It keeps no reference
// to rows after it returns. Its inserts carry their own ClickHouse settings
// (insert_deduplicate = 0, insert.go): settings ctx carries are not sent.
func (w *Writer) Write(ctx context.Context, rows *schema.Rows) error {
	if w.err != nil {
		return w.err
	}
	if rows == nil || rows.Len() == 0 {
		return nil
	}
	s := w.scratch.Get().(*scratch)
	defer func() {
		s.clear()
		w.scratch.Put(s)
	}()
	if err := writeTable(ctx, w, w.statuses, &statusEvents, rows.Statuses, s); err != nil {
		return err
	}
	if err := writeTable(ctx, w, w.errors, &errorEvents, rows.Errors, s); err != nil {
		return err
	}
	if err := writeTable(ctx, w, w.inbound, &inboundMessages, rows.Inbound, s); err != nil {
		return err
	}
	if err := writeTable(ctx, w, w.management, &managementEvents, rows.Management, s); err != nil {
		return err
	}
	if err := writeTable(ctx, w, w.sendResults, &sendResults, rows.SendResults, s); err != nil {
		return err
	}
	return writeTable(ctx, w, w.deadLetters, &deadLetters, rows.DeadLetters, s)
}

func writeTable[T any](ctx context.Context, w *Writer, query string, t *table[T], rows []T, s *scratch) error {
	if len(rows) == 0 {
		return nil
	}
	if err := insert(ctx, w.conn, query, t, rows, w.cfg.BlockRows, s); err != nil {
		return fmt.Errorf("chwriter: insert %d rows into %s: %w", len(rows), t.name, err)
	}
	return nil
}

// Ping reports whether the server answers, for readiness checks.
func (w *Writer) Ping(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
	if err := w.conn.Ping(ctx); err != nil {
		return fmt.Errorf("chwriter: ping: %w", err)
	}
	return nil
}

// Codes of ClickHouse exceptions that say the server cannot take writes
// now, whatever they hold: a replicated table read-only or ZooKeeper
// (Keeper) gone, too many parts waiting for merges, too many queries, an
// insert whose outcome the server could not tell, the server's or the
// user's memory spent, a full disk (and, on 18.16, a part's file not
// written for want of space: fullDisk), a query timed out or cancelled (as the
// server stops). The server answers pings meanwhile, so a body failing so
// on its own was taken for the body's fault, and every body became a dead
// letter.
var unavailableCodes = map[int32]string{
	75:  "CANNOT_WRITE_TO_FILE_DESCRIPTOR",
	159: "TIMEOUT_EXCEEDED",
	202: "TOO_MANY_SIMULTANEOUS_QUERIES",
	225: "NO_ZOOKEEPER",
	241: "MEMORY_LIMIT_EXCEEDED",
	242: "TABLE_IS_READ_ONLY",
	243: "NOT_ENOUGH_SPACE",
	252: "TOO_MANY_PARTS",
	319: "UNKNOWN_STATUS_OF_INSERT",
	394: "QUERY_WAS_CANCELLED",
	999: "KEEPER_EXCEPTION",
}

// fullDisk reports whether a server exception's message is a write that
// failed for want of disk space or quota (ENOSPC, EDQUOT), whatever its
// code. ClickHouse 18.16 reserves no space before an insert, so a full disk
// is not its NOT_ENOUGH_SPACE (243) but a failed write of a part's file:
// "Cannot write to file .../primary.idx, errno: 28, strerror: No space left
// on device" (75, CANNOT_WRITE_TO_FILE_DESCRIPTOR, in the list: a file the
// server cannot write is its state, never the rows').
func fullDisk(msg string) bool {
	return strings.Contains(msg, "errno: 28,") || strings.Contains(msg, "errno: 122,") ||
		strings.Contains(msg, "No space left on device")
}

// Unavailable reports whether err is a ClickHouse exception that says the
// server cannot take writes now (a replica read-only while ZooKeeper is
// away, too many parts) rather than that it refused the rows: a write that
// fails so is an outage, to be tried again, never a bad row.
func Unavailable(err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	if fullDisk(ex.Message) {
		return true
	}
	if ex.Code == 252 && strings.Contains(ex.Message, tooManyPartitions) {
		// The same code refuses an insert block whose rows fall in more
		// partitions (months) than max_partitions_per_insert_block: that
		// is the rows', and fails them every time.
		return false
	}
	if ex.Code == 241 && queryMemory(ex.Message) {
		// A query over its own max_memory_usage: the batch's size, which
		// smaller batches (the halves stage 1 writes next) get under.
		return false
	}
	_, ok := unavailableCodes[ex.Code]
	return ok
}

// queryMemory reports whether msg, of a MEMORY_LIMIT_EXCEEDED, is of a
// query over its own limit: "Memory limit (for query) exceeded" (18.16 to
// about 24), "Query memory limit exceeded" (later servers); "(total)" and
// "(for user)", or "Total" and "User", are the server's and the user's.
func queryMemory(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "memory limit (for query) exceeded") || strings.Contains(m, "query memory limit exceeded")
}

// tooManyPartitions begins the message of TOO_MANY_PARTS for an insert
// block over max_partitions_per_insert_block (ClickHouse 19 and later).
const tooManyPartitions = "Too many partitions for single INSERT block"

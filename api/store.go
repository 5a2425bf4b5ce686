package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/schema"
)

// Store answers the queries from ClickHouse. Every answer is computed
// there, exact when the same event was inserted more than once (the
// queries of schema/migrations/README.md).
type Store struct {
	conn  driver.Conn
	db    string
	tiers Tiers
}

// NewStore queries the tables of database db (migrated by
// schema/migrations) on conn.
func NewStore(conn driver.Conn, db string, tiers Tiers) *Store {
	if tiers.Default == 0 {
		tiers = DefaultTiers()
	}
	return &Store{conn: conn, db: db, tiers: tiers}
}

// Ping reports whether ClickHouse answers.
func (s *Store) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// table is the qualified name of a table.
func (s *Store) table(name string) string { return s.db + "." + name }

// where collects SQL conditions and their arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// in adds "col IN (...)" when values is not empty.
func (w *where) in(col string, values []string) {
	if len(values) == 0 {
		return
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(values)), ", ")
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = v
	}
	w.add(col+" IN ("+marks+")", args...)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "1"
	}
	return strings.Join(w.conds, " AND ")
}

// classCodes adds the condition for the error classes of q to w.
func classCodes(w *where, col string, classes []schema.ErrorClass) {
	if len(classes) == 0 {
		return
	}
	want := map[schema.ErrorClass]bool{}
	for _, c := range classes {
		want[c] = true
	}
	var in, known []int32
	for _, e := range schema.ErrorCodes() {
		known = append(known, e.Code)
		if want[e.Class] {
			in = append(in, e.Code)
		}
	}
	var parts []string
	if len(in) > 0 {
		parts = append(parts, col+" IN ("+joinInts(in)+")")
	}
	if want[schema.ClassUnknown] {
		parts = append(parts, col+" NOT IN ("+joinInts(known)+")")
	}
	w.add("(" + strings.Join(parts, " OR ") + ")")
}

// classExpr is the SQL expression of the class of the error code in col.
func classExpr(col string) string {
	var codes, classes []string
	for _, e := range schema.ErrorCodes() {
		codes = append(codes, fmt.Sprint(e.Code))
		classes = append(classes, "'"+string(e.Class)+"'")
	}
	return fmt.Sprintf("transform(%s, [%s], [%s], '%s')", col, strings.Join(codes, ","), strings.Join(classes, ","), schema.ClassUnknown)
}

func joinInts(v []int32) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// unix is t as the argument of toDateTime(?).
func unix(t time.Time) int64 { return t.Unix() }

// queryError classifies a driver error: unreachable or timed out is
// errUnavailable (503), the rest a bug (500).
func queryError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, clickhouse.ErrAcquireConnTimeout) {
		return fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return err
}

// least is the smallest of exprs (18.16's least takes two arguments).
func least(exprs ...string) string {
	if len(exprs) == 1 {
		return exprs[0]
	}
	return "least(" + exprs[0] + ", " + least(exprs[1:]...) + ")"
}

package api

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// DeadLetterReason is how many bodies or items were dead-lettered for one
// reason.
type DeadLetterReason struct {
	Reason   string    `json:"reason"`
	Count    uint64    `json:"count"`
	LastSeen time.Time `json:"last_seen"`
}

// DeadLetterItem is one dead letter, without its body (which may hold end
// users' numbers and text; it stays in ClickHouse for replay).
type DeadLetterItem struct {
	ReceivedAt time.Time `json:"received_at"`
	App        string    `json:"app"`
	RawMsgID   string    `json:"raw_msg_id"`
	Item       string    `json:"item"` // "" for the whole body
	Reason     string    `json:"reason"`
	Error      string    `json:"error"`
}

// DeadLetters is the count and the recent reasons of bodies and items that
// could not be decoded.
type DeadLetters struct {
	From     time.Time          `json:"from"`
	To       time.Time          `json:"to"`
	Count    uint64             `json:"count"`  // dead letters (a body, or one bad item of it), each once
	Bodies   uint64             `json:"bodies"` // distinct bodies with a dead letter
	ByReason []DeadLetterReason `json:"by_reason"`
	Recent   []DeadLetterItem   `json:"recent"`
}

// DeadLetters summarizes dead_letters by receive time.
func (s *Store) DeadLetters(ctx context.Context, q Query, recent int) (*DeadLetters, error) {
	out := &DeadLetters{From: q.From, To: q.To, ByReason: []DeadLetterReason{}, Recent: []DeadLetterItem{}}
	args := []any{unix(q.From), unix(q.To)}
	cond := "received_at >= toDateTime(?) AND received_at < toDateTime(?)"
	if q.scoped {
		// A tenant sees a dead letter only when every entry of its body is
		// one of its WABAs (a body that is not JSON names none). An
		// entry's WABA is the "id" before its "changes", with Meta's
		// "time" between them or not; every "changes" of the body must
		// have one, so that an entry this cannot read hides the body
		// rather than leaving the others to decide (before, an entry with
		// its "time" between was no entry at all, and a body of one such
		// entry was every tenant's). No "?" in the patterns: the driver
		// would take it for a parameter.
		ids := `extractAll(body, '[\\{,]\\s*"id"\\s*:\\s*"([^"]*)"\\s*,\\s*("time"\\s*:\\s*[0-9]+\\s*,\\s*){0,1}"changes"\\s*:')`
		cond += ` AND notEmpty(` + ids + `)` +
			` AND length(` + ids + `) = length(extractAll(body, '"changes"\\s*:'))` +
			` AND arrayAll(x -> has([` + strings.TrimSuffix(strings.Repeat("?, ", len(q.scopeWabas)), ", ") + `], x), ` + ids + `)`
		for _, w := range q.scopeWabas {
			args = append(args, w)
		}
	}
	row := s.conn.QueryRow(ctx, fmt.Sprintf("SELECT uniqExact(raw_msg_id, item), uniqExact(raw_msg_id) FROM %s WHERE %s",
		s.table("dead_letters"), cond), args...)
	if err := row.Scan(&out.Count, &out.Bodies); err != nil {
		return nil, queryError(ctx, err)
	}
	// FINAL: an item made a dead letter again by a replay under another
	// reason (a newer decoder's) is one row once merged; before, it counted
	// under both reasons, more than Count in all.
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`SELECT reason, uniqExact(raw_msg_id, item) AS n, max(received_at)
FROM %s FINAL WHERE %s GROUP BY reason ORDER BY n DESC, reason`, s.table("dead_letters"), cond), args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	for rows.Next() {
		var r DeadLetterReason
		if err := rows.Scan(&r.Reason, &r.Count, &r.LastSeen); err != nil {
			rows.Close()
			return nil, queryError(ctx, err)
		}
		r.LastSeen = r.LastSeen.UTC()
		out.ByReason = append(out.ByReason, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, queryError(ctx, err)
	}
	rows, err = s.conn.Query(ctx, fmt.Sprintf(`SELECT received_at, app, raw_msg_id, item, reason, error
FROM %s FINAL WHERE %s
ORDER BY received_at DESC, raw_msg_id, item
LIMIT 1 BY raw_msg_id, item
LIMIT %d`, s.table("dead_letters"), cond, recent), args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var d DeadLetterItem
		if err := rows.Scan(&d.ReceivedAt, &d.App, &d.RawMsgID, &d.Item, &d.Reason, &d.Error); err != nil {
			return nil, queryError(ctx, err)
		}
		d.ReceivedAt = d.ReceivedAt.UTC()
		out.Recent = append(out.Recent, d)
	}
	return out, queryError(ctx, rows.Err())
}

package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// A token is written TOKEN (it sees every WABA), NAME:TOKEN, or
// NAME:TOKEN:waba=ID,ID (it sees only those WABAs: a tenant). IDs are
// separated by commas or '+' (the environment variable of --api-token is
// itself comma-separated: write waba=ID+ID there). The name is for the
// log; the token never is logged.
type TokenSpec struct {
	Name  string
	Token string
	Wabas []string // nil: every WABA
}

// ParseToken reads one token as written in the configuration.
func ParseToken(s string) (TokenSpec, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ":")
	var t TokenSpec
	switch len(parts) {
	case 1:
		t.Token = parts[0]
	case 2, 3:
		t.Name, t.Token = strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		if len(parts) == 3 {
			scope, ok := strings.CutPrefix(strings.TrimSpace(parts[2]), "waba=")
			if !ok {
				return t, fmt.Errorf("token %q: the third part must be waba=ID,ID", t.Name)
			}
			for _, id := range strings.FieldsFunc(scope, func(r rune) bool { return r == ',' || r == '+' || r == ' ' }) {
				if !slices.Contains(t.Wabas, id) {
					t.Wabas = append(t.Wabas, id)
				}
			}
			if len(t.Wabas) == 0 {
				return t, fmt.Errorf("token %q: waba= names no WABA id", t.Name)
			}
			sort.Strings(t.Wabas)
		}
	default:
		return t, fmt.Errorf("a token is TOKEN, NAME:TOKEN or NAME:TOKEN:waba=ID,ID")
	}
	if len(t.Token) < 16 {
		return t, fmt.Errorf("an API token is shorter than 16 characters")
	}
	return t, nil
}

// ReadTokensFile reads a tokens file: one token a line as ParseToken takes
// it; blank lines and lines starting with # are skipped.
func ReadTokensFile(path string) ([]TokenSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseTokensFile(b)
}

func parseTokensFile(b []byte) ([]TokenSpec, error) {
	var out []TokenSpec
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		t, err := ParseToken(l)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// tenant is what a request's token may see: nil for every WABA.
type tenant struct {
	name  string
	wabas []string
}

// key identifies a tenant's set of WABAs (for the caches).
func (t *tenant) key() string { return strings.Join(t.wabas, ",") }

// ownsWaba reports whether the tenant sees WABA id.
func (t *tenant) ownsWaba(id string) bool { return t == nil || slices.Contains(t.wabas, id) }

// credential is one configured token, as its digest.
type credential struct {
	digest [sha256.Size]byte
	tenant *tenant // nil: every WABA
}

// tokenSet is the accepted tokens: those of the flags, and those of the
// tokens file, which is read again when it changes (checked at most once
// a second, on a request).
//
// The file fails closed where that is what its operator did, and open
// where failing closed would lock every tenant out over a slip:
//   - removed: its tokens are refused (the flags' stay);
//   - there but not read whole (a typo mid-edit, no permission): the
//     tokens read before stay, until it reads;
//   - its last line without a newline, or the file empty: perhaps cut by a
//     write under way ("NAME:TOKEN" of "NAME:TOKEN:waba=ID" would see
//     every WABA; a rewrite in place empties the file first), so it
//     applies once the file is unchanged at the next check, a second on;
//     only the first read, at the start, takes it at once.
//
// Each of the first two is logged once, and kept in lastErr until the file
// reads: the gauge wahook_api_tokens_file_valid is 0 meanwhile (read at
// each scrape, which checks the file as a request does: an idle API's
// gauge follows the file too).
type tokenSet struct {
	fixed []credential
	file  string
	log   *zap.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string // size and modification time of the file applied ("" before the first read)
	unended string // stamp of a file read whose last line had no newline, not applied yet
	loaded  []credential
	lastErr string // the failure logged last; "": the tokens are the file's as it is
}

// tokensFileRemoved and tokensFileNotRead are what the log says of a
// tokens file that went away, and of one that is there and cannot be read.
const (
	tokensFileRemoved = "tokens file removed: its tokens are refused"
	tokensFileNotRead = "tokens file not read; the tokens read before stay"
)

func credentialsOf(specs []TokenSpec) []credential {
	out := make([]credential, 0, len(specs))
	for _, t := range specs {
		c := credential{digest: sha256.Sum256([]byte(t.Token))}
		if t.Wabas != nil {
			c.tenant = &tenant{name: t.Name, wabas: t.Wabas}
		}
		out = append(out, c)
	}
	return out
}

// current is the accepted tokens now.
func (ts *tokenSet) current(now time.Time) []credential {
	if ts.file == "" {
		return ts.fixed
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if now.Sub(ts.checked) >= time.Second || ts.checked.IsZero() {
		ts.checked = now
		ts.check()
	}
	return append(append([]credential{}, ts.fixed...), ts.loaded...)
}

// validNow is wahook_api_tokens_file_valid: 1 while the tokens are the
// file's as it is, after checking it as current does.
func (ts *tokenSet) validNow(now time.Time) float64 {
	ts.current(now)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.lastErr == "" {
		return 1
	}
	return 0
}

// check reads the tokens file again when it changed.
func (ts *tokenSet) check() {
	fi, err := os.Stat(ts.file)
	if err == nil {
		stamp := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
		if stamp == ts.stamp {
			// The file applied, back after a version that did not read
			// (a copy kept with cp -p, moved back).
			ts.report(true, "", nil)
			return
		}
		var b []byte
		if b, err = os.ReadFile(ts.file); err == nil {
			i := bytes.LastIndexByte(b, '\n')
			if (len(b) == 0 || len(bytes.TrimSpace(b[i+1:])) > 0) && ts.stamp != "" && stamp != ts.unended {
				ts.unended = stamp // perhaps a write under way: seen again at the next check
				return
			}
			var specs []TokenSpec
			if specs, err = parseTokensFile(b); err == nil {
				ts.stamp, ts.loaded = stamp, credentialsOf(specs)
				ts.report(true, "", nil)
				return
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		ts.stamp, ts.loaded = "removed", nil
		ts.report(false, tokensFileRemoved, err)
		return
	}
	ts.report(false, tokensFileNotRead, err)
}

// report notes whether the file was read, and logs a failure unless it is
// the one logged last.
func (ts *tokenSet) report(ok bool, msg string, err error) {
	if ok {
		ts.lastErr = ""
		return
	}
	if key := msg + ": " + err.Error(); key != ts.lastErr {
		ts.lastErr = key
		if ts.log != nil {
			ts.log.Warn(msg, zap.String("file", ts.file), zap.Error(err))
		}
	}
}

// match finds the credential of a presented token, comparing every digest
// in constant time.
func match(creds []credential, token string) (string, *credential) {
	d := sha256.Sum256([]byte(token))
	var found *credential
	for i := range creds {
		if subtle.ConstantTimeCompare(d[:], creds[i].digest[:]) == 1 {
			found = &creds[i]
		}
	}
	return hex.EncodeToString(d[:8]), found
}

// notFound is the answer to anything outside a tenant: the same whether it
// exists for another tenant or not at all.
func notFound(param string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Parameter: param, Message: "not found"}
}

// tenantNumbers caches the phone number ids of each tenant's WABAs.
type tenantNumbers struct {
	mu      sync.Mutex
	entries map[string]numbersEntry
	// reads makes the requests of a tenant that miss the cache at once
	// share one read: each read scans three tables, and a tenant asking
	// for numbers not its own, many at a time, read them all each time.
	reads singleflight.Group
}

type numbersEntry struct {
	at     time.Time
	ids    map[string]bool
	failed time.Time // the last read that failed after at (zero: none)
}

// numbersTTL is how long a tenant's numbers are kept before they are read
// again; fresh forces a read when a number is not among them and the list
// is older than numbersRetry.
var (
	numbersTTL   = 30 * time.Second
	numbersRetry = 2 * time.Second
)

// errNumbersUnread answers a number not in the last list of a tenant's
// numbers while ClickHouse cannot read it again: not a not_found.
var errNumbersUnread = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "ClickHouse did not answer with the token's numbers; retry"}

// numbersOf is the set of phone number ids of the tenant's WABAs.
func (s *Server) numbersOf(ctx context.Context, t *tenant, want string) (map[string]bool, error) {
	tn := s.tenantNumbers
	tn.mu.Lock()
	e, ok := tn.entries[t.key()]
	tn.mu.Unlock()
	now := time.Now()
	if ok && now.Sub(e.at) < numbersTTL && (want == "" || e.ids[want] || now.Sub(e.at) < numbersRetry) {
		return e.ids, nil
	}
	if ok && now.Sub(e.failed) < numbersRetry {
		// ClickHouse failed a moment ago: the last list read, unless the
		// number asked for is not in it (it may be new).
		if want == "" || e.ids[want] {
			return e.ids, nil
		}
		return nil, errNumbersUnread
	}
	v, err, _ := tn.reads.Do(t.key(), func() (any, error) {
		// Bounded by the query timeout, not by the request that came
		// first: the others wait for this read too (a live stream's
		// context has no deadline).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.QueryTimeout)
		defer cancel()
		ids, err := s.store.WabaNumbers(rctx, t.wabas)
		if err != nil {
			// ClickHouse away: the last list read serves meanwhile (the
			// pacing signals and the send-result intake need NATS alone),
			// read again at most every numbersRetry.
			tn.mu.Lock()
			defer tn.mu.Unlock()
			if e, ok := tn.entries[t.key()]; ok {
				// Stamped when it failed: a read that timed out took
				// the query timeout, longer than numbersRetry.
				e.failed = time.Now()
				tn.entries[t.key()] = e
				return e.ids, nil
			}
			return nil, err
		}
		set := make(map[string]bool, len(ids))
		for _, id := range ids {
			set[id] = true
		}
		tn.mu.Lock()
		tn.entries[t.key()] = numbersEntry{at: now, ids: set}
		tn.mu.Unlock()
		return set, nil
	})
	if err != nil {
		return nil, err
	}
	ids := v.(map[string]bool)
	if want != "" && !ids[want] {
		// The last list, served because this read failed: the number
		// may be new.
		tn.mu.Lock()
		failed := tn.entries[t.key()].failed
		tn.mu.Unlock()
		if !failed.Before(now) {
			return nil, errNumbersUnread
		}
	}
	return ids, nil
}

// scope narrows q to the tenant t: a WABA or number of q outside it is
// not_found; without any, q gets the tenant's WABAs and numbers.
func (s *Server) scope(ctx context.Context, t *tenant, q *Query) error {
	return scopeQuery(ctx, t, q, func(ctx context.Context, want string) (map[string]bool, error) {
		return s.numbersOf(ctx, t, want)
	})
}

// scopeQuery narrows q to t, with numbers the lookup of t's phone number
// ids (want: a number the caller asks for, read again when missing).
func scopeQuery(ctx context.Context, t *tenant, q *Query, numbers func(ctx context.Context, want string) (map[string]bool, error)) error {
	for _, w := range q.WabaIDs {
		if !t.ownsWaba(w) {
			return notFound("waba_id")
		}
	}
	nums, err := numbers(ctx, "")
	if err != nil {
		return err
	}
	for _, id := range q.PhoneNumberIDs {
		if !nums[id] {
			if nums, err = numbers(ctx, id); err != nil {
				return err
			}
			if !nums[id] {
				return notFound("phone_number_id")
			}
		}
	}
	q.scoped = true
	q.scopeWabas = t.wabas
	q.scopeNumbers = make([]string, 0, len(nums))
	for id := range nums {
		q.scopeNumbers = append(q.scopeNumbers, id)
	}
	sort.Strings(q.scopeNumbers)
	return nil
}

// RunScoped answers like Run, as a token scoped to the WABAs wabas sees it
// (wahook report --tenant-waba): only their numbers' data, and not_found
// for any other number or WABA. Empty wabas: as Run.
func RunScoped(ctx context.Context, s *Store, name string, values url.Values, now time.Time, wabas []string) (any, error) {
	if len(wabas) == 0 {
		return Run(ctx, s, name, values, now)
	}
	t := &tenant{wabas: append([]string(nil), wabas...)}
	sort.Strings(t.wabas)
	for _, r := range routes {
		if r.Name != name {
			continue
		}
		q, err := parseQuery(r.Params, values, now)
		if err != nil {
			return nil, err
		}
		if r.Name != "error-codes" {
			err := scopeQuery(ctx, t, &q, func(ctx context.Context, _ string) (map[string]bool, error) {
				ids, err := s.WabaNumbers(ctx, t.wabas)
				set := map[string]bool{}
				for _, id := range ids {
					set[id] = true
				}
				return set, err
			})
			if err != nil {
				return nil, err
			}
		}
		return runRoute(ctx, &r, s, q)
	}
	return Run(ctx, s, name, values, now) // the error naming the reports
}

// scopeTable is the table of a tenant's numbers that a scoped query is
// sent with (scopeContext), for scopeCond to name: written into the query's
// text, the numbers of a tenant of some 13,000 passed ClickHouse's
// max_query_size, and its every report failed.
const scopeTable = "wahook_scope_numbers"

// scopeContext is ctx with q's tenant's numbers as the external table
// scopeTable, for the queries of q.
func scopeContext(ctx context.Context, q Query) (context.Context, error) {
	if !q.scoped || len(q.scopeNumbers) == 0 {
		return ctx, nil
	}
	t, err := ext.NewTable(scopeTable, ext.Column("phone_number_id", column.Type("String")))
	if err != nil {
		return nil, err
	}
	for _, id := range q.scopeNumbers {
		if err := t.Append(id); err != nil {
			return nil, err
		}
	}
	return clickhouse.Context(ctx, clickhouse.WithExternalTable(t)), nil
}

// runRoute answers r for q, with the tenant's numbers of a scoped q.
func runRoute(ctx context.Context, r *route, s *Store, q Query) (any, error) {
	ctx, err := scopeContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("the tenant's numbers: %w", err)
	}
	return r.run(ctx, s, q)
}

// scopeCond adds to w the condition that keeps a tenant's rows: its WABAs,
// and the rows without a WABA (send results) of its numbers (scopeTable);
// col is the column of a dimension in the table queried.
func scopeCond(w *where, q Query, col func(d *dimension) string) {
	if !q.scoped {
		return
	}
	wabaCol, numberCol := scopeColumns(col)
	var c where
	c.in(wabaCol, q.scopeWabas)
	cond := "(" + c.sql()
	if len(q.scopeNumbers) > 0 {
		cond += " OR (" + wabaCol + " = '' AND " + numberCol + " IN " + scopeTable + ")"
	}
	w.add(cond+")", c.args...)
}

package chwriter

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// readme is the document whose queries these tests run as written.
const readme = "../../schema/migrations/README.md"

var namedQuery = regexp.MustCompile("(?s)```sql\n-- name: ([a-z_]+)\n(.*?)```")

// readmeQueries returns the named queries of the README, with the test's
// database in place of wahook.
func readmeQueries(t *testing.T, database string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range namedQuery.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = strings.ReplaceAll(m[2], "wahook.", database+".")
	}
	return out
}

// answer runs query and returns its rows, one line each, values separated by
// " | " and times as 2006-01-02 15:04:05 (UTC).
func answer(t *testing.T, ch *schematest.ClickHouseDB, query string) []string {
	t.Helper()
	rows, err := ch.Conn.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var out []string
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		vals := make([]string, len(dest))
		for i, d := range dest {
			switch v := reflect.ValueOf(d).Elem().Interface().(type) {
			case time.Time:
				vals[i] = v.UTC().Format(time.DateTime)
			default:
				vals[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(vals, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fixtureAnswers are the answers of the README's queries for fixture(),
// however often it is written.
var fixtureAnswers = map[string][]string{
	"failures": {
		"2026-03-14 15:09:00 | 131000 | " + waba + " | " + number + " |  |  | 1",
		"2026-03-14 15:09:00 | 131026 | " + waba + " | " + number + " |  | spring | 1",
		"2026-03-14 15:10:00 | 131000 | " + waba + " | " + number + " |  | autumn | 1",
		"2026-03-14 15:10:00 | 131049 | " + waba + " | " + number + " |  | autumn | 1",
		"2026-03-14 15:11:00 | 130429 | " + waba + " | " + number + " | promo_v2 | spring | 1",
	},
	"funnel": { // campaign | messages | sent | delivered | read | failed
		"autumn | 2 | 1 | 1 | 1 | 1",
		"spring | 4 | 3 | 2 | 1 | 1",
	},
	"lifecycle": { // recipient | sent | delivered | read | played | failed | has_failed
		"r1 | 2026-03-14 15:09:26 | 2026-03-14 15:09:31 | 2026-03-14 15:10:26 | 1970-01-01 00:00:00 | 1970-01-01 00:00:00 | 0",
	},
	"status_counts": {
		"delivered | marketing | 2",
		"failed |  | 1",
		"failed | marketing | 1",
		"played |  | 1",
		"read | marketing | 1",
		"sent | marketing | 4",
	},
	"dead_letters": {
		"bad_status | 2 | 1",
		"not_json | 1 | 1",
	},
}

func init() {
	// The raw forms answer like the aggregates.
	fixtureAnswers["failures_raw"] = fixtureAnswers["failures"]
	fixtureAnswers["status_counts_raw"] = fixtureAnswers["status_counts"]
	fixtureAnswers["status_counts_final"] = fixtureAnswers["status_counts"]
}

func TestReadmeQueriesCountOnce(t *testing.T) {
	w, ch := newWriter(t)
	queries := readmeQueries(t, ch.Database)
	if got, want := slices.Sorted(mapKeys(queries)), slices.Sorted(mapKeys(fixtureAnswers)); !slices.Equal(got, want) {
		t.Fatalf("README has queries %v, want %v", got, want)
	}
	ctx := context.Background()
	rows := fixture()
	// The same rows again with another Source: Meta's retry of the same
	// events in another POST, received later.
	retry := &schema.Rows{Statuses: slices.Clone(rows.Statuses), Errors: slices.Clone(rows.Errors)}
	for i := range retry.Statuses {
		retry.Statuses[i].Source = src(100)
	}
	for i := range retry.Errors {
		retry.Errors[i].Source = src(100)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"written once", func() error { return w.Write(ctx, rows) }},
		{"written twice", func() error { return w.Write(ctx, rows) }},
		{"retried in another POST", func() error { return w.Write(ctx, retry) }},
		{"after merges", func() error {
			for _, table := range []string{"status_events", "errors", "inbound_messages", "management_events",
				"dead_letters", "failures_by_minute", "message_states", "status_counts_by_minute"} {
				if err := ch.Conn.Exec(ctx, "OPTIMIZE TABLE "+table+" FINAL"); err != nil {
					return fmt.Errorf("optimize %s: %w", table, err)
				}
			}
			return nil
		}},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, name := range slices.Sorted(mapKeys(queries)) {
			if got, want := answer(t, ch, queries[name]), fixtureAnswers[name]; !slices.Equal(got, want) {
				t.Errorf("%s: query %s:\n got %q\nwant %q", step.name, name, got, want)
			}
		}
		var stored uint64
		if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM status_events").Scan(&stored); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: status_events holds %d rows for %d statuses", step.name, stored, len(rows.Statuses))
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestLifecycleOrderFree writes the statuses of each message one Write at a
// time, in the order given, and checks that the lifecycle and the funnel do
// not depend on it.
func TestLifecycleOrderFree(t *testing.T) {
	w, ch := newWriter(t)
	queries := readmeQueries(t, ch.Database)
	ctx := context.Background()
	at := map[string]time.Time{
		"sent": base, "delivered": base.Add(5 * time.Second), "read": base.Add(60 * time.Second),
		"failed": base.Add(3 * time.Second), "late delivered": base.Add(10 * time.Second),
	}
	const never = "1970-01-01 00:00:00"
	tests := []struct {
		name  string
		order []string
		want  string // sent | delivered | read | played | failed | has_failed
	}{
		{"in order", []string{"sent", "delivered", "read"},
			"2026-03-14 15:09:26 | 2026-03-14 15:09:31 | 2026-03-14 15:10:26 | " + never + " | " + never + " | 0"},
		{"read before delivered", []string{"read", "delivered", "sent"},
			"2026-03-14 15:09:26 | 2026-03-14 15:09:31 | 2026-03-14 15:10:26 | " + never + " | " + never + " | 0"},
		{"delivered, read, sent again", []string{"delivered", "read", "sent", "sent"},
			"2026-03-14 15:09:26 | 2026-03-14 15:09:31 | 2026-03-14 15:10:26 | " + never + " | " + never + " | 0"},
		{"failed then delivered", []string{"sent", "failed", "late delivered"},
			"2026-03-14 15:09:26 | 2026-03-14 15:09:36 | " + never + " | " + never + " | 2026-03-14 15:09:29 | 1"},
		{"delivered then failed", []string{"late delivered", "failed"},
			never + " | 2026-03-14 15:09:36 | " + never + " | " + never + " | 2026-03-14 15:09:29 | 1"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := fmt.Sprintf("wamid.order%d", i)
			for _, st := range tt.order {
				r := status(msg, "r1", "", strings.TrimPrefix(st, "late "), at[st])
				r.Campaign = "order"
				if err := w.Write(ctx, &schema.Rows{Statuses: []schema.StatusRow{r}}); err != nil {
					t.Fatal(err)
				}
			}
			q := strings.ReplaceAll(queries["lifecycle"], "'wamid.A'", "'"+msg+"'")
			want := []string{"r1 | " + tt.want}
			if got := answer(t, ch, q); !slices.Equal(got, want) {
				t.Errorf("lifecycle:\n got %q\nwant %q", got, want)
			}
		})
	}
	// Three messages reached read, two failed (whatever came after).
	want := []string{"order | 5 | 3 | 3 | 3 | 2"}
	if got := answer(t, ch, queries["funnel"]); !slices.Equal(got, want) {
		t.Errorf("funnel:\n got %q\nwant %q", got, want)
	}
}

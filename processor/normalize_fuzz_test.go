package processor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

// FuzzNormalize: whatever the body, Normalize does not panic; a body gives
// rows or dead letters, never nothing; within a body every event id is
// distinct (error rows share their owner's id, one per index); the ids do
// not depend on when (but for value-level errors without an entry time,
// within a minute) or for which app the body came; every JSON column
// holds JSON; and every event's JSON is the bytes encoding/json makes of it
// (content storage on, so that text is encoded too).
func FuzzNormalize(f *testing.F) {
	for _, dir := range []string{normFixtures, normTestdata} {
		names, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range names {
			if filepath.Base(name) == "expected.json" {
				continue
			}
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", " ", "{}", "[]", "null", `{"entry":[]}`, `{"entry":[{}]}`, `{"entry":[{"changes":[{}]}]}`,
		`{"entry":[{"id":"1","changes":[{"field":"messages","value":{"statuses":[{"id":"w","status":"sent","timestamp":"1"},{"id":"w","status":"sent","timestamp":"1"}]}}]}]}`,
		`{"entry":[{"id":"1","changes":[{"field":"messages","value":{"statuses":[{"id":"w","timestamp":{}}],"errors":[{"code":"x"}]}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	h := schema.NewHasher(normKey)
	other := schema.Source{App: "other", ReceivedAt: time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC), RawSeq: 42}
	f.Fuzz(func(t *testing.T, body []byte) {
		var rows schema.Rows
		NewNormalizer(h).Normalize(body, normSource(0), "", &rows)
		if rows.Len() == 0 {
			t.Fatalf("no rows and no dead letter for %q", body)
		}
		checkDistinctIDs(t, &rows)
		for _, d := range rows.DeadLetters {
			if d.Reason == "" || d.Error == "" || d.RawMsgID == "" {
				t.Errorf("dead letter without reason, error or body id: %+v", d)
			}
		}
		// Kept JSON is valid, and holds no end user's number or BSUID
		// under a user key: hashing it again changes nothing.
		b := &run{n: NewNormalizer(h)}
		kept := func(what, s string) {
			t.Helper()
			validJSON(t, what, s)
			if again, changed := b.scrub(s); changed {
				t.Errorf("%s keeps an end user in clear: %q, hashed %q", what, s, again)
			}
		}
		for _, r := range rows.Statuses {
			kept("status extra", r.Extra)
		}
		for _, r := range rows.Inbound {
			kept("inbound extra", r.Extra)
		}
		for _, r := range rows.Management {
			kept("management raw", r.Raw)
		}

		var withContent schema.Rows
		NewNormalizer(h, WithContent(true)).Normalize(body, normSource(0), "", &withContent)
		checkEventJSON(t, &withContent)

		// Value-level errors without an entry time take the minute of
		// receipt: all ids agree within a minute, the others on any day.
		var again, sameMinute schema.Rows
		NewNormalizer(h).Normalize(body, other, "", &again)
		NewNormalizer(h).Normalize(body, schema.Source{App: "again", ReceivedAt: normSource(59).ReceivedAt, RawSeq: 43}, "", &sameMinute)
		if a, b := allIDs(&rows), allIDs(&sameMinute); !reflect.DeepEqual(a, b) {
			t.Errorf("ids depend on the source within a minute:\n%v\n%v", a, b)
		}
		if a, b := allIDs(withoutValueErrors(rows)), allIDs(withoutValueErrors(again)); !reflect.DeepEqual(a, b) {
			t.Errorf("ids depend on the source:\n%v\n%v", a, b)
		}
	})
}

func validJSON(t *testing.T, what, s string) {
	t.Helper()
	if s != "" && !json.Valid([]byte(s)) {
		t.Errorf("%s is not JSON: %q", what, s)
	}
}

// withoutValueErrors is rows without the error rows of origin value.
func withoutValueErrors(rows schema.Rows) *schema.Rows {
	rows.Errors = slices.DeleteFunc(slices.Clone(rows.Errors), func(e schema.ErrorRow) bool { return e.Origin == originValue })
	return &rows
}

// allIDs returns the sorted ids of rows' events and error occurrences,
// without the unknown-keys row, whose id is the body's.
func allIDs(rows *schema.Rows) []string {
	var ids []string
	for _, r := range rows.Statuses {
		ids = append(ids, r.EventID)
	}
	for _, r := range rows.Inbound {
		ids = append(ids, r.EventID)
	}
	for _, r := range rows.Management {
		if r.Field != FieldUnknownKeys {
			ids = append(ids, r.EventID)
		}
	}
	for _, e := range rows.Errors {
		ids = append(ids, fmt.Sprintf("%s[%d]", e.EventID, e.Index))
	}
	for _, d := range rows.DeadLetters {
		ids = append(ids, d.Reason+" "+d.Item)
	}
	sort.Strings(ids)
	return ids
}

package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"testing"
)

// FuzzDecode feeds Decode arbitrary bodies, seeded with every fixture, and
// checks that it never panics, that every failure wraps ErrMalformed, that
// it fails exactly on the bodies it should (compared with encoding/json),
// and that nothing is lost: every entry, change and message status of the
// body is either in the typed view or in Problems.
func FuzzDecode(f *testing.F) {
	for _, b := range loadFixtures(f) {
		f.Add(b)
	}
	for _, b := range loadTestdata(f) {
		f.Add(b)
	}
	for _, s := range []string{
		``, `{}`, `[]`, `{"entry":null}`, `{"entry":[]}`, `{"entry":[{}]}`,
		string(envelope(statusesChange(status("a", ""), status("b", `"pricing":{"billable":"true"}`)))),
		string(envelope(`{"value":"x","field":"messages"}`, `{"field":"calls","value":{"statuses":[1]}}`)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := Decode(body)
		if err != nil {
			if p != nil {
				t.Fatalf("got a payload with error %v", err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v: want it to wrap ErrMalformed", err)
			}
		}
		valid := json.Valid(body)
		if !valid {
			if err == nil {
				t.Fatalf("invalid JSON decoded without error")
			}
			return
		}
		if wantOK := entryShapeOK(body); wantOK != (err == nil) {
			t.Fatalf("valid JSON with entry shape ok=%v: got error %v", wantOK, err)
		}
		if err != nil {
			return
		}
		checkKept(t, body, p)
		if !hasDuplicateKeys(body) {
			checkNothingLost(t, body, p)
		}
	})
}

// entryShapeOK reports whether body is an object whose every "entry" key
// holds an array, and that has at least one.
func entryShapeOK(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := false
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
		if k == "entry" {
			if v[0] != '[' {
				return false
			}
			seen = true
		}
	}
	return seen
}

// hasDuplicateKeys reports whether any object in body repeats a key.
func hasDuplicateKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return err != io.EOF
		}
		switch tok {
		case json.Delim('{'):
			keys := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				if keys[k.(string)] {
					return true
				}
				keys[k.(string)] = true
				if walk() {
					return true
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if walk() {
					return true
				}
			}
			_, _ = dec.Token()
		}
		return false
	}
	return walk()
}

// checkKept checks that every kept byte range is valid JSON taken from the
// body.
func checkKept(t *testing.T, body []byte, p *Payload) {
	t.Helper()
	kept := func(what string, raw []byte) {
		if !json.Valid(raw) || !bytes.Contains(body, raw) {
			t.Fatalf("%s: got %q, want valid JSON from the body", what, raw)
		}
	}
	for env := range p.Changes() {
		kept("change value", env.Change.Value)
		kept("change raw", env.Change.Raw)
	}
	for r := range p.Statuses() {
		kept("status raw", r.Item.Raw)
	}
	for _, pr := range p.Problems {
		kept("problem raw", pr.Raw)
		if !errors.Is(pr, ErrBadItem) || pr.Path == "" {
			t.Fatalf("problem %v: want a path and ErrBadItem", pr)
		}
	}
	for _, u := range p.Unknown {
		kept("unknown key "+u.Path, u.Value)
	}
}

// listOf maps the path of a reported item to the list it was left out of:
// "entry", "entry[0].changes" or "entry[0].changes[1].statuses".
var listOf = regexp.MustCompile(`^(entry)\[\d+\]$|^(entry\[\d+\]\.changes)\[\d+\]$|^(entry\[\d+\]\.changes\[\d+\])\.value\.(statuses)\[\d+\]$`)

// checkNothingLost counts entries, changes and message statuses in the body
// (with encoding/json, matching keys exactly) and checks that each is either
// decoded or reported.
func checkNothingLost(t *testing.T, body []byte, p *Payload) {
	t.Helper()
	reported := map[string]int{}
	for _, pr := range p.Problems {
		if m := listOf.FindStringSubmatch(pr.Path); m != nil {
			reported[m[1]+m[2]+m[3]+m[4]]++
		}
	}
	var root map[string]json.RawMessage
	if json.Unmarshal(body, &root) != nil {
		t.Fatal("valid body did not decode as an object")
	}
	var entries []json.RawMessage
	_ = json.Unmarshal(root["entry"], &entries)
	if got := len(p.Entries) + reported["entry"]; got != len(entries) {
		t.Fatalf("entries: got %d decoded + reported, want %d", got, len(entries))
	}
	for _, e := range p.Entries {
		var obj map[string]json.RawMessage
		var changes []json.RawMessage
		_ = json.Unmarshal(e.Raw, &obj)
		_ = json.Unmarshal(obj["changes"], &changes)
		list := fmt.Sprintf("entry[%d].changes", e.pos)
		if got := len(e.Changes) + reported[list]; got != len(changes) {
			t.Fatalf("%s: got %d decoded + reported, want %d", list, got, len(changes))
		}
		for _, c := range e.Changes {
			if c.Field != FieldMessages || c.Messaging == nil {
				continue
			}
			var val map[string]json.RawMessage
			var statuses []json.RawMessage
			_ = json.Unmarshal(c.Value, &val)
			_ = json.Unmarshal(val["statuses"], &statuses)
			list := fmt.Sprintf("entry[%d].changes[%d]statuses", e.pos, c.pos)
			if got := len(c.Messaging.Statuses) + reported[list]; got != len(statuses) {
				t.Fatalf("%s: got %d decoded + reported, want %d", list, got, len(statuses))
			}
		}
	}
}

// FuzzScanner compares the scanner's idea of valid JSON with encoding/json.
func FuzzScanner(f *testing.F) {
	for _, b := range loadFixtures(f) {
		f.Add(b)
	}
	for _, s := range []string{`0`, `-1.5e+3`, `"\ud83d\ude00"`, `[1,[2,{"a":null}]]`, `{"a":tru}`, `01`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("%q: got valid=%v, want %v (encoding/json)", b, got, want)
		}
	})
}

// FuzzString compares string decoding (escapes, surrogates, invalid UTF-8)
// with encoding/json.
func FuzzString(f *testing.F) {
	for _, s := range []string{`a`, `\ud83d\ude00`, `\ud800x`, "\xff", `caf\u00e9`, `\"\\\/\b\f\n\r\t`, `\u0000`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inner []byte) {
		in := slices.Concat([]byte(`"`), inner, []byte(`"`))
		var want string
		wantErr := json.Unmarshal(in, &want)
		got, err := decodeString(in)
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Fatalf("%q: got %q (%v), want %q (%v)", in, got, err, want, wantErr)
		}
	})
}

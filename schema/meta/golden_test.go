package meta

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files")

// loadTestdata reads this package's own bodies in testdata/.
func loadTestdata(tb testing.TB) map[string][]byte {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no testdata bodies: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// view is the JSON form of a decoded payload used by the golden files: every
// change with its typed view and context, every problem and unknown key.
type view struct {
	Object   string       `json:"object"`
	Extra    Extras       `json:"extra,omitempty"`
	Changes  []changeView `json:"changes"`
	Problems []problemVw  `json:"problems,omitempty"`
	Unknown  []unknownVw  `json:"unknown,omitempty"`
}

type changeView struct {
	Path               string       `json:"path"`
	WABAID             string       `json:"waba_id"`
	EntryTime          int64        `json:"entry_time,omitempty"`
	Field              string       `json:"field"`
	Known              bool         `json:"known"`
	PhoneNumberID      string       `json:"phone_number_id,omitempty"`
	DisplayPhoneNumber string       `json:"display_phone_number,omitempty"`
	View               any          `json:"view,omitempty"`
	CallStatuses       []CallStatus `json:"call_statuses,omitempty"`
	RawValueBytes      int          `json:"raw_value_bytes"`
}

type problemVw struct {
	Path, EntryID, Field, PhoneNumberID, Raw, Err string
}

type unknownVw struct {
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

func viewOf(t *testing.T, p *Payload) view {
	v := view{Object: p.Object, Extra: p.Extra, Changes: []changeView{}}
	for env := range p.Changes() {
		mine, _ := typedView(nil, env.Change)
		cv := changeView{
			Path: env.Path(), WABAID: env.WABAID(), EntryTime: env.EntryTime(), Field: env.Field(),
			Known: env.Change.Known(), PhoneNumberID: env.PhoneNumberID(),
			DisplayPhoneNumber: env.DisplayPhoneNumber(), View: mine, RawValueBytes: len(env.Change.Value),
		}
		if m := env.Change.Messaging; m != nil {
			cv.CallStatuses = m.CallStatuses
		}
		v.Changes = append(v.Changes, cv)
	}
	for _, pr := range p.Problems {
		v.Problems = append(v.Problems, problemVw{pr.Path, pr.EntryID, pr.Field, pr.PhoneNumberID, string(pr.Raw), pr.Error()})
	}
	for _, u := range p.Unknown {
		v.Unknown = append(v.Unknown, unknownVw(u))
	}
	return v
}

// TestGolden decodes each testdata body and compares the full decoded view
// with testdata/golden/<name>.
func TestGolden(t *testing.T) {
	for name, body := range loadTestdata(t) {
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			p, err := Decode(body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got, err := json.MarshalIndent(viewOf(t, p), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("decoded view differs from %s (run with -update and review the diff):\n%s", path, got)
			}
		})
	}
}

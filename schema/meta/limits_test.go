package meta

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// manyUnknownKeys returns a body of about size bytes whose one status
// carries short unknown keys ("1":0, "2":0, ...) until the body is that
// large, and how many it carries.
func manyUnknownKeys(size int) ([]byte, int) {
	var b strings.Builder
	n := 0
	for b.Len() < size {
		n++
		fmt.Fprintf(&b, `"%x":0,`, n)
	}
	keys := strings.TrimSuffix(b.String(), ",")
	return envelope(statusesChange(status("wamid.A", keys))), n
}

// TestUnknownKeysBounded checks that a body of many small unknown keys
// costs memory in proportion to its size, not to its count of keys: a 3 MB
// body of about 320,000 keys allocated more than 400 MB and kept 88 MB live,
// a path string, an Extra field and an item field per key. Past MaxUnknown
// the keys are only counted, in Payload.UnknownDropped.
func TestUnknownKeysBounded(t *testing.T) {
	body, n := manyUnknownKeys(3 << 20)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := Decode(body)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(p)
	t.Logf("body %d bytes, %d unknown keys: %d bytes allocated, %d live", len(body), n, allocated, live)
	if limit := uint64(len(body)) / 2; allocated > limit {
		t.Errorf("Decode allocated %d bytes for a %d-byte body, want at most half of it", allocated, len(body))
	}
	if limit := int64(len(body)) / 4; live > limit {
		t.Errorf("the payload holds %d bytes beside its %d-byte body, want at most a quarter of it", live, len(body))
	}
	if len(p.Unknown) != MaxUnknown || p.UnknownDropped != n-MaxUnknown {
		t.Errorf("unknown keys: %d listed, %d dropped; want %d and %d", len(p.Unknown), p.UnknownDropped, MaxUnknown, n-MaxUnknown)
	}
	s := p.Entries[0].Changes[0].Messaging.Statuses[0]
	if len(s.Unknown) != MaxUnknown || len(s.Extra) != MaxUnknown {
		t.Errorf("status: %d unknown keys, %d extra; want %d of each", len(s.Unknown), len(s.Extra), MaxUnknown)
	}
	if s.ID != "wamid.A" || string(s.Raw) == "" {
		t.Errorf("status: id %q, raw %d bytes; want it decoded and kept whole", s.ID, len(s.Raw))
	}
}

// TestUnknownKeysLimit checks where MaxUnknown falls: keys up to it are kept
// as before, one past it is counted, and the keys of a bad item, which is
// left out of the typed view, count against nothing.
func TestUnknownKeysLimit(t *testing.T) {
	keys := func(from, n int) string {
		var b strings.Builder
		for i := from; i < from+n; i++ {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":%d`, i, i)
		}
		return b.String()
	}
	tests := []struct {
		name          string
		body          []byte
		kept, dropped int
		lastPath      string
	}{
		{"up to the limit", envelope(statusesChange(status("a", keys(0, MaxUnknown)))), MaxUnknown, 0,
			"entry[0].changes[0].value.statuses[0].k999"},
		{"one past it", envelope(statusesChange(status("a", keys(0, MaxUnknown)), status("b", keys(MaxUnknown, 1)))), MaxUnknown, 1,
			"entry[0].changes[0].value.statuses[0].k999"},
		{"a bad item's keys", envelope(statusesChange(status("a", keys(0, 2*MaxUnknown)+`,"pricing":{"billable":"x"}`), status("b", keys(0, 1)))), 1, 0,
			"entry[0].changes[0].value.statuses[1].k0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Unknown) != tt.kept || p.UnknownDropped != tt.dropped {
				t.Fatalf("got %d unknown keys and %d dropped, want %d and %d", len(p.Unknown), p.UnknownDropped, tt.kept, tt.dropped)
			}
			if got := p.Unknown[len(p.Unknown)-1].Path; got != tt.lastPath {
				t.Errorf("last unknown key: got %s, want %s", got, tt.lastPath)
			}
			kept := 0
			for r := range p.Statuses() {
				kept += len(r.Item.Unknown)
				if len(r.Item.Unknown) != len(r.Item.Extra) {
					t.Errorf("status %s: %d unknown keys but %d extra", r.Item.ID, len(r.Item.Unknown), len(r.Item.Extra))
				}
			}
			if kept != tt.kept {
				t.Errorf("statuses hold %d unknown keys, want %d", kept, tt.kept)
			}
		})
	}
}

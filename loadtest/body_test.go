package loadtest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// StatusBody makes valid JSON of the size asked, stamped at the time given,
// with a distinct message id for every index, not in the order of the
// indexes.
func TestStatusBody(t *testing.T) {
	type status struct {
		ID        string `json:"id"`
		Timestamp string `json:"timestamp"`
	}
	var body struct {
		Entry []struct {
			Changes []struct {
				Value struct {
					Statuses []status `json:"statuses"`
				} `json:"value"`
			} `json:"changes"`
		} `json:"entry"`
	}
	seen := map[string]uint64{}
	ordered := 0
	prev := ""
	for i := range uint64(100_000) {
		b := StatusBody(i, 900, 1796342400)
		if i%10_000 == 0 {
			if len(b) != 900 {
				t.Fatalf("body %d: %d bytes, want 900", i, len(b))
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("body %d: %v", i, err)
			}
			if st := body.Entry[0].Changes[0].Value.Statuses[0]; st.Timestamp != "1796342400" {
				t.Fatalf("body %d: timestamp %q", i, st.Timestamp)
			}
		}
		// The id: from "wamid." to the closing quote.
		start := 0
		for j := 0; j+6 <= len(b); j++ {
			if string(b[j:j+6]) == "wamid." {
				start = j
				break
			}
		}
		end := start
		for b[end] != '"' {
			end++
		}
		id := string(b[start:end])
		if j, dup := seen[id]; dup {
			t.Fatalf("bodies %d and %d have the same message id %s", j, i, id)
		}
		seen[id] = i
		if id > prev {
			ordered++
		}
		prev = id
	}
	// Sorted ids would rise every time; scrambled ones about half the time.
	if ordered > 60_000 || ordered < 40_000 {
		t.Errorf("message ids rose from one body to the next %d times in 100,000: not scrambled", ordered)
	}
}

// TestMediaIDsDistinct: images whose seqs differ only in the low bits of
// the ids' base, or in their numbers, have ids of their own.
func TestMediaIDsDistinct(t *testing.T) {
	seen := map[uint64]string{}
	for _, number := range []int32{0, 1, 7} {
		for _, seq := range []uint32{0, 1, 2, 3, 1 << 10, 1<<10 | 1, 1<<31 - 1, 1 << 31, 1<<32 - 1, uint32(8_000_000_000_000_000 & (1<<32 - 1))} {
			id, what := mediaID(number, seq), fmt.Sprintf("number %d seq %d", number, seq)
			if other, ok := seen[id]; ok {
				t.Errorf("%s and %s share the media id %d", what, other, id)
			}
			seen[id] = what
		}
	}
}

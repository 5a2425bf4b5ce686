package processor

import "testing"

// TestPullBytes: a pull has room for the largest message the servers
// take, 8 MiB at least and 64 MiB at most; unknown, 64 MiB.
func TestPullBytes(t *testing.T) {
	for _, c := range []struct {
		maxPayload int64
		want       int
	}{
		{0, 64 << 20},
		{1 << 20, 8 << 20},
		{8 << 20, 8<<20 + 64<<10},
		{32 << 20, 32<<20 + 64<<10},
		{64 << 20, 64 << 20},
	} {
		if got := pullBytes(c.maxPayload); got != c.want {
			t.Errorf("max_payload %d: %d, want %d", c.maxPayload, got, c.want)
		}
	}
}

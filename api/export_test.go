package api

import "testing"

// SetMaxStreamsPerToken sets how many live streams a token may hold, for
// the test.
func SetMaxStreamsPerToken(t *testing.T, n int) {
	old := maxStreamsPerToken
	maxStreamsPerToken = n
	t.Cleanup(func() { maxStreamsPerToken = old })
}

package api

import (
	"testing"
	"time"
)

// SetMaxStreamsPerToken sets how many live streams a token may hold, for
// the test.
func SetMaxStreamsPerToken(t *testing.T, n int) {
	old := maxStreamsPerToken
	maxStreamsPerToken = n
	t.Cleanup(func() { maxStreamsPerToken = old })
}

// SetLiveHeartbeat sets how often an idle live stream beats, and checks
// its token again, for the test.
func SetLiveHeartbeat(t *testing.T, d time.Duration) {
	old := liveHeartbeat
	liveHeartbeat = d
	t.Cleanup(func() { liveHeartbeat = old })
}

// SetNumbersTTL sets how long a tenant's numbers are kept before they are
// read again, for the test.
func SetNumbersTTL(t *testing.T, d time.Duration) {
	old, oldRetry := numbersTTL, numbersRetry
	numbersTTL, numbersRetry = d, d/2
	t.Cleanup(func() { numbersTTL, numbersRetry = old, oldRetry })
}

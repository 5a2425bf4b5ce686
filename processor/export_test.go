package processor

import (
	"testing"
	"time"
)

// SetReplayWait sets how long a replay waits for its next body before it
// asks whether NATS and RAW answer, until the test ends.
func SetReplayWait(t testing.TB, d time.Duration) {
	old := replayWait
	replayWait = d
	t.Cleanup(func() { replayWait = old })
}

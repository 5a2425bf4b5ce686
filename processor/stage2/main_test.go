package stage2

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them. One of
// nats-server's own is let go: the wait of a sourced stream (the consumer
// group's) for its source consumer, which a server shut down mid-setup
// leaves until its timeout (seconds) passes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"))
}

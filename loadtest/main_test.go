package loadtest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/wahook/wahook/internal/testutil"
)

// TestMain fails the package's tests if a goroutine outlives them, save
// the ones fasthttp and nats-server keep (testutil.Leftovers).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.Leftovers()...) }

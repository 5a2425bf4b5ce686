package funnel

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/wahook/wahook/internal/testutil"
)

// TestMain fails the package's tests if a goroutine outlives them, save
// the ones nats-server keeps (testutil.Leftovers).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.Leftovers()...) }

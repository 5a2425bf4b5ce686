package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/schema/schematest"
)

// slowPingConn counts ClickHouse pings, each of which takes a while.
type slowPingConn struct {
	driver.Conn
	pings atomic.Int64
}

func (c *slowPingConn) Ping(ctx context.Context) error {
	c.pings.Add(1)
	time.Sleep(300 * time.Millisecond)
	return c.Conn.Ping(ctx)
}

// TestReadyzShared: the requests to /readyz that come while one checks
// ClickHouse share its answer. /readyz asks for no token, and each made a
// ping of its own: a flood took the pool's connections from the reports.
func TestReadyzShared(t *testing.T) {
	ch := schematest.ClickHouse(t)
	conn := &slowPingConn{Conn: ch.Conn}
	app := newAPI(t, api.NewStore(conn, ch.Database, api.DefaultTiers())).App()
	var wg sync.WaitGroup
	var ready atomic.Int64
	for range 40 {
		wg.Go(func() {
			resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/readyz", nil), 30_000)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode == http.StatusOK && string(b) == "ready" {
				ready.Add(1)
			}
		})
	}
	wg.Wait()
	if ready.Load() != 40 {
		t.Errorf("%d of 40 requests answered ready", ready.Load())
	}
	// 40 requests over 300 ms checks: a few checks, not one each.
	if n := conn.pings.Load(); n == 0 || n > 5 {
		t.Errorf("40 requests to /readyz made %d pings, want 1 to 5", n)
	}
	// Once the flood is over, a request checks again.
	before := conn.pings.Load()
	if code, _, _ := get(t, app, "/readyz", ""); code != http.StatusOK || conn.pings.Load() != before+1 {
		t.Errorf("a later request: %d, %d pings more, want 200 and 1", code, conn.pings.Load()-before)
	}
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// TestProcessReadiness: wahook process's /readyz says now whether it can
// work: it was latched ready at the start, whatever NATS and ClickHouse
// did after.
func TestProcessReadiness(t *testing.T) {
	js := schematest.StartJetStream(t)
	chSrv := schematest.StartClickHouse(t)
	ch := chSrv.Database(t)
	health := freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "process", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--data-dir", t.TempDir(),
		"--listen", health, "--phone-hash-key", "k", "--log-format", "console", "--log-level", "warn")
	ready := func(want int, says string) {
		t.Helper()
		var code int
		var body string
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("/readyz to answer %d %q", want, says), func() (bool, string) {
			if resp, err := http.Get("http://" + health + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, body = resp.StatusCode, string(b)
			}
			return code == want && strings.Contains(body, says), fmt.Sprintf("/readyz: %d %q, want %d %q\n%s", code, body, want, says, logs.String())
		})
	}
	ready(200, "ready")
	chSrv.Stop()
	ready(503, "ClickHouse")
	chSrv.Start()
	ready(200, "ready")
	js.Shutdown()
	ready(503, "NATS not connected")
	js.Start()
	ready(200, "ready")
}

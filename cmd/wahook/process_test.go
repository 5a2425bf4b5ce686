package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get("http://" + health + "/readyz")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if code, body = resp.StatusCode, string(b); code == want && strings.Contains(body, says) {
				return
			}
		}
		t.Fatalf("/readyz: %d %q, want %d %q\n%s", code, body, want, says, logs.String())
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

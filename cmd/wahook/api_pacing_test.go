package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestAPIPacingWithoutSendResults: wahook api with --nats-url and
// --send-results=false reads the pacing signals from NATS and refuses send
// results (503). The pacing readers came with the send-result intake only,
// so an API run without the intake (the chart's api.sendResults=false,
// which dropped NATS) answered 503 on /api/v1/pacing too.
func TestAPIPacingWithoutSendResults(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketPacing})
	if err != nil {
		t.Fatal(err)
	}
	const number = "109876543210777"
	if _, err := kv.Put(ctx, schema.PacingKey(number), []byte(`{"phone_number_id":"`+number+`","advice":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: schema.StreamRaw, Subjects: []string{schema.RawSubject(">")}}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		flag        string
		sendResults int // the status of a send-results POST
	}{
		{"--send-results=false", http.StatusServiceUnavailable},
		{"--send-results=true", http.StatusAccepted},
	} {
		t.Run(c.flag, func(t *testing.T) {
			listen := freeAddr(t)
			rctx, rcancel := context.WithCancel(ctx)
			var out, logs syncBuffer
			done := make(chan int, 1)
			go func() {
				// Nothing listens on the DSN's port: the API opens
				// ClickHouse lazily, and these routes do not need it.
				done <- run(rctx, []string{"api", "--api-listen", listen, "--api-token", e2eToken, "--nats-url", srv.URL(),
					c.flag, "--clickhouse-dsn", "clickhouse://" + freeAddr(t) + "/wahook", "--log-level", "warn"}, &out, &logs)
			}()
			defer func() {
				rcancel()
				if code := <-done; code != 0 {
					t.Errorf("api exited %d:\n%s\n%s", code, out.String(), logs.String())
				}
			}()
			do := func(method, path, body string) (int, string) {
				return httpDo(ctx, method, "http://"+listen+path, e2eToken, body)
			}
			testutil.Eventually(t, 30*time.Second, "the API to answer /healthz", func() (bool, string) {
				select {
				case code := <-done:
					done <- code
					return true, ""
				default:
				}
				code, body := do(http.MethodGet, "/healthz", "")
				return code == 200, fmt.Sprintf("%d %s\n%s", code, body, logs.String())
			})
			if code, body := do(http.MethodGet, "/api/v1/pacing", ""); code != 200 || !strings.Contains(body, number) {
				t.Errorf("GET /api/v1/pacing with %s: %d %s; want 200 with the signal of %s\n%s", c.flag, code, body, number, logs.String())
			}
			doc := `{"results":[{"phone_number_id":"` + number + `","status":"accepted","message_id":"wamid.P1","recipient":"15551230001","timestamp":` + fmt.Sprint(time.Now().Unix()) + `}]}`
			if code, body := do(http.MethodPost, "/api/v1/send-results", doc); code != c.sendResults {
				t.Errorf("POST /api/v1/send-results with %s: %d %s; want %d", c.flag, code, body, c.sendResults)
			}
		})
	}
}

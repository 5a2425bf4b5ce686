package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
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
		"--listen", health, "--phone-hash-key", "wahook-test-phone-key", "--log-format", "console", "--log-level", "warn")
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

// TestProcessWaitsForNATS: a process started before its NATS waits for it,
// saying so, and then works. Before, with --migrate=false it exited 1 at
// once ("provision stream WAHOOK_EVENTS: nats: outbound buffer limit
// exceeded"): stage 1 tried EVENTS and the numbers bucket once, while stage 2
// tried again; with --migrate=true it waited, but logged the outage of the
// migrations lease as "clickhouse not ready".
func TestProcessWaitsForNATS(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	if code, out, errOut := runCmd(t, "migrate", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--log-level", "error"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	js.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type proc struct {
		migrate, says string
		logs          syncBuffer
		done          chan int
	}
	procs := []*proc{
		{migrate: "false", says: "nats not ready: stage 1 waits to provision WAHOOK_EVENTS"},
		{migrate: "true", says: "nats not ready: stage 1 waits for the migrations lease"},
	}
	for _, p := range procs {
		p.done = make(chan int, 1)
		dataDir, listen := t.TempDir(), freeAddr(t) // on the test's goroutine
		go func() {
			p.done <- run(ctx, []string{"process", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--migrate=" + p.migrate,
				"--data-dir", dataDir, "--listen", listen, "--phone-hash-key", "wahook-test-phone-key", "--no-pacing", "--funnel-interval", "0",
				"--flush-interval", "100ms", "--log-format", "console"}, io.Discard, &p.logs)
		}()
	}
	defer func() {
		cancel()
		for _, p := range procs {
			<-p.done
		}
	}()
	wait := func(what func(*proc) string) {
		t.Helper()
		for _, p := range procs {
			what := what(p)
			testutil.Eventually(t, 20*time.Second, "--migrate="+p.migrate+": "+what, func() (bool, string) {
				select {
				case code := <-p.done:
					p.done <- code
					t.Fatalf("--migrate=%s exited %d while NATS was away:\n%s", p.migrate, code, p.logs.String())
				default:
				}
				return strings.Contains(p.logs.String(), what), p.logs.String()
			})
		}
	}
	wait(func(p *proc) string { return p.says })
	for _, p := range procs {
		if strings.Contains(p.logs.String(), "clickhouse not ready") {
			t.Fatalf("--migrate=%s blamed ClickHouse for NATS:\n%s", p.migrate, p.logs.String())
		}
	}
	js.Start()
	wait(func(*proc) string { return "stage 1 consuming" })
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, _ := jetstream.New(nc)
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.natslate","status":"sent","timestamp":"1781514311","recipient_id":"4915155500734"}]}}]}]}`)
	if _, err := jsc.PublishMsg(ctx, &nats.Msg{Subject: schema.RawSubject("default"), Data: body,
		Header: nats.Header{schema.HeaderMsgID: []string{schema.RawMsgID(body)}, schema.HeaderApp: []string{"default"}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the body's event in ClickHouse", func() (bool, string) {
		return count(t, ch, "SELECT count() FROM {db}.status_events") == 1, procs[0].logs.String() + procs[1].logs.String()
	})
}

// TestProcessEndsWithoutJetStream: a NATS server without JetStream is not
// a NATS away: process ends at once, naming it. Since stage 1 waits for
// NATS at start, it took the requests that find no responder for a
// passing outage and waited for ever, ready.
func TestProcessEndsWithoutJetStream(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	ch := schematest.ClickHouse(t)
	// With migrations too: their lease is the first request to JetStream,
	// and the process waited for it for ever.
	for _, migrate := range []string{"false", "true"} {
		t.Run("migrate="+migrate, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var logs syncBuffer
			done := make(chan int, 1)
			dataDir, listen := t.TempDir(), freeAddr(t) // on the test's goroutine
			go func() {
				done <- run(ctx, []string{"process", "--nats-url", srv.ClientURL(), "--clickhouse-dsn", ch.DSN, "--migrate=" + migrate,
					"--data-dir", dataDir, "--listen", listen, "--phone-hash-key", "wahook-test-phone-key", "--no-pacing", "--funnel-interval", "0",
					"--log-format", "console"}, io.Discard, &logs)
			}()
			select {
			case code := <-done:
				if code == 0 || !strings.Contains(logs.String(), "no responders") {
					t.Fatalf("process on a NATS without JetStream: exit %d, want 1 naming the requests no one answers:\n%s", code, logs.String())
				}
			case <-time.After(15 * time.Second):
				cancel()
				<-done
				t.Fatalf("process still waits 15 s into a NATS without JetStream:\n%s", logs.String())
			}
		})
	}
}

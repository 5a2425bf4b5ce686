package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestMain lets the test binary stand in for the wahook binary: with
// WAHOOK_TEST_MAIN_ARGS set it runs those arguments and exits, so tests can
// start wahook as a process of its own and kill it.
func TestMain(m *testing.M) {
	if args := os.Getenv("WAHOOK_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"wahook"}, strings.Fields(args)...)
		main()
		return
	}
	// Fails the tests if a goroutine outlives them, save the ones fasthttp
	// and nats-server keep (testutil.Leftovers).
	goleak.VerifyTestMain(m, testutil.Leftovers()...)
}

// startWahook runs "wahook args..." as a child process.
func startWahook(t *testing.T, logs *syncBuffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WAHOOK_TEST_MAIN_ARGS="+strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// TestProcessKilledMidBatch kills "wahook process" with SIGKILL while bodies
// flow, starts it again, and finds every event in ClickHouse exactly once.
func TestProcessKilledMidBatch(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	if code, out, errOut := runCmd(t, "migrate", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--log-level", "error"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	health := freeAddr(t)
	args := []string{"process", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--data-dir", t.TempDir(), "--listen", health,
		"--phone-hash-key", "wahook-test-phone-key", "--flush-interval", "200ms", "--batch-rows", "500", "--ack-wait", "3s", "--log-format", "console"}
	var logs syncBuffer
	proc := startWahook(t, &logs, args...)

	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, _ := jetstream.New(nc)
	const n = 3000
	var wg sync.WaitGroup
	var published atomic.Int64
	var finished atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer finished.Store(true)
		for i := 0; i < n; i++ {
			body := []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.kill-%d","status":"failed","timestamp":"%d","recipient_id":"4915155500734","errors":[{"code":131056,"title":"pair rate"}]},{"id":"wamid.kill-%d","status":"sent","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i, i, 1781514311+i))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := jsc.PublishMsg(ctx, &nats.Msg{Subject: schema.RawSubject("default"), Data: body,
				Header: nats.Header{schema.HeaderMsgID: []string{schema.RawMsgID(body)}, schema.HeaderApp: []string{"default"}}})
			cancel()
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			published.Add(1)
			time.Sleep(500 * time.Microsecond) // the publisher's pace, not a wait
		}
	}()
	// Kill it mid-stream, once rows are being written.
	testutil.Eventually(t, 20*time.Second, "the first rows", func() (bool, string) {
		return count(t, ch, "SELECT count() FROM {db}.status_events") > 0, logs.String()
	})
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	killedAt := count(t, ch, "SELECT uniqExact(event_id) FROM {db}.status_events")
	// Bodies come while it is down: the restarted process finds a backlog
	// (unless the publisher is done already).
	atKill := published.Load()
	testutil.Eventually(t, 20*time.Second, "a body published while process is down", func() (bool, string) {
		return published.Load() > atKill || finished.Load(), fmt.Sprintf("%d published", published.Load())
	})
	proc = startWahook(t, &logs, args...)
	wg.Wait()

	// A batch is written table by table, so wait for both counts.
	testutil.Eventually(t, 60*time.Second, "every event once", func() (bool, string) {
		got := count(t, ch, "SELECT uniqExact(event_id) FROM {db}.status_events")
		failures := count(t, ch, "SELECT toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute WHERE code = 131056")
		state := fmt.Sprintf("status events: got %d, want %d; 131056 failures: got %d, want %d\n%s", got, 2*n, failures, n, logs.String())
		if got > 2*n || failures > n {
			t.Fatal(state)
		}
		return got == 2*n && failures == n, state
	})
	// The restarted process serves its health and its stage 1 metrics.
	waitReady(t, "http://"+health, &logs)
	resp, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "wahook_processor_bodies_total") || !strings.Contains(string(metrics), "wahook_processor_batches_total") {
		t.Fatalf("process /metrics lacks stage 1 metrics:\n%.2000s", metrics)
	}
	if killedAt == 0 || killedAt >= 2*n {
		t.Fatalf("the kill did not land mid-stream (%d of %d events stored at the kill)", killedAt, 2*n)
	}
	_ = proc.Process.Signal(syscall.SIGTERM)
	_, _ = proc.Process.Wait()
	t.Logf("killed with %d of %d events stored; after the restart all %d once", killedAt, 2*n, 2*n)
}

func count(t *testing.T, ch *schematest.ClickHouseDB, q string) uint64 {
	t.Helper()
	var n uint64
	if err := ch.Conn.QueryRow(context.Background(), strings.ReplaceAll(q, "{db}", ch.Database)).Scan(&n); err != nil {
		return 0 // the table may not exist yet
	}
	return n
}

// TestSecondSignalEndsAtOnce: the first SIGTERM stops serve in order (here
// a --shutdown-delay of 20 s, readiness failing first); a second ends it
// at once. It was ignored: the delay ran its full length whatever came.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	proc := startWahook(t, &logs, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen,
		"--data-dir", t.TempDir(), "--app-secret", "second-signal-secret", "--shutdown-delay", "20s",
		"--log-format", "console", "--log-level", "warn")
	waitReady(t, "http://"+listen, &logs)
	exited := make(chan struct{})
	go func() { _, _ = proc.Process.Wait(); close(exited) }()
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "readiness to fail after the first SIGTERM", func() (bool, string) {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable, fmt.Sprint(resp.StatusCode)
	})
	select {
	case <-exited:
		t.Fatalf("serve ended within its --shutdown-delay after one SIGTERM:\n%s", logs.String())
	default:
	}
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still runs 10 s after a second SIGTERM, within its 20 s --shutdown-delay:\n%s", logs.String())
	}
}

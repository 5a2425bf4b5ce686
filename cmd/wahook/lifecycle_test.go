package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema"
)

// TestStopFailedStepIsTheError: a shutdown step that fails makes the
// command's error (it exited 0 with only a log line), the later steps
// still run, and a command that had already failed keeps its own error.
func TestStopFailedStepIsTheError(t *testing.T) {
	build := func(order *[]string) *parts {
		core, _ := observer.New(zap.InfoLevel)
		p := &parts{log: zap.New(core)}
		for _, name := range []string{"bus stopped", "stage 1 stopped, last batch written", "http stopped"} {
			name := name
			p.add(part{name: name, stop: func() error {
				*order = append(*order, name)
				if strings.HasPrefix(name, "stage 1") {
					return errors.New("clickhouse: connection refused")
				}
				return nil
			}})
		}
		return p
	}

	var order []string
	var err error
	build(&order).stopInto(&err)
	if got := strings.Join(order, ", "); got != "http stopped, stage 1 stopped, last batch written, bus stopped" {
		t.Fatalf("steps run: %s; want all three, in the reverse order", got)
	}
	if err == nil || !strings.Contains(err.Error(), `"stage 1 stopped, last batch written" failed: clickhouse: connection refused`) {
		t.Fatalf("error %v; want the failed step named with its cause", err)
	}

	order = nil
	own := errors.New("stage 2 stopped by itself")
	err = own
	build(&order).stopInto(&err)
	if err != own || len(order) != 3 {
		t.Fatalf("error %v after %d steps; want the command's own error after all 3", err, len(order))
	}

	order = nil
	err = nil
	p := build(&order)
	p.list = p.list[2:] // only "http stopped", which succeeds
	p.stopInto(&err)
	if err != nil {
		t.Fatalf("a clean stop gave %v", err)
	}
}

// TestStageStoppedWhileSettingUp: a stage stopped while it waits to be set
// up (ClickHouse unreachable) ends with the cancellation, which is its stop:
// serve exited 1 on a SIGTERM during a ClickHouse outage. A stage that fails
// on its own still fails its stop.
func TestStageStoppedWhileSettingUp(t *testing.T) {
	waiting := stageTask("stage 1 stopped, last batch written", func(ctx context.Context, done chan<- error) {
		<-ctx.Done()
		done <- fmt.Errorf("clickhouse not ready: %w", ctx.Err())
	})
	if err := waiting.stop(); err != nil {
		t.Errorf("a stage stopped while waiting to be set up: %v; want a clean stop", err)
	}
	failing := stageTask("stage 1 stopped, last batch written", func(ctx context.Context, done chan<- error) {
		<-ctx.Done()
		done <- errors.New("last batch not written: clickhouse: connection refused")
	})
	if err := failing.stop(); err == nil {
		t.Error("a stage whose last batch failed stopped cleanly")
	}
}

// TestServeStopsCleanlyDuringClickHouseOutage: serve stopped while stage 1
// still waits for ClickHouse exits 0 (it exited 1, "shutdown step ...
// failed: context canceled"), the webhooks it took being in RAW.
func TestServeStopsCleanlyDuringClickHouseOutage(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", t.TempDir(),
			"--app-secret", "outage-secret", "--clickhouse-dsn", "clickhouse://default@127.0.0.1:1/wahook", "--log-level", "info"}, io.Discard, &logs)
	}()
	waitReady(t, "http://"+listen, &logs)
	testutil.Eventually(t, 10*time.Second, "stage 1 waiting for ClickHouse", func() (bool, string) {
		return strings.Contains(logs.String(), "clickhouse not ready"), logs.String()
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve stopped during a ClickHouse outage exited %d:\n%s", code, logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestShutdownDelayLeavesTheDrainItsTime: --shutdown-delay and the wait for
// the requests in flight shared one timeout (shutdownTimeout, 30 s): with a
// delay as long as it, or longer, the timeout ended during the delay, and a
// webhook still arriving when the delay ended had no time left: the stop
// failed ("context deadline exceeded", exit 1), its answer not waited for.
// The delay now comes on top of the timeout.
func TestShutdownDelayLeavesTheDrainItsTime(t *testing.T) {
	old := shutdownTimeout
	shutdownTimeout = 2 * time.Second
	t.Cleanup(func() { shutdownTimeout = old })
	listen, natsListen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	dataDir := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "--no-process", "--listen", listen, "--nats-listen", natsListen, "--data-dir", dataDir,
			"--app-secret", abuseSecret, "--shutdown-delay", "2s", "--log-level", "warn"}, io.Discard, &logs)
	}()
	waitReady(t, "http://"+listen, &logs)
	// A webhook whose body is still arriving when the delay ends.
	body := statusBodyOf(41)
	sig := signedRequest("http://"+listen+"/webhook", abuseSecret, body).Header.Get(schema.SignatureHeader)
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	half := len(body) / 2
	fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		schema.SignatureHeader, sig, len(body), body[:half])
	cancel()
	time.Sleep(2500 * time.Millisecond) // the delay, and half a second of the drain
	if _, err := io.WriteString(c, body[half:]); err != nil {
		t.Fatalf("the rest of the body, after the delay: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("no answer to the webhook that arrived during the stop: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("the webhook that arrived during the stop: %d, want 200", resp.StatusCode)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

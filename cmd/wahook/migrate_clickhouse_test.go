package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// TestMigrateWaitsForClickHouse: wahook migrate started before its
// ClickHouse (compose starts both at once, and runs migrate once) tries
// the connection again until the server answers, then migrates. It called
// ClickHouse once, and a fresh `up` whose ClickHouse started slower than
// migrate failed for good.
func TestMigrateWaitsForClickHouse(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.StartClickHouse(t)
	ch.Kill() // the server of a fresh `up`, not started yet
	dsn := ch.DSN("wahook_late")

	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"migrate", "--nats-url", js.URL(), "--clickhouse-dsn", dsn, "--log-level", "warn"}, &out, &errOut)
	}()
	// Migrate has found ClickHouse away, and waits: no fixed sleep, so
	// that a slow machine does not start the server before migrate tried.
	waiting := func() (bool, string) {
		return strings.Contains(errOut.String(), "clickhouse not reachable, retrying"), fmt.Sprintf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	deadline := time.Now().Add(60 * time.Second)
	for ok, _ := waiting(); !ok; ok, _ = waiting() {
		select {
		case code := <-done:
			t.Fatalf("migrate ended (exit %d) before ClickHouse started, without waiting for it:\n%s\n%s", code, out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_, why := waiting()
			t.Fatalf("migrate did not report waiting for ClickHouse within 60 s: %s", why)
		}
	}
	ch.Start()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "clickhouse database wahook_late migrated") {
			t.Fatalf("migrate after ClickHouse started: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("migrate not done 90 s after ClickHouse started:\n%s\n%s", out.String(), errOut.String())
	}
	db := ch.Database(t)
	var n uint64
	if err := db.Conn.QueryRow(context.Background(), "SELECT count() FROM system.tables WHERE database = 'wahook_late' AND name = 'status_events'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("status_events in wahook_late after the migration: %d, %v", n, err)
	}
}

// TestWaitForClickHouseLogsNoPassword: while the server cannot be reached,
// each failed attempt is logged, with a growing wait, and neither the logs
// nor the error show the DSN's password. A server that accepts the
// connection and closes it at once (a port open before the server is
// ready) is tried again too.
func TestWaitForClickHouseLogsNoPassword(t *testing.T) {
	const password = "pw-never-logged-0123"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed := freeAddr(t) // nothing listens there: refused
	for _, addr := range []string{ln.Addr().String(), closed} {
		core, logs := observer.New(zapcore.DebugLevel)
		o := processOptions{dsn: "clickhouse://wahook:" + password + "@" + addr + "/wahook"}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, _, err := waitForClickHouse(ctx, &o, zap.New(core))
		cancel()
		if err == nil {
			conn.Close()
			t.Fatalf("%s: connected to a server that is not there", addr)
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s: the error shows the password: %v", addr, err)
		}
		retries := logs.FilterMessage("clickhouse not reachable, retrying").All()
		if len(retries) < 2 {
			t.Errorf("%s: %d retries logged in 2 s, want each failed attempt logged: %v (error %v)", addr, len(retries), logs.All(), err)
		}
		for _, e := range logs.All() {
			line := e.Message
			for k, v := range e.ContextMap() {
				line += fmt.Sprintf(" %s=%v", k, v)
			}
			if strings.Contains(line, password) {
				t.Errorf("%s: a log line shows the password: %s", addr, line)
			}
			if !strings.Contains(line, addr) {
				t.Errorf("%s: a log line does not name the server: %s", addr, line)
			}
		}
	}
}

// A server that answers with an error (an unknown user) is not tried
// again, and neither is a migration whose DDL fails (a cluster the server
// does not have): migrate ends at once, naming it, instead of retrying for
// its whole budget.
func TestMigrateRefusedNotRetried(t *testing.T) {
	ch := schematest.ClickHouse(t)
	core, logs := observer.New(zapcore.DebugLevel)
	o := processOptions{dsn: strings.Replace(ch.DSN, "clickhouse://", "clickhouse://no_such_user:x@", 1)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	conn, _, err := waitForClickHouse(ctx, &o, zap.New(core))
	if err == nil {
		conn.Close()
		t.Fatal("connected as an unknown user")
	}
	if !errors.As(err, new(*clickhouse.Exception)) || logs.Len() != 0 || time.Since(start) > 15*time.Second {
		t.Fatalf("unknown user: %v after %v, %d retries logged; want the server's refusal at once", err, time.Since(start), logs.Len())
	}

	js := schematest.StartJetStream(t)
	done := make(chan struct{})
	var code int
	var out, errOut syncBuffer
	go func() {
		defer close(done)
		code = run(ctx, []string{"migrate", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--clickhouse-cluster", "no_such_cluster", "--log-level", "warn"}, &out, &errOut)
	}()
	testutil.Eventually(t, 45*time.Second, "migrate to end on a DDL that fails", func() (bool, string) {
		select {
		case <-done:
			return true, ""
		default:
			return false, out.String() + errOut.String()
		}
	})
	if code == 0 || !strings.Contains(errOut.String(), "no_such_cluster") || strings.Contains(errOut.String(), "retrying") {
		t.Fatalf("migrate with a cluster the server lacks: exit %d, want a failure naming it without retries:\n%s\n%s", code, out.String(), errOut.String())
	}
}

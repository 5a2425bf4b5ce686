package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema/schematest"
)

// leaseJetStream is a JetStream on a server of the test's own, where the
// leases bucket is made.
func leaseJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
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
	return js
}

// holdMigrationsLease takes the migrations lease as another process would.
func holdMigrationsLease(ctx context.Context, t *testing.T, js jetstream.JetStream) *funnel.Lease {
	t.Helper()
	other, err := funnel.NewLease(ctx, js, migrationsLeaseKey, "another process", 30*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := other.Hold(ctx); !held || err != nil {
		t.Fatalf("the other process's hold: %v %v", held, err)
	}
	return other
}

// TestMigrationsWaitForTheLease: a process applies the ClickHouse
// migrations only while it holds the migrations lease, so it waits for
// another holder to finish, and gives the lease up when done.
func TestMigrationsWaitForTheLease(t *testing.T) {
	ch := schematest.ClickHouse(t)
	js := leaseJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := holdMigrationsLease(ctx, t, js)

	f := newFlags("process", os.Stderr)
	var o processOptions
	o.register(f, false)
	if err := f.Parse([]string{"--clickhouse-dsn", ch.DSN}); err != nil {
		t.Fatal(err)
	}
	o.migrate = true
	log := zaptest.NewLogger(t)
	done := make(chan error, 1)
	go func() {
		conn, _, err := openClickHouse(ctx, &o, migrationLock(js, 1, log), log)
		if err == nil {
			conn.Close()
		}
		done <- err
	}()
	tables := func() uint64 {
		var n uint64
		if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = 'status_events'", ch.Database).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	select {
	case err := <-done:
		t.Fatalf("migrated while another process held the lease: %v", err)
	case <-time.After(1500 * time.Millisecond): // the test: nothing happens for a while
	}
	if n := tables(); n != 0 {
		t.Fatal("status_events made while another process held the lease")
	}
	other.Release(ctx)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not migrated 30 s after the lease was given up")
	}
	if n := tables(); n != 1 {
		t.Fatal("status_events missing after the migration")
	}
	// It gave the lease up: the other process takes it at once.
	if held, err := other.Hold(ctx); !held || err != nil {
		t.Fatalf("the lease after the migration: held %v, %v", held, err)
	}
}

// TestMigrationLeaseHeldElsewhere: a wait for the lease that ends while
// another process holds it says so, and is not taken for NATS being away
// (stage 1 logged "nats not ready" through a long migration elsewhere).
func TestMigrationLeaseHeldElsewhere(t *testing.T) {
	js := leaseJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holdMigrationsLease(ctx, t, js)
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	_, _, err := natsLock(migrationLock(js, 1, zaptest.NewLogger(t)))(wctx)
	if !errors.Is(err, errMigratingElsewhere) || errors.As(err, new(natsError)) || !strings.Contains(err.Error(), "another process is migrating clickhouse") {
		t.Fatalf("wait ended with %v (NATS error: %v); want another process migrating, not NATS", err, errors.As(err, new(natsError)))
	}
}

// TestMigrationLockLost: when another process has taken the lease (the
// holder's renewals did not reach NATS for a TTL), the holder's next renewal
// ends the context Apply runs under, and its release leaves the other's
// lease alone.
func TestMigrationLockLost(t *testing.T) {
	js := leaseJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A bucket whose entries lapse 2 s after their last write: renewals
	// every 500 ms.
	other, err := funnel.NewLease(ctx, js, migrationsLeaseKey, "another process", 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	held, release, err := migrationLock(js, 1, zaptest.NewLogger(t))(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "wahook_leases")
	if err != nil {
		t.Fatal(err)
	}
	// The lease deleted, the other process takes it. A renewal of the
	// holder's that comes between the two takes the deleted key again:
	// then delete it once more.
	testutil.Eventually(t, 10*time.Second, "the other process's hold", func() (bool, string) {
		if err := kv.Delete(ctx, migrationsLeaseKey); err != nil {
			return false, err.Error()
		}
		ok, err := other.Hold(ctx)
		return ok && err == nil, fmt.Sprint(ok, err)
	})
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context still open 5 s after another process took the lease")
	}
	release()
	e, err := kv.Get(ctx, migrationsLeaseKey)
	if err != nil || string(e.Value()) != "another process" {
		t.Fatalf("the other's lease after the release: %v, %v", e, err)
	}
}

// TestMigrationLockLapsed: the holder stalled past the lease's TTL (a VM
// paused, SIGSTOP), the lease lapsed; another process may have taken it,
// migrated and released it meanwhile. The holder's next renewal found the
// key gone and took it anew, and went on migrating as if it had held it
// throughout. Now a renewal that takes the lease anew ends the context
// Apply runs under.
func TestMigrationLockLapsed(t *testing.T) {
	js := leaseJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Renewals every 500 ms.
	if _, err := funnel.NewLease(ctx, js, migrationsLeaseKey, "bucket", 2*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	held, release, err := migrationLock(js, 1, zaptest.NewLogger(t))(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	kv, err := js.KeyValue(ctx, "wahook_leases")
	if err != nil {
		t.Fatal(err)
	}
	// Lapsed, and free again: the other process has come and gone.
	if err := kv.Delete(ctx, migrationsLeaseKey); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context still open 5 s after the lease lapsed and was taken anew by its renewal")
	}
}

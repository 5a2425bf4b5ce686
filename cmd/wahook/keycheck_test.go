package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// TestShortPhoneHashKey: a database takes a phone hash key of at least 16
// bytes as its own; a shorter one (a word, a letter) let whoever holds the
// hashes guess end users' numbers from them, and was recorded all the
// same. A database whose recorded key is short already keeps working with
// it, with a warning: another key would count its statuses twice.
func TestShortPhoneHashKey(t *testing.T) {
	ctx := context.Background()
	ch := schematest.StartClickHouse(t)
	noLock := func(ctx context.Context) (context.Context, func(), error) { return ctx, func() {}, nil }
	fresh := func() *schematest.ClickHouseDB {
		db := ch.Database(t)
		if _, err := migrations.Apply(ctx, db.Conn, db.Database); err != nil {
			t.Fatal(err)
		}
		return db
	}

	db := fresh()
	err := checkHashKey(ctx, db.Conn, db.Database, []byte("changeme"), "the test's key", false, noLock, zap.NewNop())
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "is 8 bytes") || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a key of 8 bytes for a new database: %v; want a usage error naming its length and the least", err)
	}
	if err := checkHashKey(ctx, db.Conn, db.Database, []byte("a-phone-hash-key"), "the test's key", false, noLock, zap.NewNop()); err != nil {
		t.Fatalf("a key of 16 bytes: %v", err)
	}
	// Nor taken as a change of key.
	err = checkHashKey(ctx, db.Conn, db.Database, []byte("changeme"), "the test's key", true, noLock, zap.NewNop())
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "is 8 bytes") {
		t.Fatalf("a change to a key of 8 bytes: %v; want a usage error", err)
	}

	// A database that recorded a short key before this check.
	db = fresh()
	short := []byte("changeme")
	batch, err := db.Conn.PrepareBatch(ctx, "INSERT INTO "+db.Database+".settings (name, value, set_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append(keyCheckName, keyDigest(short), time.Now().UTC().Truncate(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	if err := checkHashKey(ctx, db.Conn, db.Database, short, "the test's key", false, noLock, zap.New(core)); err != nil {
		t.Fatalf("the short key the database recorded: %v; want it kept", err)
	}
	if logs.FilterMessageSnippet("shorter than 16 bytes").Len() != 1 {
		t.Errorf("no warning of the short key: %v", logs.All())
	}

	// A database from before the check (no digest) that holds statuses
	// made with a short key: it records that key, with a warning.
	db = fresh()
	batch, err = db.Conn.PrepareBatch(ctx, "INSERT INTO "+db.Database+".status_events (event_id)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("e1"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	core, logs = observer.New(zapcore.WarnLevel)
	if err := checkHashKey(ctx, db.Conn, db.Database, short, "the test's key", false, noLock, zap.New(core)); err != nil {
		t.Fatalf("the short key of a database with statuses and no digest: %v; want it recorded", err)
	}
	if logs.FilterMessageSnippet("recorded as the database's").Len() != 1 {
		t.Errorf("no warning of the short key recorded: %v", logs.All())
	}
	if err := checkHashKey(ctx, db.Conn, db.Database, []byte("a-phone-hash-key"), "the test's key", false, noLock, zap.NewNop()); !errors.Is(err, errOtherHashKey) {
		t.Errorf("another key after the short one was recorded: %v; want errOtherHashKey", err)
	}
}

// TestShortPhoneHashKeyExits: a command refused a short key ends at once
// with exit 2, naming it: the check's refusal was taken for a question to
// ask again, and replay (serve and process alike) waited for ever.
func TestShortPhoneHashKeyExits(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, []string{"replay", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--phone-hash-key", "short-key", "--since", "1h", "--log-level", "warn"}, &out, &errOut)
	if code != 2 || ctx.Err() != nil || !strings.Contains(errOut.String(), "is 9 bytes") {
		t.Fatalf("replay with a key of 9 bytes: exit %d (%v)\n%s\n%s; want 2 at once, naming its length", code, ctx.Err(), out.String(), errOut.String())
	}
}

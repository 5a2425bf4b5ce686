package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema/migrations"
)

// The hashes that stand for end users' numbers are only worth anything
// while every process makes them with one key: a status stored under a
// recipient hash of another key is another event (it counts twice), and a
// user's hashes stop matching. So the database records a digest of the key
// the first process to write used (table settings, migration 0013), and a
// process with another key refuses to start, unless told the change is
// meant (--phone-hash-key-change).

// keyCheckName is the settings row of the key's digest.
const keyCheckName = "phone_hash_key_check"

// keyDigest is a keyed digest of a fixed text under key: it tells keys
// apart and says nothing of the key.
func keyDigest(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("wahook phone hash key check v1"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// minHashKey is the shortest phone hash key a database takes as its own:
// end users' numbers are few enough (about 10^11) that whoever holds the
// hashes can try every one under every key of a few bytes, or a word.
// serve's own key is 32 random bytes, hex-encoded.
const minHashKey = 16

// errOtherHashKey is a --phone-hash-key other than the database's.
var errOtherHashKey = fmt.Errorf("%w: the phone hash key is not the one the end users' hashes in this database were made with", errUsage)

// checkHashKey compares key with the digest db records, records it when
// there is none (or when change is set, replacing the one there), and
// refuses another key. A database without the settings table (migrated by
// an earlier version, --migrate=false) is not checked.
//
// It runs under the migrations lease (lock), so that two processes that
// start at once with different keys cannot both record theirs and run; a
// replica fetches what others wrote before a digest other than key's is
// believed, and a read that misses the row just written is tried again,
// not taken for another key.
func checkHashKey(ctx context.Context, conn driver.Conn, db string, key []byte, from string, change bool, lock migrations.Lock, log *zap.Logger) error {
	held, release, err := lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	ctx = held
	want := keyDigest(key)
	read := func() (string, time.Time, bool, error) {
		var value string
		var at time.Time
		err := conn.QueryRow(ctx, "SELECT value, set_at FROM "+db+".settings FINAL WHERE name = ?", keyCheckName).Scan(&value, &at)
		if err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return "", time.Time{}, false, nil
			}
			return "", time.Time{}, false, err
		}
		return value, at, true, nil
	}
	var exists uint8
	if err := conn.QueryRow(ctx, "SELECT count() > 0 FROM system.tables WHERE database = ? AND name = 'settings'", db).Scan(&exists); err != nil {
		return fmt.Errorf("check the phone hash key: %w", err)
	}
	if exists == 0 {
		log.Warn("the database has no settings table (run wahook migrate): the phone hash key is not checked against the one its hashes were made with", zap.String("database", db))
		return nil
	}
	got, at, found, err := read()
	if err != nil {
		return fmt.Errorf("check the phone hash key: %w", err)
	}
	if !(found && got == want) {
		// A replica may not have fetched what another wrote: wait until
		// its queue for the table is empty (none when the table is not
		// replicated), and read again. Not SYSTEM
		// SYNC REPLICA: on 18.16 it blocks on the server for as long as a
		// part is only on a replica that is down, past the client's
		// deadline, and each try would leave one more such query.
		if err := replicaCaughtUp(ctx, conn, db, "settings"); err != nil {
			return fmt.Errorf("check the phone hash key: %w", err)
		}
		if got, at, found, err = read(); err != nil {
			return fmt.Errorf("check the phone hash key: %w", err)
		}
	}
	short := len(key) < minHashKey
	switch {
	case found && got == want:
		if short {
			// Refused for a new database; this one's hashes were made with
			// it already, and a new key would count them twice.
			log.Warn("the phone hash key is shorter than 16 bytes: whoever holds the database can guess end users' numbers from their hashes; move to a random key of 32 bytes with --phone-hash-key-change when a double count of the statuses stored so far is acceptable",
				zap.String("database", db), zap.Int("key_bytes", len(key)))
		}
		return nil
	case found && !change:
		return fmt.Errorf("%w (%s; the database's was recorded %s): with another key, statuses stored before count twice and users' hashes no longer match; give every instance the same key, or start one once with --phone-hash-key-change to make this one the database's, and then give it to every other",
			errOtherHashKey, from, at.UTC().Format(time.RFC3339))
	}
	if short && !found && !change {
		// A database from before the check (migration 0013) that holds
		// hashes already: they were made with this key, whatever its
		// length, and another would count them twice.
		var used uint8
		if err := conn.QueryRow(ctx, "SELECT count() > 0 FROM (SELECT 1 FROM "+db+".status_events LIMIT 1)").Scan(&used); err != nil {
			return fmt.Errorf("check the phone hash key: %w", err)
		}
		if used != 0 {
			log.Warn("the phone hash key is shorter than 16 bytes: whoever holds the database can guess end users' numbers from their hashes; it is recorded as the database's, since its statuses were stored with it; move to a random key of 32 bytes with --phone-hash-key-change when a double count of them is acceptable",
				zap.String("database", db), zap.Int("key_bytes", len(key)))
			short = false
		}
	}
	if short {
		return fmt.Errorf("%w: the phone hash key (%s) is %d bytes; the database takes one of at least %d as its own: with a shorter one, whoever holds the hashes can guess end users' numbers from them (give 32 random bytes, e.g. openssl rand -hex 32)",
			errUsage, from, len(key), minHashKey)
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".settings (name, value, set_at)")
	if err != nil {
		return fmt.Errorf("record the phone hash key: %w", err)
	}
	// A second later than the one recorded, so that it replaces it.
	now := time.Now().UTC().Truncate(time.Second)
	if found && !now.After(at) {
		now = at.Add(time.Second)
	}
	if err := batch.Append(keyCheckName, want, now); err != nil {
		return fmt.Errorf("record the phone hash key: %w", err)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("record the phone hash key: %w", err)
	}
	if found {
		log.Warn("--phone-hash-key-change: this key is now the database's; hashes made before stay as they were, and statuses stored before may count twice", zap.String("database", db))
	}
	// Read back: a read that misses the row just written (another replica)
	// is a failure to try again, not another key.
	got, _, found, err = read()
	if err != nil {
		return fmt.Errorf("check the phone hash key: %w", err)
	}
	if !found {
		return errors.New("check the phone hash key: the digest just recorded is not read back yet")
	}
	if got != want {
		return fmt.Errorf("%w (%s): another process recorded its own", errOtherHashKey, from)
	}
	return nil
}

// replicaCaughtUp waits, within ctx, until this replica of db.table has
// nothing left in its replication queue.
func replicaCaughtUp(ctx context.Context, conn driver.Conn, db, table string) error {
	for {
		var queue uint32
		if err := conn.QueryRow(ctx, "SELECT queue_size FROM system.replicas WHERE database = ? AND table = ?", db, table).Scan(&queue); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil // not a replicated table
			}
			return fmt.Errorf("replication queue of %s.%s: %w", db, table, err)
		}
		if queue == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s.%s still has %d entries to fetch from other replicas (one down?): %w", db, table, queue, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

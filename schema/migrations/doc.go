// Package migrations creates and updates wahook's ClickHouse schema.
//
// The schema is a sequence of numbered SQL files embedded from sql/
// (0001_dead_letters.sql, 0002_..., see README.md). Apply creates the database
// if it is absent, records each applied file in the table schema_migrations
// (version, name, checksum, applied time, server version) and applies the
// pending files in order.
//
// ClickHouse has no transactions, so safety comes from idempotence: every
// statement is written to be run again (CREATE TABLE IF NOT EXISTS and the
// like), Apply treats "already exists" answers as success, and two processes
// that run Apply at once both apply the same statements and both succeed. A
// file whose recorded checksum differs from the embedded one is refused with
// ErrChecksumChanged: an applied migration is never edited, a new one is added.
//
// Files are text/template templates rendered with Data: the database name and
// the Features that the server's version() allows (LowCardinality, TTL,
// DateTime64), so that one schema runs on Debian's ClickHouse 18.16 and on
// current releases.
package migrations

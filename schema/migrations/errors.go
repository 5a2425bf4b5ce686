package migrations

import (
	"errors"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

var (
	// ErrChecksumChanged means that a migration recorded as applied has since
	// been edited. Applied migrations are never changed: add a new file.
	ErrChecksumChanged = errors.New("migration changed after it was applied")
	// ErrBadName means that a file in the migrations directory is not named
	// NNNN_name.sql, or that two files share a version.
	ErrBadName = errors.New("bad migration file name")
	// ErrBadDatabase means that the database name is not a plain identifier.
	ErrBadDatabase = errors.New("bad database name")
)

// ClickHouse exception codes that mean an idempotent statement found its work
// already done, for example by a process applying the same migration at once.
const (
	codeIllegalColumn         = 44 // "Cannot add column x: column with this name already exists" (18.16 has no ADD COLUMN IF NOT EXISTS)
	codeTableAlreadyExists    = 57
	codeDatabaseAlreadyExists = 82
)

// alreadyDone reports whether err says that the object a statement creates
// exists already.
func alreadyDone(err error) bool {
	var exc *clickhouse.Exception
	if !errors.As(err, &exc) {
		return false
	}
	switch exc.Code {
	case codeTableAlreadyExists, codeDatabaseAlreadyExists:
		return true
	case codeIllegalColumn:
		return strings.Contains(exc.Message, "already exists")
	}
	return false
}

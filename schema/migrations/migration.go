package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

//go:embed sql/*.sql
var embedded embed.FS

// Files returns the embedded migration files, one NNNN_name.sql per version.
func Files() fs.FS {
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic("BUG: embedded migrations: " + err.Error())
	}
	return sub
}

// Migration is one numbered SQL file.
type Migration struct {
	Version  int    // NNNN from the file name
	Name     string // the file name without .sql, as recorded in schema_migrations
	File     string // the file name
	Checksum string // hex SHA-256 of the file as written (line ends normalized), before rendering
	Source   string // the template text

	tmpl *template.Template
}

var fileName = regexp.MustCompile(`^([0-9]{4,})_([a-z0-9_]+)\.sql$`)

// Load reads the *.sql files at the root of fsys, sorted by version. Every
// .sql file must be named NNNN_name.sql with a version of its own, and parse
// as a template.
func Load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, file := range names {
		m := fileName.FindStringSubmatch(path.Base(file))
		if m == nil {
			return nil, fmt.Errorf("%s: want NNNN_name.sql (lower case, digits, underscores): %w", file, ErrBadName)
		}
		version, err := strconv.Atoi(m[1])
		if err != nil || version <= 0 {
			return nil, fmt.Errorf("%s: version must be a positive number: %w", file, ErrBadName)
		}
		if other, dup := seen[version]; dup {
			return nil, fmt.Errorf("%s and %s share version %d: renumber one: %w", other, file, version, ErrBadName)
		}
		seen[version] = file
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("read migration: %w", err)
		}
		src := strings.ReplaceAll(string(b), "\r\n", "\n")
		tmpl, err := template.New(file).Option("missingkey=error").Parse(src)
		if err != nil {
			return nil, fmt.Errorf("parse migration %s: %w", file, err)
		}
		sum := sha256.Sum256([]byte(src))
		out = append(out, Migration{
			Version:  version,
			Name:     strings.TrimSuffix(file, ".sql"),
			File:     file,
			Checksum: hex.EncodeToString(sum[:]),
			Source:   src,
			tmpl:     tmpl,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

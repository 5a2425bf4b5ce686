// Package layering holds the rule of which of wahook's packages may import
// which (docs/architecture.md, "Layers"), and checks it over the module's
// packages; its test runs the check on every go test.
//
// Dependencies point one way: cmd/wahook wires everything; the stages
// (ingest, processor, api) and the tools (loadtest, pacer) import schema,
// never each other; schema imports nothing of wahook outside schema.
// internal/testutil is imported by test files only.
package layering

import (
	"fmt"
	"sort"
	"strings"
)

// Module is wahook's module path.
const Module = "github.com/wahook/wahook"

// Rule forbids packages under From (a path relative to the module, "" for
// none) to import packages under any of Not.
type Rule struct {
	From string
	Not  []string
	Why  string
}

// Rules are wahook's layers.
var Rules = []Rule{
	{"schema", []string{"ingest", "processor", "api", "loadtest", "pacer", "cmd", "internal"}, "schema is the contract every part shares: it depends on none of them"},
	{"ingest", []string{"processor", "api", "loadtest", "pacer", "cmd"}, "the hot path stays small: it stores bodies and never decodes them"},
	{"processor", []string{"ingest", "api", "loadtest", "pacer", "cmd"}, "the processors meet ingest only through the bus"},
	{"api", []string{"ingest", "processor", "loadtest", "pacer", "cmd"}, "the API reads ClickHouse through the contracts in schema, not through a stage"},
	{"loadtest", []string{"ingest", "processor", "api", "cmd"}, "the load tester sees the service as a black box (its paced sender uses pacer, as a sending service would)"},
	{"pacer", []string{"ingest", "processor", "api", "loadtest", "cmd", "internal"}, "sending services import pacer: it brings only schema with it"},
	{"internal", []string{"ingest", "processor", "api", "loadtest", "pacer", "cmd"}, "shared helpers depend on no part"},
}

// TestOnly are packages for tests: only test files import them (the
// check sees the imports of packages' code, never of their test files).
var TestOnly = []string{"internal/testutil"}

// under reports whether pkg (a path relative to the module) is dir or
// inside it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// Check returns a line for each import of imports (package -> the
// packages it imports, full paths) that a rule forbids, sorted.
func Check(imports map[string][]string) []string {
	var bad []string
	for pkg, deps := range imports {
		rel, ok := strings.CutPrefix(pkg, Module+"/")
		if !ok {
			continue
		}
		for _, d := range deps {
			drel, ok := strings.CutPrefix(d, Module+"/")
			if !ok {
				continue
			}
			for _, o := range TestOnly {
				if under(drel, o) && !under(rel, o) {
					bad = append(bad, fmt.Sprintf("%s imports %s: it is for test files only", rel, drel))
				}
			}
		}
		for _, r := range Rules {
			if !under(rel, r.From) {
				continue
			}
			for _, d := range deps {
				drel, ok := strings.CutPrefix(d, Module+"/")
				if !ok {
					continue
				}
				for _, n := range r.Not {
					if under(drel, n) {
						bad = append(bad, fmt.Sprintf("%s imports %s: %s", rel, drel, r.Why))
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

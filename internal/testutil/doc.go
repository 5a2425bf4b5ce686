// Package testutil holds what wahook's tests share: a polling helper, so
// that a test waits for a condition instead of sleeping for it
// (CONTRIBUTING.md, "Tests": poll for a condition, never sleep for it); a
// NATS proxy a test can cut; and the goroutines of other libraries that
// goleak lets outlive a test (Leftovers).
//
// Only test files import it (internal/layering checks that no package's
// code does), and it imports nothing of wahook, so that the test of every
// package, schema and pacer included, may use it.
//
// It does not own the servers the tests start (schema/schematest) nor any
// assertion: a test waits with it, then asserts what it asserted before.
package testutil

// Package schematest starts the real servers that wahook's tests run against,
// in the manner of net/http/httptest: an embedded nats-server with JetStream
// (StartJetStream) and a clickhouse-server process (ClickHouse). It is
// imported only by _test.go files.
//
// With CI=true a server that cannot be started fails the test instead of
// skipping it: a silent skip in CI is a test that did not run.
package schematest

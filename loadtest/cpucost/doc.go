// Package cpucost splits a CPU profile of wahook serve into the parts of the
// system (scripts/bench.sh's cost breakdown, docs/performance.md): each
// sample goes to the first part in Parts whose pattern names a frame of its
// stack, whatever the frame's depth. Parts are ordered so that a goroutine's
// owner wins over the libraries it calls: the ingest handler's publish into
// nats.go is ingest, stage 1's calls into clickhouse-go are the ClickHouse
// insert, stage 2's KV writes are stage 2's. What only the shared NATS
// connection does (nats.go's flusher and read loop, used by every part of
// serve) is a part of its own.
//
// It reads profiles only: it imports no part of wahook, so it measures any
// build, an older WAHOOK_BIN included.
package cpucost

// Package clustertest runs wahook on a 3-node NATS JetStream cluster and a
// replicated ClickHouse (deploy/local/cluster.sh: 3 nats-server, ZooKeeper,
// 2 clickhouse-server replicas, 2 ingest, 2 process, 1 api, all real
// processes on loopback) and, under Meta-shaped signed traffic from
// `wahook loadtest` over both ingest instances, kills one component at a
// time. For each fault the load test's ledger is checked against ClickHouse:
// every body answered 200 stored and counted exactly once, and stage 2's
// signal of every number still written. Its tests only; see cluster_test.go.
package clustertest

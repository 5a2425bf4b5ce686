// Package checks holds the tests of wahook's deployment files (deploy/):
// the Helm chart, the compose file, the NATS and ClickHouse configs, the
// Prometheus rules and the Grafana dashboards. They run the real tools (helm
// built at a pinned version into .cache/bin, promtool, prometheus and
// docker-compose from Debian) and the real wahook binary, built from the
// repository, against a real clickhouse-server; nothing is downloaded at test
// time (scripts/install-deploy-tools.sh installs the tools). With CI=true a
// missing tool fails the test instead of skipping it.
package checks

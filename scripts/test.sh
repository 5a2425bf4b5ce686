#!/usr/bin/env bash
# The full test suite, on a fresh Debian machine or this one: installs what the
# tests need (clickhouse-server from Debian's packages; NATS comes through the
# Go module and is started by the tests), then vets and runs every test. The
# tests start their own servers on free loopback ports; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

go version
# The ClickHouse tests start their own clickhouse-server processes from
# Debian's package; install it if this machine lacks it.
scripts/clickhouse.sh install
# The dashboard's browser tests drive Debian's chromium.
scripts/install-browser.sh
# The cluster suite (deploy/local/clustertest) also runs ZooKeeper.
scripts/install-cluster-tools.sh
gofmt_out=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$gofmt_out" ]; then
	echo "gofmt would change:"; echo "$gofmt_out"; exit 1
fi
go vet ./...
go test -race -shuffle=on -count=1 -timeout 30m ./...
# Allocation tests (built without -race only: the race detector makes
# sync.Pool drop items).
go test -count=1 -run 'Allocate' ./...
# The deployment files (deploy/): install their tools (helm, promtool,
# prometheus, docker-compose), then check them in their own Go module.
scripts/install-deploy-tools.sh
(cd deploy/tools && go vet ./... && go test -count=1 -timeout 15m ./...)

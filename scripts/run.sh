#!/usr/bin/env bash
# Runs the whole system on this machine: builds wahook and starts "wahook
# serve" with an embedded NATS JetStream under ./data, writing to a local
# ClickHouse, which it installs from Debian's packages and starts (data under
# ./data/clickhouse, port 9000) when none answers. Settings come from WAHOOK_*
# variables (see the README); for a first look it uses a demo app secret,
# verify token and query API token (API on :8081), which it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

if [ -z "${WAHOOK_APP_SECRET:-}${WAHOOK_APP_SECRET_FILE:-}" ]; then
	export WAHOOK_APP_SECRET=demo-app-secret
	echo "run.sh: WAHOOK_APP_SECRET not set; using the demo secret 'demo-app-secret'" >&2
fi
if [ -z "${WAHOOK_VERIFY_TOKEN:-}${WAHOOK_VERIFY_TOKEN_FILE:-}" ]; then
	export WAHOOK_VERIFY_TOKEN=demo-verify-token
	echo "run.sh: WAHOOK_VERIFY_TOKEN not set; using 'demo-verify-token'" >&2
fi
if [ -z "${WAHOOK_API_TOKEN:-}${WAHOOK_API_TOKEN_FILE:-}" ]; then
	export WAHOOK_API_TOKEN=demo-api-token-change-me
	echo "run.sh: WAHOOK_API_TOKEN not set; the query API on :8081 takes 'Authorization: Bearer demo-api-token-change-me'" >&2
fi
if [ -z "${WAHOOK_CLICKHOUSE_DSN:-}" ]; then
	scripts/clickhouse.sh install
	scripts/clickhouse.sh start "$PWD/data/clickhouse" 9000
	export WAHOOK_CLICKHOUSE_DSN=clickhouse://127.0.0.1:9000/wahook
fi
mkdir -p bin
go build -o bin/wahook ./cmd/wahook
# The dashboard is at / of the query API's listener (sign in with an API token).
api_listen="${WAHOOK_API_LISTEN:-:8081}"
prev=""
for arg in "$@"; do
	case "$prev" in --api-listen | -api-listen) api_listen="$arg" ;; esac
	case "$arg" in --api-listen=* | -api-listen=*) api_listen="${arg#*=}" ;; esac
	prev="$arg"
done
api_host="${api_listen%:*}"
echo "run.sh: dashboard on http://${api_host:-localhost}:${api_listen##*:}/ (sign in with the API token)" >&2
exec bin/wahook serve "$@"

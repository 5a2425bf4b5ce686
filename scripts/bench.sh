#!/usr/bin/env bash
# Loopback speed of wahook, as ratios to a bare Fiber handler measured in the
# same run (the machine is shared and noisy, so only ratios compare). Each
# round measures, one after the other:
#   bare      a Fiber handler that answers 200, closed loop
#   ingest    wahook serve --no-process (embedded JetStream), closed loop, then
#             open loop at half that rate (p50/p99 there), and its peak RSS
#   pipeline  wahook serve with stage 1 writing to a ClickHouse this script
#             starts (webhooks answered while every body is decoded and
#             written), closed loop, and its peak RSS
# Load generator, servers and ClickHouse share the machine's cores.
#
#   ROUNDS=3 DURATION=8s CONNECTIONS=64 ./scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONNECTIONS=${CONNECTIONS:-64}
SECRET=bench-secret
BARE=127.0.0.1:18181
WAHOOK=127.0.0.1:18180
CH_PORT=${CH_PORT:-19000}
out=bench-results
mkdir -p bin "$out"
go build -o bin/wahook ./cmd/wahook
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
scripts/clickhouse.sh install >/dev/null
scripts/clickhouse.sh start "$work/clickhouse" "$CH_PORT" >/dev/null
stop_ch() { scripts/clickhouse.sh stop "$work/clickhouse" >/dev/null 2>&1 || true; }
trap 'stop_ch; cleanup' EXIT

wait_http() { # url
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench: $1 did not come up" >&2; return 1
}
load() { # url [rate]
	bin/wahook loadtest --url "$1" --app-secret "$SECRET" --duration "$DURATION" --connections "$CONNECTIONS" --rate "${2:-0}" --attempts 1 --json
}
field() { python3 -c "import json,sys; print(json.load(open('$1'))['$2'])"; }

echo "round bare_rps ingest_rps ratio half_rate_p50_ms p99_ms p999_ms ingest_rss_mib pipeline_rps ratio pipeline_rss_mib non200"
for r in $(seq 1 "$ROUNDS"); do
	bin/wahook loadtest --baseline-listen "$BARE" 2>/dev/null & pids+=($!)
	bare_pid=$!
	sleep 0.3
	load "http://$BARE/webhook" > "$out/bare-$r.json"
	kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true

	rm -rf "$work/data"
	WAHOOK_APP_SECRET=$SECRET bin/wahook serve --no-process --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn 2>"$out/serve-$r.log" & pids+=($!)
	serve_pid=$!
	wait_http "http://$WAHOOK/readyz"
	load "http://$WAHOOK/webhook" > "$out/wahook-$r.json"
	rate=$(python3 -c "print(int($(field "$out/wahook-$r.json" rate_per_s)/2))")
	load "http://$WAHOOK/webhook" "$rate" > "$out/wahook-half-$r.json"
	rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
	kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

	rm -rf "$work/data"
	WAHOOK_APP_SECRET=$SECRET bin/wahook serve --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn \
		--clickhouse-dsn "clickhouse://127.0.0.1:$CH_PORT/bench_$r" 2>"$out/pipeline-$r.log" & pids+=($!)
	serve_pid=$!
	wait_http "http://$WAHOOK/readyz"
	sleep 1 # stage 1 migrates its database
	load "http://$WAHOOK/webhook" > "$out/pipeline-$r.json"
	prss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
	kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

	python3 - "$out" "$r" "$rss" "$prss" <<'PY'
import json, sys
out, r, rss, prss = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
j = lambda n: json.load(open(f"{out}/{n}-{r}.json"))
b, w, h, p = j("bare"), j("wahook"), j("wahook-half"), j("pipeline")
non200 = sum(x["sent"] - x["ok"] for x in (w, h, p))
print(f"{r} {b['rate_per_s']:.0f} {w['rate_per_s']:.0f} {w['rate_per_s']/b['rate_per_s']:.2f} {h['p50_ms']:.2f} {h['p99_ms']:.2f} {h['p999_ms']:.2f} {rss} "
      f"{p['rate_per_s']:.0f} {p['rate_per_s']/b['rate_per_s']:.2f} {prss} {non200}")
PY
done
echo "JSON reports in $out/; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3)"

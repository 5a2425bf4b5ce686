#!/usr/bin/env bash
# Loopback speed of wahook's ingest, as ratios to a bare Fiber handler measured
# in the same run (the machine is shared and noisy, so only ratios compare).
# Each round measures, one after the other: bare Fiber closed loop; wahook
# serve (embedded JetStream) closed loop; wahook open loop at half its
# closed-loop rate (p99 there is the latency figure); wahook's peak resident
# memory. Load generator and server share the machine's cores.
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
out=bench-results
mkdir -p bin "$out"
go build -o bin/wahook ./cmd/wahook
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_http() { # url
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench: $1 did not come up" >&2; return 1
}
load() { # url [rate]
	bin/wahook loadtest --url "$1" --app-secret "$SECRET" --duration "$DURATION" --connections "$CONNECTIONS" --rate "${2:-0}" --json
}
field() { python3 -c "import json,sys; print(json.load(open('$1'))['$2'])"; }

echo "round bare_rps wahook_rps ratio wahook_half_rate_p50_ms p99_ms p999_ms non200 rss_mib"
for r in $(seq 1 "$ROUNDS"); do
	bin/wahook loadtest --baseline-listen "$BARE" 2>/dev/null & pids+=($!)
	bare_pid=$!
	sleep 0.3
	load "http://$BARE/webhook" > "$out/bare-$r.json"
	kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true

	rm -rf "$work/data"
	WAHOOK_APP_SECRET=$SECRET bin/wahook serve --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn 2>"$out/serve-$r.log" & pids+=($!)
	serve_pid=$!
	wait_http "http://$WAHOOK/readyz"
	load "http://$WAHOOK/webhook" > "$out/wahook-$r.json"
	rate=$(python3 -c "print(int($(field "$out/wahook-$r.json" rate_per_s)/2))")
	load "http://$WAHOOK/webhook" "$rate" > "$out/wahook-half-$r.json"
	rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
	kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

	python3 - "$out" "$r" "$rss" <<'PY'
import json, sys
out, r, rss = sys.argv[1], sys.argv[2], sys.argv[3]
b = json.load(open(f"{out}/bare-{r}.json")); w = json.load(open(f"{out}/wahook-{r}.json")); h = json.load(open(f"{out}/wahook-half-{r}.json"))
non200 = w["sent"] - w["ok"] + h["sent"] - h["ok"]
print(f"{r} {b['rate_per_s']:.0f} {w['rate_per_s']:.0f} {w['rate_per_s']/b['rate_per_s']:.2f} {h['p50_ms']:.2f} {h['p99_ms']:.2f} {h['p999_ms']:.2f} {non200} {rss}")
PY
done
echo "JSON reports in $out/; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3)"

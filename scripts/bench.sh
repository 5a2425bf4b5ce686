#!/usr/bin/env bash
# Loopback speed of wahook, as ratios to a bare Fiber handler measured in the
# same run (the machine is shared and noisy, so only ratios compare). Each
# round measures, one after the other:
#   bare      a Fiber handler that answers 200, closed loop
#   ingest    wahook serve --no-process (embedded JetStream), closed loop, then
#             open loop at half that rate (p50/p99 there), and its peak RSS;
#             once for each publisher in PUBLISHERS (empty: the default). The
#             load generator's bodies depend only on their index, so the
#             half-rate run sends 901-byte bodies: the stream holds the
#             900-byte ones already, and duplicates skip the store.
#   pipeline  wahook serve with stage 1 writing to a ClickHouse this script
#             starts (webhooks answered while every body is decoded and
#             written), closed loop, and its peak RSS (PIPELINE=0 skips it)
# Load generator, servers and ClickHouse share the machine's cores. The
# others_cores column is the CPU that processes other than wahook and the load
# generator used during the ingest closed loop, in cores: well above 0, it
# says another workload skewed that round.
#
#   ROUNDS=3 DURATION=8s CONNECTIONS=64 ./scripts/bench.sh
#   PUBLISHERS="batch async" PIPELINE=0 ./scripts/bench.sh
#   SERVE_ENV="GOGC=200 GOMAXPROCS=1" ./scripts/bench.sh   # environment of wahook serve only
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONNECTIONS=${CONNECTIONS:-64}
PUBLISHERS=${PUBLISHERS:-}
PIPELINE=${PIPELINE:-1}
SERVE_ENV=${SERVE_ENV:-}
SECRET=bench-secret
BARE=127.0.0.1:18181
WAHOOK=127.0.0.1:18180
CH_PORT=${CH_PORT:-19000}
HZ=$(getconf CLK_TCK)
out=bench-results
mkdir -p bin "$out"
go build -o bin/wahook ./cmd/wahook
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
if [ "$PIPELINE" = 1 ]; then
	scripts/clickhouse.sh install >/dev/null
	scripts/clickhouse.sh start "$work/clickhouse" "$CH_PORT" >/dev/null
	stop_ch() { scripts/clickhouse.sh stop "$work/clickhouse" >/dev/null 2>&1 || true; }
	trap 'stop_ch; cleanup' EXIT
fi

wait_http() { # url
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench: $1 did not come up" >&2; return 1
}
load() { # url [rate [body bytes]]
	bin/wahook loadtest --url "$1" --app-secret "$SECRET" --duration "$DURATION" --connections "$CONNECTIONS" --rate "${2:-0}" \
		--body-bytes "${3:-900}" --attempts 1 --json
}
field() { python3 -c "import json,sys; print(json.load(open('$1'))['$2'])"; }
busy_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9}' /proc/stat; }
proc_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

echo "round bare_rps ingest_rps ratio half_rate_p50_ms p99_ms p999_ms ingest_rss_mib pipeline_rps ratio pipeline_rss_mib non200 publisher others_cores"
for r in $(seq 1 "$ROUNDS"); do
	bin/wahook loadtest --baseline-listen "$BARE" 2>/dev/null & pids+=($!)
	bare_pid=$!
	sleep 0.3
	load "http://$BARE/webhook" > "$out/bare-$r.json"
	kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true

	for pub in ${PUBLISHERS:-default}; do
		pubflag=()
		[ "$pub" != default ] && pubflag=(--publisher "$pub")
		rm -rf "$work/data"
		env $SERVE_ENV WAHOOK_APP_SECRET=$SECRET bin/wahook serve --no-process --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn "${pubflag[@]}" 2>"$out/serve-$r-$pub.log" & pids+=($!)
		serve_pid=$!
		wait_http "http://$WAHOOK/readyz"
		t0=$(busy_ticks); s0=$(proc_ticks "$serve_pid")
		TIMEFORMAT='%U %S'
		{ time load "http://$WAHOOK/webhook" > "$out/wahook-$r-$pub.json"; } 2> "$work/loadcpu"
		t1=$(busy_ticks); s1=$(proc_ticks "$serve_pid")
		rate=$(python3 -c "print(int($(field "$out/wahook-$r-$pub.json" rate_per_s)/2))")
		load "http://$WAHOOK/webhook" "$rate" 901 > "$out/wahook-half-$r-$pub.json"
		rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
		kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
		echo "$rss $(((t1 - t0) - (s1 - s0))) $(cat "$work/loadcpu")" > "$out/ingest-$r-$pub.txt"
	done

	prss=-
	if [ "$PIPELINE" = 1 ]; then
		rm -rf "$work/data"
		env $SERVE_ENV WAHOOK_APP_SECRET=$SECRET bin/wahook serve --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn \
			--clickhouse-dsn "clickhouse://127.0.0.1:$CH_PORT/bench_$r" 2>"$out/pipeline-$r.log" & pids+=($!)
		serve_pid=$!
		wait_http "http://$WAHOOK/readyz"
		sleep 1 # stage 1 migrates its database
		load "http://$WAHOOK/webhook" > "$out/pipeline-$r.json"
		prss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
		kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
	fi

	for pub in ${PUBLISHERS:-default}; do
		python3 - "$out" "$r" "$pub" "$prss" "$HZ" <<'PY'
import json, os, sys
out, r, pub, prss, hz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
j = lambda n: json.load(open(f"{out}/{n}.json"))
b, w, h = j(f"bare-{r}"), j(f"wahook-{r}-{pub}"), j(f"wahook-half-{r}-{pub}")
p = j(f"pipeline-{r}") if os.path.exists(f"{out}/pipeline-{r}.json") and prss != "-" else None
rss, not_serve, lu, ls = open(f"{out}/ingest-{r}-{pub}.txt").read().split()
# Busy CPU beside wahook serve, less the load generator's: other workloads.
others = max(int(not_serve) / hz - float(lu) - float(ls), 0) / w["duration_s"]
non200 = sum(x["sent"] - x["ok"] for x in (w, h) + ((p,) if p else ()))
pipe = f"{p['rate_per_s']:.0f} {p['rate_per_s'] / b['rate_per_s']:.2f} {prss}" if p else "- - -"
print(f"{r} {b['rate_per_s']:.0f} {w['rate_per_s']:.0f} {w['rate_per_s'] / b['rate_per_s']:.2f} "
      f"{h['p50_ms']:.2f} {h['p99_ms']:.2f} {h['p999_ms']:.2f} {rss} {pipe} {non200} {pub} {others:.2f}")
PY
	done
done
echo "JSON reports in $out/; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3)"

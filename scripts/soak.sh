#!/usr/bin/env bash
# A sustained run of the whole system (wahook serve with stage 1, EVENTS,
# stage 2, the funnel resolver and a ClickHouse this script starts, all on
# this machine's cores): does it keep up at a given rate for minutes?
#
#   1. unless RATE is set, a closed loop of SAT_FOR (8 s) on a first
#      database measures the saturation rate, and RATE is FRACTION (0.5) of
#      it;
#   2. on a fresh serve and database, an open loop at RATE for DURATION
#      (300 s), a new signed ~900-byte status body every request;
#   3. every 5 s: stage 1's backlog on WAHOOK_RAW
#      (wahook_processor_raw_pending), serve's and ClickHouse's RSS and the
#      funnel resolver's lag (wahook_funnel_lag_seconds), to
#      soak-timeline.txt ("seconds backlog serve_MiB clickhouse_MiB
#      funnel_lag_s");
#   4. once stage 1's backlog is drained, ClickHouse must hold one status per
#      body answered 200 (each body is a new message's status).
#
# It prints the rate, the load's p50/p99, the backlog's median and largest
# over the run's second half and at the end (a stable backlog stays near
# what one batch holds; a growing one is stage 1 falling behind), the peak
# RSS of serve and of ClickHouse (VmHWM), their CPU-µs per webhook (from
# /proc, over the load and the drain), and the count; it fails when the
# backlog does not drain or the count differs. Results go
# to bench-results/soak-*.
#
#   ./scripts/soak.sh                         # half the saturation rate, 5 minutes
#   RATE=4000 DURATION=600s ./scripts/soak.sh
#   SERVE_ARGS="--memory-limit 900MiB" ./scripts/soak.sh  # flags of wahook serve
#   WAHOOK_BIN=/tmp/wahook ./scripts/soak.sh  # that binary, built elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

RATE=${RATE:-}
FRACTION=${FRACTION:-0.5}
SAT_FOR=${SAT_FOR:-8s}
DURATION=${DURATION:-300s}
CONNECTIONS=${CONNECTIONS:-64}
CH_PORT=${CH_PORT:-19000}
SERVE_ARGS=${SERVE_ARGS:-}
WAHOOK=127.0.0.1:18190
METRICS=127.0.0.1:18191
SECRET=soak-secret
out=bench-results
mkdir -p "$out"
# shellcheck source=scripts/benchlib.sh
source scripts/benchlib.sh
wahook_bin
work=$(mktemp -d)
pids=()
scripts/clickhouse.sh install >/dev/null
scripts/clickhouse.sh start "$work/clickhouse" "$CH_PORT" >/dev/null
cleanup() {
	for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done
	scripts/clickhouse.sh stop "$work/clickhouse" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
ch_pid=$(cat "$work/clickhouse/clickhouse-server.pid")

field() { python3 -c "import json,sys; print(json.load(open('$1'))$2)"; }
# serve db: wahook serve on database db, in the background ($serve_pid).
# shellcheck disable=SC2086 # SERVE_ARGS splits on spaces
serve() {
	WAHOOK_APP_SECRET=$SECRET "$WAHOOK_BIN" serve --listen "$WAHOOK" --metrics-listen "$METRICS" --nats-listen "" \
		--data-dir "$work/data-$1" --log-level warn --clickhouse-dsn "clickhouse://127.0.0.1:$CH_PORT/$1" \
		$SERVE_ARGS 2>"$out/soak-serve-$1.log" &
	serve_pid=$!
	pids+=("$serve_pid")
	wait_http "http://$WAHOOK/readyz"
	sleep 1 # stage 1 migrates its database
}
stop_serve() {
	kill "$serve_pid" 2>/dev/null || true
	wait "$serve_pid" 2>/dev/null || true
}
# gauge name: the value of a metric of serve's, nan when it has none.
gauge() {
	curl -fsS "http://$METRICS/metrics" 2>/dev/null | awk -v m="$1" '$1 == m {print $2; found=1} END {if (!found) print "nan"}'
}
backlog() { gauge wahook_processor_raw_pending; }
rss() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo nan; }
hwm() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo nan; }

if [ -z "$RATE" ]; then
	serve soak_sat
	"$WAHOOK_BIN" loadtest --url "http://$WAHOOK/webhook" --app-secret "$SECRET" --duration "$SAT_FOR" \
		--connections "$CONNECTIONS" --body-bytes 901 --attempts 1 --json >"$out/soak-saturation.json"
	stop_serve
	sat=$(python3 -c "import json; d = json.load(open('$out/soak-saturation.json')); print(d.get('ok_per_s', d['rate_per_s']))")
	RATE=$(python3 -c "print(round($sat * $FRACTION))")
	echo "saturation ${sat} req/s over $SAT_FOR; soak at $RATE req/s ($FRACTION of it)"
fi

serve soak
: >"$out/soak-timeline.txt"
(
	start=$SECONDS
	while kill -0 "$serve_pid" 2>/dev/null; do
		echo "$((SECONDS - start)) $(backlog) $(rss "$serve_pid") $(rss "$ch_pid") $(gauge wahook_funnel_lag_seconds)" >>"$out/soak-timeline.txt"
		sleep 5
	done
) &
pids+=($!)
s0=$(proc_ticks "$serve_pid")
c0=$(proc_ticks "$ch_pid")
"$WAHOOK_BIN" loadtest --url "http://$WAHOOK/webhook" --app-secret "$SECRET" --duration "$DURATION" \
	--connections "$CONNECTIONS" --rate "$RATE" --body-bytes 900 --attempts 1 --json >"$out/soak.json"
# Stage 1 drains what is left; then ClickHouse must hold one status per
# body answered 200 (each body is a new message's status).
drained=
for _ in $(seq 1 120); do
	if [ "$(backlog)" = 0 ]; then drained=1; break; fi
	sleep 1
done
cpu="$(($(proc_ticks "$serve_pid") - s0)) $(($(proc_ticks "$ch_pid") - c0)) $(getconf CLK_TCK)"
serve_hwm=$(hwm "$serve_pid")
ch_hwm=$(hwm "$ch_pid")
stored=$(clickhouse-client --port "$CH_PORT" -q "SELECT uniqExact(message_id) FROM soak.status_events")
stop_serve

python3 - "$out/soak.json" "$out/soak-timeline.txt" "$RATE" "$serve_hwm" "$ch_hwm" "${drained:-0}" "$stored" "$cpu" <<'EOF'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
rows = [l.split() for l in open(sys.argv[2]) if l.strip()]
lags = [(int(l[0]), float(l[4])) for l in rows if len(l) > 4 and l[4] != "nan"]
rows = [(int(t), float(b), float(s), float(c)) for t, b, s, c, *_ in rows if b != "nan" and s != "nan"]
load_end = max(t for t, *_ in rows) if rows else 0
half = [b for t, b, *_ in rows if t >= load_end / 2]
non200 = sum(n for code, n in (r.get('statuses') or {}).items() if code != '200') + r.get('errors', 0)
print(f"rate {sys.argv[3]} req/s for {r.get('duration_s', 0):.0f} s: {r.get('rate_per_s', 0):.0f} req/s sent, "
      f"p50 {r.get('p50_ms', 0):.1f} ms, p99 {r.get('p99_ms', 0):.1f} ms, not answered 200: {non200}")
if half:
    print(f"stage 1 backlog (RAW pending) over the second half: median {statistics.median(half):.0f}, "
          f"largest {max(half):.0f}; at the end of the load {rows[-1][1]:.0f}")
print(f"peak RSS: serve {sys.argv[4]} MiB, clickhouse {sys.argv[5]} MiB")
if lags:
    half_lags = [g for t, g in lags if t >= load_end / 2] or [g for _, g in lags]
    print(f"funnel lag (wahook_funnel_lag_seconds) over the second half: largest {max(half_lags):.0f} s; "
          f"at the end of the load {lags[-1][1]:.0f} s")
st, ct, hz = (int(x) for x in sys.argv[8].split())
ok200 = max((r.get('statuses') or {}).get('200', 0), 1)
print(f"CPU-µs per webhook over the load and the drain: serve {st / hz * 1e6 / ok200:.0f}, "
      f"clickhouse {ct / hz * 1e6 / ok200:.0f}, whole system {(st + ct) / hz * 1e6 / ok200:.0f}")
ok = (r.get('statuses') or {}).get('200', 0)
print(f"stage 1's backlog {'drained' if sys.argv[6] == '1' else 'NOT drained within 120 s'}; "
      f"ClickHouse holds {sys.argv[7]} messages' statuses of {ok} bodies answered 200")
if sys.argv[6] != '1' or int(sys.argv[7]) != ok:
    sys.exit(1)
EOF

#!/usr/bin/env bash
# Loopback speed of wahook, as ratios to a bare Fiber handler measured in the
# same run (the machine is shared and noisy, so only ratios compare). Each
# round measures, one after the other:
#   bare      a Fiber handler that answers 200, closed loop
#   ingest    wahook serve --no-process (embedded JetStream), closed loop, then
#             open loop at half that rate (p50/p99 there, latency counted from
#             each request's intended send time), and its peak RSS over both;
#             once for each variant: VARIANTS, "name:[ENV=VALUE ...] [flags]"
#             separated by ';', or else one per publisher in PUBLISHERS, or
#             else the defaults. The load generator's bodies depend only on
#             their index and the second they are sent in (the status's
#             timestamp, as Meta stamps it), so the half-rate run sends
#             901-byte bodies: the stream and the endpoint's duplicate index
#             may hold 900-byte ones of the same second already, and
#             duplicates skip the store. The dups column counts
#             the bodies wahook answered as duplicates: 0 in a sound round.
#             sat_rss_mib is the peak RSS by the end of the closed loop, and
#             index_ids / index_mib what the duplicate index held then;
#             rss-<round>-<variant>.txt has the RSS every 5 s (seconds since
#             start, MiB). srv_p99_ms and srv_over_10ms_pct are the half-rate
#             run seen from inside wahook (wahook_ingest_request_duration_seconds,
#             from reading the request to its answer; p99 interpolated within
#             its bucket), and gen_lag_p99_ms the p99 of the time bodies
#             spent in the load generator before it sent them (its next
#             tick, a free connection, a core), for comparison with p99_ms
#             (percentiles do not add up).
#   pipeline  wahook serve with stage 1 writing to a ClickHouse this script
#             starts (webhooks answered while every body is decoded and
#             written), closed loop, and its peak RSS (PIPELINE=0 skips it)
#   breakdown (unless BREAKDOWN=0 or PIPELINE=0) CPU-µs per webhook answered
#             200, by part of the whole system: during the pipeline's closed
#             loop and the BREAKDOWN_TAIL (10 s) after it, then on a fresh
#             serve and database at half the pipeline's rate, open loop, and
#             the same with --publish-events=false (no EVENTS, so no stage 2
#             work nor KV writes): nats-server's CPU with EVENTS on less with
#             them off is the EVENTS stream's and the KV's share, the rest
#             RAW's. wahook's parts come from a CPU profile over the load and
#             the tail (--pprof-listen; each sample goes to the part that owns
#             its stack, loadtest/cpucost), ClickHouse's from its
#             /proc/<pid>/stat split by system.query_log's
#             UserTimeMicroseconds + SystemTimeMicroseconds (serve's DSN
#             turns log_queries on): stage 1's inserts with their
#             materialized views, the funnel resolver's inserts and its
#             reads; what is left is merges and other background work. The
#             table is printed after the rounds (median and range over them)
#             and written to breakdown.txt, each round's figures to
#             breakdown-<round>.json. The pipeline's closed loop runs with
#             the profile and the query log on (BREAKDOWN=0: without).
#   CPU       during bare Fiber's closed loop and the pipeline's (the last
#             seven columns), per request answered 200: the load generator's
#             CPU-µs (bare_gen_us, pipe_gen_us; bash's time of the loadtest
#             process), the bare handler's process's (bare_srv_us), wahook
#             serve's with its embedded NATS server (pipe_serve_us) and
#             ClickHouse's (pipe_ch_us), from /proc/<pid>/stat, and the
#             machine's idle share from /proc/stat (bare_idle_pct,
#             pipe_idle_pct); each loop's raw figures in <loop>-<round>.acct
#             (generator user and system seconds, machine busy and total
#             ticks, each process's ticks). With the cores busy in both
#             loops, the pipeline's ratio to bare Fiber is about
#             (generator + handler) / (generator + serve + ClickHouse) per
#             request, times (1 - pipe_idle) / (1 - bare_idle): the
#             generator's own cost is in both.
# After the rounds: the median and range over them of the rates, the ratios
# and these CPU figures.
# Load generator, servers and ClickHouse share the machine's cores. The
# others_cores columns are the CPU that processes other than wahook and the
# load generator used during the ingest closed loop and during the half-rate
# run, in cores: well above 0, another workload skewed that round (the p99
# at half rate is the figure most sensitive to it).
#
# The memory the RAW stream's duplicate window holds grows for about three
# windows of sustained traffic before it levels off (nats-server compacts its
# list of ids only at three times the live ones), and the endpoint's
# duplicate index takes a new table every --dedupe-window/4 for 5 of them
# (the last from 4 quarters on), so a round shows the sustained peak RSS
# only with a DURATION of --dedupe-window and a few seconds or more (130s
# with the defaults), and of three --raw-duplicate-window.
#
#   ROUNDS=3 DURATION=8s CONNECTIONS=64 ./scripts/bench.sh
#   ROUNDS=3 DURATION=130s PUBLISHERS=batch PIPELINE=0 ./scripts/bench.sh   # RSS with a full index
#   PUBLISHERS="batch async" PIPELINE=0 ./scripts/bench.sh
#   VARIANTS="2m:--raw-duplicate-window 2m;5s:--raw-duplicate-window 5s" PIPELINE=0 ./scripts/bench.sh
#   VARIANTS="gc100:;gc200:GOGC=200" PIPELINE=0 ./scripts/bench.sh
#   SERVE_ENV="GOGC=200 GOMAXPROCS=1" ./scripts/bench.sh   # environment of wahook serve only
#   SERVE_ARGS="--batch-linger 100us" ./scripts/bench.sh    # flags of every wahook serve
#   WAHOOK_BIN=/tmp/wahook ./scripts/bench.sh                # measure that binary, built elsewhere
#   BREAKDOWN=0 ./scripts/bench.sh                          # the pipeline's figures without the cost breakdown
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONNECTIONS=${CONNECTIONS:-64}
PUBLISHERS=${PUBLISHERS:-}
VARIANTS=${VARIANTS:-}
PIPELINE=${PIPELINE:-1}
SERVE_ENV=${SERVE_ENV:-}
SERVE_ARGS=${SERVE_ARGS:-}
BREAKDOWN=${BREAKDOWN:-1}
BREAKDOWN_TAIL=${BREAKDOWN_TAIL:-10}
PPROF=127.0.0.1:18182
SECRET=bench-secret
BARE=127.0.0.1:18181
WAHOOK=127.0.0.1:18180
CH_PORT=${CH_PORT:-19000}
HZ=$(getconf CLK_TCK)
out=bench-results
mkdir -p "$out"
# shellcheck source=scripts/benchlib.sh
source scripts/benchlib.sh
wahook_bin
if [ "$PIPELINE" != 1 ]; then BREAKDOWN=0; fi
# The help is read whole before it is searched: grep -q leaving early would
# end wahook with SIGPIPE, and pipefail would take that for "no flag".
if [ "$BREAKDOWN" = 1 ] && ! grep -q -- --pprof-listen <<<"$("$WAHOOK_BIN" serve -h 2>&1 || true)"; then
	echo "bench: $WAHOOK_BIN has no --pprof-listen: no cost breakdown" >&2
	BREAKDOWN=0
fi
if [ "$BREAKDOWN" = 1 ]; then go build -o bin/cpucost ./loadtest/cpucost/cmd/cpucost; fi
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

# The variants: "name:[ENV=VALUE ...] [flags]", separated by ';'.
if [ -z "$VARIANTS" ]; then
	for pub in ${PUBLISHERS:-default}; do
		if [ "$pub" = default ]; then VARIANTS+="default:;"; else VARIANTS+="$pub:--publisher $pub;"; fi
	done
fi
IFS=';' read -r -a variants <<< "$VARIANTS"

load() { # url [rate [body bytes]]
	"$WAHOOK_BIN" loadtest --url "$1" --app-secret "$SECRET" --duration "$DURATION" --connections "$CONNECTIONS" --rate "${2:-0}" \
		--body-bytes "${3:-900}" --attempts 1 --json
}
# okrate file: the 200s a second of a loadtest report (every answer, from a
# binary older than ok_per_s).
okrate() { python3 -c "import json; d = json.load(open('$1')); print(d.get('ok_per_s', d['rate_per_s']))"; }
# pipeline_serve db [flags]: wahook serve with stage 1 writing to database
# db, in the background ($serve_pid); with the profiling endpoint and
# query logging for the breakdown.
pipeline_serve() {
	local db=$1 dsn="clickhouse://127.0.0.1:$CH_PORT/$1" extra=()
	shift
	if [ "$BREAKDOWN" = 1 ]; then dsn+="?log_queries=1"; extra=(--pprof-listen "$PPROF"); fi
	# shellcheck disable=SC2086 # the flags split on spaces
	env $SERVE_ENV WAHOOK_APP_SECRET=$SECRET "$WAHOOK_BIN" serve --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn \
		--clickhouse-dsn "$dsn" "${extra[@]}" "$@" $SERVE_ARGS 2>"$out/pipeline-$db.log" & pids+=($!)
	serve_pid=$!
	wait_http "http://$WAHOOK/readyz"
	sleep 1 # stage 1 migrates its database
}
# costed_load tag db url [rate [body bytes]]: load, with a CPU profile of
# serve ($serve_pid) over the load and BREAKDOWN_TAIL seconds after it, and
# the CPU of serve and ClickHouse over the same time, ClickHouse's split by
# query_log: $out/cost-<tag>.*.
costed_load() {
	local tag=$1 db=$2 secs; shift 2
	secs=$(python3 -c "import re; print(sum(float(n) * {'ms': .001, 's': 1, 'm': 60, 'h': 3600}[u] for n, u in re.findall(r'([0-9.]+)(ms|s|m|h)', '$DURATION')))")
	secs=$(python3 -c "import math; print(math.ceil($secs) + $BREAKDOWN_TAIL)")
	local ch_pid t0 s0 c0 prof
	ch_pid=$(cat "$work/clickhouse/clickhouse-server.pid")
	t0=$(date +%s); s0=$(proc_ticks "$serve_pid"); c0=$(proc_ticks "$ch_pid")
	curl -fsS -o "$out/cost-$tag.pprof" "http://$PPROF/debug/pprof/profile?seconds=$secs" & prof=$!
	accounted "$out/cost-$tag.acct" "$serve_pid" "$ch_pid" -- load "$@" > "$out/cost-$tag.json"
	wait "$prof"
	echo "$(($(proc_ticks "$serve_pid") - s0)) $(($(proc_ticks "$ch_pid") - c0)) $HZ" > "$out/cost-$tag.ticks"
	bin/cpucost "$out/cost-$tag.pprof" > "$out/cost-$tag.parts.json"
	clickhouse-client --port "$CH_PORT" -q "SYSTEM FLUSH LOGS"
	# Each finished query of this database since t0, as a kind and its CPU-µs.
	clickhouse-client --port "$CH_PORT" -q "
		SELECT multiIf(query LIKE 'INSERT INTO $db.funnel%', 'funnel_insert', query LIKE 'INSERT%', 'insert', 'query') AS kind,
			sum(ProfileEvents.Values[indexOf(ProfileEvents.Names, 'UserTimeMicroseconds')]
				+ ProfileEvents.Values[indexOf(ProfileEvents.Names, 'SystemTimeMicroseconds')]) AS cpu_us, count() AS n
		FROM system.query_log
		WHERE type IN (2, 4) AND event_time >= toDateTime($t0) AND position(query, '$db.') > 0
		GROUP BY kind FORMAT TSV" > "$out/cost-$tag.ch.tsv"
}
# rss_timeline pid: its RSS every 5 s, "seconds MiB", until it ends.
rss_timeline() {
	local start=$SECONDS
	while [ -e "/proc/$1/status" ]; do
		awk -v t=$((SECONDS - start)) '/VmRSS/ {printf "%d %.0f\n", t, $2/1024}' "/proc/$1/status" 2>/dev/null || true
		sleep 5
	done
}
# accounted file pid... -- command: the command (a load), and the CPU used
# while it ran, to file, on one line: the load generator's user and system
# seconds (bash's time: the rusage of the command's processes), the
# machine's busy and total clock ticks, and each pid's ticks. The command's
# own error output still goes to the terminal; time's goes to file.time.
accounted() {
	local file=$1 line m0 m1 p i t0=() apids=()
	shift
	while [ "$1" != -- ]; do apids+=("$1"); shift; done
	shift
	m0=$(machine_ticks)
	for p in "${apids[@]}"; do t0+=("$(proc_ticks "$p")"); done
	TIMEFORMAT='%U %S'
	{ time "$@" 2>&3 3>&-; } 3>&2 2> "$file.time"
	m1=$(machine_ticks)
	line="$(tail -n 1 "$file.time") $(awk -v a="$m0" -v b="$m1" 'BEGIN {split(a, x); split(b, y); printf "%.0f %.0f\n", y[1] - x[1], y[2] - x[2]}')"
	for i in "${!apids[@]}"; do line+=" $(($(proc_ticks "${apids[i]}") - t0[i]))"; done
	echo "$line" > "$file"
}
# machine_ticks: the machine's busy and total clock ticks so far (busy: user,
# nice, system, irq, softirq, steal; the rest idle and iowait).
machine_ticks() { awk '/^cpu / {busy = $2+$3+$4+$7+$8+$9; printf "%.0f %.0f\n", busy, busy + $5 + $6}' /proc/stat; }

if [ -n "$SERVE_ARGS" ]; then echo "serve flags: $SERVE_ARGS"; fi
echo "round bare_rps ingest_rps ratio half_rate_p50_ms p99_ms p999_ms ingest_rss_mib pipeline_rps ratio pipeline_rss_mib non200 variant others_cores others_half dups sat_rss_mib index_ids index_mib srv_p99_ms srv_over_10ms_pct gen_lag_p99_ms bare_gen_us bare_srv_us bare_idle_pct pipe_gen_us pipe_serve_us pipe_ch_us pipe_idle_pct"
for r in $(seq 1 "$ROUNDS"); do
	"$WAHOOK_BIN" loadtest --baseline-listen "$BARE" 2>/dev/null & pids+=($!)
	bare_pid=$!
	sleep 0.3
	accounted "$out/bare-$r.acct" "$bare_pid" -- load "http://$BARE/webhook" > "$out/bare-$r.json"
	kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true

	for v in "${variants[@]}"; do
		name=${v%%:*}
		venv=() vflags=()
		# shellcheck disable=SC2086 # the words split on spaces
		for word in ${v#*:} $SERVE_ARGS; do
			if [[ $word =~ ^[A-Z_][A-Z0-9_]*= ]]; then venv+=("$word"); else vflags+=("$word"); fi
		done
		rm -rf "$work/data"
		env $SERVE_ENV "${venv[@]}" WAHOOK_APP_SECRET=$SECRET "$WAHOOK_BIN" serve --no-process --listen "$WAHOOK" --nats-listen "" --data-dir "$work/data" --log-level warn "${vflags[@]}" 2>"$out/serve-$r-$name.log" & pids+=($!)
		serve_pid=$!
		rss_timeline "$serve_pid" > "$out/rss-$r-$name.txt" &
		wait_http "http://$WAHOOK/readyz"
		accounted "$out/wahook-$r-$name.acct" "$serve_pid" -- load "http://$WAHOOK/webhook" > "$out/wahook-$r-$name.json"
		sat_rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
		curl -fsS "http://$WAHOOK/metrics" > "$out/metrics-half-$r-$name.before"
		index=$(awk '/^wahook_ingest_dedupe_entries / {n = $2} /^wahook_ingest_dedupe_bytes / {b = $2}
			END {printf "%d %.0f", n, b / 1048576}' "$out/metrics-half-$r-$name.before")
		rate=$(python3 -c "print(int($(okrate "$out/wahook-$r-$name.json")/2))")
		accounted "$out/wahook-half-$r-$name.acct" "$serve_pid" -- load "http://$WAHOOK/webhook" "$rate" 901 > "$out/wahook-half-$r-$name.json"
		curl -fsS "http://$WAHOOK/metrics" > "$out/metrics-half-$r-$name.after"
		dups=$(awk '/^wahook_ingest_requests_total\{.*result="duplicate"/ {n += $2} END {print n + 0}' "$out/metrics-half-$r-$name.after")
		rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
		kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
		echo "$rss $dups $sat_rss $index" > "$out/ingest-$r-$name.txt"
	done

	prss=-
	if [ "$PIPELINE" = 1 ]; then
		rm -rf "$work/data"
		pipeline_serve "bench_$r"
		if [ "$BREAKDOWN" = 1 ]; then
			costed_load "sat-$r" "bench_$r" "http://$WAHOOK/webhook"
			cp "$out/cost-sat-$r.json" "$out/pipeline-$r.json"
			cp "$out/cost-sat-$r.acct" "$out/pipeline-$r.acct"
			cp "$out/cost-sat-$r.acct.time" "$out/pipeline-$r.acct.time"
		else
			accounted "$out/pipeline-$r.acct" "$serve_pid" "$(cat "$work/clickhouse/clickhouse-server.pid")" -- \
				load "http://$WAHOOK/webhook" > "$out/pipeline-$r.json"
		fi
		prss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$serve_pid/status")
		kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
	fi
	if [ "$BREAKDOWN" = 1 ]; then
		half=$(python3 -c "print(int($(okrate "$out/pipeline-$r.json")/2))")
		for run in half noevents; do
			rm -rf "$work/data"
			if [ $run = half ]; then pipeline_serve "bench_${r}_$run"; else pipeline_serve "bench_${r}_$run" --publish-events=false; fi
			costed_load "$run-$r" "bench_${r}_$run" "http://$WAHOOK/webhook" "$half"
			kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
		done
	fi

	for v in "${variants[@]}"; do
		python3 - "$out" "$r" "${v%%:*}" "$prss" "$HZ" <<'PY'
import json, os, sys
out, r, name, prss, hz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def j(n):
    d = json.load(open(f"{out}/{n}.json"))
    if "rate_per_s" in d:  # a loadtest report
        d.setdefault("ok_per_s", d["rate_per_s"])  # from a binary older than ok_per_s: every answer
    return d
b, w, h = j(f"bare-{r}"), j(f"wahook-{r}-{name}"), j(f"wahook-half-{r}-{name}")
p = j(f"pipeline-{r}") if os.path.exists(f"{out}/pipeline-{r}.json") and prss != "-" else None
rss, dups, sat_rss, index_ids, index_mib = open(f"{out}/ingest-{r}-{name}.txt").read().split()
def others(run, res):
    # Busy CPU beside wahook serve, less the load generator's: other workloads.
    lu, ls, busy, _, serve = open(f"{out}/{run}.acct").read().split()
    return max((int(busy) - int(serve)) / hz - float(lu) - float(ls), 0) / res["duration_s"]
non200 = sum(x["sent"] - x["ok"] for x in (w, h) + ((p,) if p else ()))
def buckets(path):
    # The cumulative buckets of wahook_ingest_request_duration_seconds.
    b = {}
    for line in open(path):
        if line.startswith("wahook_ingest_request_duration_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            b[float(le)] = float(line.rsplit(" ", 1)[1])
    return b
b0, b1 = buckets(f"{out}/metrics-half-{r}-{name}.before"), buckets(f"{out}/metrics-half-{r}-{name}.after")
les = sorted(b1)
cum = [b1[le] - b0.get(le, 0) for le in les]
total = cum[-1] if cum else 0
def srv_quantile(q):
    # As Prometheus' histogram_quantile: linear within the bucket.
    rank, lo, below = q * total, 0.0, 0.0
    for le, c in zip(les, cum):
        if c >= rank:
            return lo if le == float("inf") else lo + (le - lo) * (rank - below) / max(c - below, 1)
        lo, below = le, c
    return lo
# "- -" when this wahook has no such histogram (an older WAHOOK_BIN).
srv = "- -" if 0.01 not in b1 else f"{srv_quantile(0.99) * 1000:.2f} {100 * (total - cum[les.index(0.01)]) / max(total, 1):.2f}"
srv += f" {h.get('send_lag_p99_ms', 0):.2f}"
pipe = f"{p['ok_per_s']:.0f} {p['ok_per_s'] / b['ok_per_s']:.2f} {prss}" if p else "- - -"
def accounted(run, res):
    # CPU-µs per request answered of the load generator and of each process
    # accounted beside it, and the machine's idle share, in percent.
    try:
        f = open(f"{out}/{run}.acct").read().split()
        n = max(res["ok"], 1)
        gen = (float(f[0]) + float(f[1])) * 1e6 / n
        busy, total = int(f[2]), int(f[3])
        procs = [int(t) / hz * 1e6 / n for t in f[4:]]
    except (OSError, IndexError, ValueError) as e:
        print(f"bench: {run}.acct: {e}", file=sys.stderr)
        return None
    return [gen] + procs + [100 * (total - busy) / max(total, 1)]
ab = accounted(f"bare-{r}", b)
ap = accounted(f"pipeline-{r}", p) if p else None
acct = (" ".join(f"{x:.1f}" for x in ab) if ab else "- - -") + " " + (" ".join(f"{x:.1f}" for x in ap) if ap else "- - - -")
# For the summary after the rounds (null: not accounted).
json.dump({"bare": ab, "pipeline": ap}, open(f"{out}/acct-{r}.json", "w"))
print(f"{r} {b['ok_per_s']:.0f} {w['ok_per_s']:.0f} {w['ok_per_s'] / b['ok_per_s']:.2f} "
      f"{h['p50_ms']:.2f} {h['p99_ms']:.2f} {h['p999_ms']:.2f} {rss} {pipe} {non200} {name} "
      f"{others(f'wahook-{r}-{name}', w):.2f} {others(f'wahook-half-{r}-{name}', h):.2f} {dups} {sat_rss} {index_ids} {index_mib} {srv} {acct}")
PY
	done
done
python3 - "$out" "$ROUNDS" "$PIPELINE" "${variants[@]%%:*}" <<'PY' || echo "bench: no summary" >&2
import json, statistics, sys
out, rounds, pipeline, names = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
def j(n):
    d = json.load(open(f"{out}/{n}.json"))
    if "rate_per_s" in d:  # a loadtest report
        d.setdefault("ok_per_s", d["rate_per_s"])  # from a binary older than ok_per_s: every answer
    return d
def med(xs, fmt):
    return f"{fmt(statistics.median(xs))} ({fmt(min(xs))} to {fmt(max(xs))})"
rs = range(1, rounds + 1)
bare = [j(f"bare-{r}")["ok_per_s"] for r in rs]
print(f"over {rounds} round(s), median (range):")
print(f"  bare Fiber: {med(bare, lambda x: f'{x:,.0f}')} req/s")
for name in names:
    ing = [j(f"wahook-{r}-{name}")["ok_per_s"] / b for r, b in zip(rs, bare)]
    print(f"  ingest ({name}) / bare Fiber: {med(ing, lambda x: f'{x:.2f}')}")
if pipeline:
    pipe = [j(f"pipeline-{r}")["ok_per_s"] for r in rs]
    print(f"  pipeline: {med(pipe, lambda x: f'{x:,.0f}')} req/s; / bare Fiber: {med([p / b for p, b in zip(pipe, bare)], lambda x: f'{x:.2f}')}")
def accounted(loop):
    # Each round's figures of the loop, as its row gave them (acct-<round>.json).
    try:
        rows = [j(f"acct-{r}")[loop] for r in rs]
    except (OSError, KeyError, ValueError) as e:
        rows = [None]
        print(f"bench: {e}", file=sys.stderr)
    if None in rows:
        print(f"bench: no CPU figures of the {loop} loops", file=sys.stderr)
        return None
    return rows
# Each figure's median over the rounds on its own: medians do not add up.
col = lambda rows, i: med([x[i] for x in rows], lambda v: f"{v:.1f}")
ab = accounted("bare")
if ab:
    print(f"  CPU-µs per request, bare Fiber's closed loop: load generator {col(ab, 0)}, handler {col(ab, 1)}; idle {col(ab, 2)}%")
ap = accounted("pipeline") if pipeline else None
if ap:
    print(f"  CPU-µs per request, the pipeline's closed loop: load generator {col(ap, 0)}, serve {col(ap, 1)}, ClickHouse {col(ap, 2)}; idle {col(ap, 3)}%")
    tot = [x[0] + x[1] + x[2] for x in ap]
    print(f"  the pipeline's closed loop in all (generator, serve, ClickHouse): {med(tot, lambda v: f'{v:.1f}')} CPU-µs per request")
PY
if [ "$BREAKDOWN" = 1 ]; then python3 scripts/bench_breakdown.py "$out" "$ROUNDS" | tee "$out/breakdown.txt"; fi
echo "JSON reports in $out/; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3)"

#!/usr/bin/env python3
"""The cost breakdown of scripts/bench.sh: CPU-µs per webhook answered 200,
by part, from the files costed_load wrote (cost-<run>-<round>.*), for the
pipeline at saturation, at half that rate, and at half rate with EVENTS off.

    python3 scripts/bench_breakdown.py OUT ROUNDS

Prints the table (median and range over the rounds) and writes each round's
figures to OUT/breakdown-<round>.json."""
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
RUNS = [("sat", "saturation"), ("half", "half rate"), ("noevents", "half rate, EVENTS off")]
NATS = "nats-server"


def run_costs(tag):
    """The run's CPU-µs per webhook by row name, or None if it is missing."""
    if not os.path.exists(f"{out}/cost-{tag}.parts.json"):
        return None
    load = json.load(open(f"{out}/cost-{tag}.json"))
    parts = json.load(open(f"{out}/cost-{tag}.parts.json"))
    serve_ticks, ch_ticks, hz = (int(x) for x in open(f"{out}/cost-{tag}.ticks").read().split())
    ok = max(load["ok"], 1)
    per = lambda cpu_s: cpu_s * 1e6 / ok
    rows = {"webhooks answered 200": load["ok"], "webhooks/s": load.get("ok_per_s", load["rate_per_s"])}
    nats = 0.0
    for p in parts["parts"]:
        rows["wahook: " + p["part"]] = per(p["cpu_s"])
        if p["part"].startswith(NATS):
            nats += per(p["cpu_s"])
    rows["wahook: nats-server, all"] = nats
    rows["wahook: all, from the profile"] = per(parts["total_s"])
    rows["wahook: all, from /proc"] = per(serve_ticks / hz)
    ch = {"insert": 0.0, "funnel_insert": 0.0, "query": 0.0}
    for line in open(f"{out}/cost-{tag}.ch.tsv"):
        kind, cpu_us, _n = line.split("\t")
        ch[kind] = per(int(cpu_us) / 1e6)
    ch_all = per(ch_ticks / hz)
    rows["ClickHouse: inserts of stage 1, materialized views included"] = ch["insert"]
    rows["ClickHouse: the funnel resolver's inserts"] = ch["funnel_insert"]
    rows["ClickHouse: the funnel resolver's reads"] = ch["query"]
    rows["ClickHouse: merges and other background (the rest)"] = ch_all - sum(ch.values())
    rows["ClickHouse: all, from /proc"] = ch_all
    rows["whole system (wahook + ClickHouse, /proc)"] = rows["wahook: all, from /proc"] + ch_all
    return rows


table = {}  # row -> column -> [per round]
order = []
for r in range(1, rounds + 1):
    per_round = {}
    for tag, col in RUNS:
        rows = run_costs(f"{tag}-{r}")
        if rows is None:
            continue
        per_round[col] = rows
        for k, v in rows.items():
            if k not in order:
                order.append(k)
            table.setdefault(k, {}).setdefault(col, []).append(v)
    # nats-server by stream, at half rate: EVENTS (and the KV writes stage 2
    # makes of them) is what EVENTS off saves; the rest is RAW's.
    h, o = per_round.get("half rate"), per_round.get("half rate, EVENTS off")
    if h and o:
        split = {"nats-server: RAW (all of it with EVENTS off)": o["wahook: nats-server, all"],
                 "nats-server: EVENTS and KV (EVENTS on less off)": h["wahook: nats-server, all"] - o["wahook: nats-server, all"]}
        per_round["half rate"].update(split)
        for k, v in split.items():
            if k not in order:
                order.append(k)
            table.setdefault(k, {}).setdefault("half rate", []).append(v)
    json.dump(per_round, open(f"{out}/breakdown-{r}.json", "w"), indent=1)


def cell(vals):
    if not vals:
        return "-"
    fmt = (lambda v: f"{v:.0f}") if max(abs(v) for v in vals) >= 100 else (lambda v: f"{v:.1f}")
    if len(vals) == 1:
        return fmt(vals[0])
    return f"{fmt(statistics.median(vals))} ({fmt(min(vals))} to {fmt(max(vals))})"


n = len(next(iter(table.values()), {}).get("saturation", []))
print(f"cost breakdown: CPU-µs per webhook answered 200, median (range) over {n} round(s)")
cols = [c for _, c in RUNS]
print("| part | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for k in order:
    if k.startswith("wahook: ") and k[8:] == "other" and all(v == 0 for vs in table[k].values() for v in vs):
        continue
    print(f"| {k} | " + " | ".join(cell(table[k].get(c, [])) for c in cols) + " |")

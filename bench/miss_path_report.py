#!/usr/bin/env python3
"""The tables of bench/miss_path.sh from its run dir (bench/.run/miss-path/ by default, or a copy
of one): latency and CPU per request of each case, the floor clients, the filtered cases'
stages (median, p99 and mean per request, medians over rounds) and the added latency against the
floor. Usage: miss_path_report.py RUN_DIR [CLK_TCK]."""
import collections, json, os, statistics, sys

run_dir = sys.argv[1]
clk_tck = int(sys.argv[2]) if len(sys.argv) > 2 else os.sysconf("SC_CLK_TCK")
path = lambda name: os.path.join(run_dir, name)
rows = [json.loads(l) for l in open(path("rows.jsonl"))]
cpu = [l.split() for l in open(path("cpu.txt"))]
tick_us = 1e6 / clk_tck
runs = collections.defaultdict(list)
for r, c in zip(rows, cpu):
    assert r["scenario"] == c[0], (r["scenario"], c[0])
    per = [int(t) * tick_us / r["requests"] for t in c[2:]]
    runs[(c[0], r["batch"])].append((r, per))
med = lambda xs: statistics.median(xs)
print("\nmedian over rounds; CPU is µs per request (Envoy A = passthrough listener and the module")
print("calling the reader cluster; Envoy B = the module with its in-process reader, or for their")
print("cases Envoy C (native_in_process_alt) and Envoy D (wasm_reader_cluster: the Wasm filter)")
print("| case | batch | p50 µs | p99 µs | req/s | CPU Envoy A | CPU Envoy B | CPU reader | CPU Redis | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (s, b), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {s} | {b} | {med(r['p50_us'] for r, _ in rs):.0f} | {med(r['p99_us'] for r, _ in rs):.0f} | "
          f"{med(r['rps'] for r, _ in rs):.0f} | " +
          " | ".join(f"{med(p[i] for _, p in rs):.0f}" for i in range(4)) +
          f" | {sum(r['errors'] for r, _ in rs)} |")

# The stages of each filtered case (its Envoy's timers), per round from the totals' differences:
# the mean ((total ns after - before) / count), the median and the p99 from the histogram (the
# lower edge of the bucket holding them: 4 buckets per power of two, as
# `core/src/stage_clock.rs` lays them).
def lower(i):
    return i if i < 4 else (4 + i % 4) << (i // 4 - 1)
def quantile_of(h, q):
    n, seen = sum(h), 0
    for i, c in enumerate(h):
        seen += c
        if n and seen >= q * n:
            return lower(i) / 1000
    return 0.0
stage = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for l in open(path("stages.rows")):
    f = l.split()
    case, b, name = f[0], int(f[1]), f[2]
    k = (len(f) - 2) // 2  # name count total buckets..., before then after
    before, after = [int(x) for x in f[3:2 + k]], [int(x) for x in f[3 + k:]]
    if name not in order:
        order.append(name)
    diff = [a - b for a, b in zip(after, before)]
    if diff[0] > 0:
        stage[(case, b)][name].append((diff[1] / diff[0] / 1000, quantile_of(diff[2:], 0.5),
                                       quantile_of(diff[2:], 0.99)))
def floors(path):  # batch -> [(p50 µs, p99 µs)], from redis-benchmark's --csv columns
    out = collections.defaultdict(list)
    for l in open(path):
        f = [x.strip('"') for x in l.strip().split(",")]
        out[int(f[0])].append((float(f[5]) * 1000, float(f[7]) * 1000))
    return out
floor, floor_random = floors(path("floor.csv")), floors(path("floor-random.csv"))
clients = collections.defaultdict(list)  # (batch, test) -> [(p50, p99)]
for l in open(path("floor-clients.csv")):
    f = [x.strip('"') for x in l.strip().split(",")]
    clients[(int(f[0]), f[1].rsplit("_", 1)[0])].append((float(f[5]) * 1000, float(f[7]) * 1000))
for b in sorted({b for b, _ in clients}):
    print(f"batch {b}, the same random MGET, p50 / p99 µs (medians over rounds): "
          f"raw socket {med([x[0] for x in floor_random[b]]):.0f} / {med([x[1] for x in floor_random[b]]):.0f}; "
          + "; ".join(f"{t.replace('MGET_random_', '')} {med([x[0] for x in v]):.0f} / {med([x[1] for x in v]):.0f}"
                      for (bb, t), v in sorted(clients.items()) if bb == b))
batches = sorted(stage)
print("\nstages of the filtered cases: µs per request, median / p99 / mean (medians over rounds);")
print("wall-clock, so a stage includes time its thread waited for a core")
print("| stage | " + " | ".join(f"{c} {b} p50 | p99 | mean" for c, b in batches) + " |")
print("|---|" + "---:|---:|---:|" * len(batches))
cell = lambda xs, i: f"{med([x[i] for x in xs]):.1f}" if xs else "-"
for name in order:
    print(f"| {name} | " + " | ".join(
        f"{cell(stage[b][name], 1)} | {cell(stage[b][name], 2)} | {cell(stage[b][name], 0)}" for b in batches) + " |")
print("| **sum** | " + " | ".join(
    f"{sum(med([x[1] for x in v]) for v in stage[b].values() if v):.1f} | | "
    f"{sum(med([x[0] for x in v]) for v in stage[b].values() if v):.1f}" for b in batches) + " |")
for (c, b) in batches:
    p = [r["p50_us"] for r, _ in runs.get(("passthrough", b), [])]
    n = [r["p50_us"] for r, _ in runs.get((c, b), [])]
    p9 = [r["p99_us"] for r, _ in runs.get(("passthrough", b), [])]
    n9 = [r["p99_us"] for r, _ in runs.get((c, b), [])]
    fp50, fp99 = med([x[0] for x in floor[b]]), med([x[1] for x in floor[b]])
    rp50, rp99 = med([x[0] for x in floor_random[b]]), med([x[1] for x in floor_random[b]])
    if p and n:
        a50, a99 = med(n) - med(p), med(n9) - med(p9)
        print(f"{c} batch {b}: floor (redis-benchmark MGET, 1 conn) p50 {fp50:.0f} µs p99 {fp99:.0f} µs; "
              f"random keys (ferry-floor) p50 {rp50:.0f} µs p99 {rp99:.0f} µs; "
              f"added over passthrough p50 {a50:.0f} µs ({a50 / fp50:.1f}x floor, "
              f"{a50 / rp50:.1f}x random floor) p99 {a99:.0f} µs ({a99 / fp99:.1f}x floor p99, "
              f"{a99 / rp99:.1f}x random floor p99)")

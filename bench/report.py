#!/usr/bin/env python3
"""Turns one `make bench` run (rows.jsonl from ferry-bench + meta.json from bench.sh) into
OUT/latest.json (+ a dated copy), OUT/latency.png, OUT/added.png and the results section of the
README given (between the `results:start` / `results:end` markers; a README that does not exist
yet is created with that section alone). bench.sh gives bench/.run/results and
bench/.run/report.md, or with RECORD=1 the committed bench/results and bench/README.md; the
section links `results/...`, so OUT is the `results` folder beside the README."""

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess

import on_demand_report

SCENARIOS = ["envoy_passthrough", "ferry_redis", "ferry_cache", "ferry_native", "ferry_native_cache",
             "ferry_native_inproc", "reader_direct", "ferry_feast", "ferry_feast_precomputed",
             "feast_precomputed", "feast_regular", "feast_sdk"]
SCENARIOS += on_demand_report.SCENARIOS
# Scenarios through Envoy with a ferry filter: their cost is what they add over passthrough.
FILTERED = ["ferry_redis", "ferry_cache", "ferry_native", "ferry_native_cache", "ferry_native_inproc",
            "ferry_mix", "ferry_od", "ferry_native_mix", "ferry_native_od"]
START, END = "<!-- results:start -->", "<!-- results:end -->"


def cmd_output(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def machine(envoy):
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
            mem_gib = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    envoy_v = cmd_output([envoy, "--version"]) or ""
    m = re.search(r"/(\d+\.\d+\.\d+)/", envoy_v)
    try:
        import feast
        feast_v = feast.__version__
    except ImportError:
        feast_v = None
    redis_v = cmd_output(["redis-server", "--version"]) or ""
    m2 = re.search(r"v=(\S+)", redis_v)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "envoy": m.group(1) if m else envoy_v[:80],
        "redis": m2.group(1) if m2 else redis_v[:80],
        "feast": feast_v,
        "python": platform.python_version(),
        "rustc": cmd_output(["rustc", "--version"]),
    }


def find(rows, scenario, batch, connections, rate=None):
    for r in rows:
        if (r["scenario"], r["batch"], r["connections"], r["rate"]) == (scenario, batch, connections, rate):
            return r
    return None


def fmt_us(us):
    if us is None:
        return "–"
    return f"{us / 1000:.2f} ms" if us >= 10_000 else f"{us} µs"


def ratio(a, b):
    return None if not a or not b else a / b


def targets(rows, meta):
    """Each target of issue #5: what was measured, the bound, met or not."""
    out = []

    def add(name, value, bound, met, unit=""):
        out.append({"target": name, "measured": value, "bound": bound, "met": met, "unit": unit})

    for b in (1, 10, 100):
        f, x = find(rows, "feast_precomputed", b, 1), find(rows, "ferry_redis", b, 1)
        r = ratio(f and f["p99_us"], x and x["p99_us"])
        add(f"p99 Feast precomputed / Ferry (cache off), batch {b}, 1 connection",
            r and round(r, 1), "≥ 10×", r is not None and r >= 10, "×")
    for b in (1, 10, 100):
        f, x = find(rows, "feast_precomputed", b, 8), find(rows, "ferry_redis", b, 8)
        r = ratio(x and x["rps"], f and f["rps"])
        add(f"throughput Ferry / Feast precomputed, batch {b}, 8 connections",
            r and round(r, 1), "≥ 5×", r is not None and r >= 5, "×")
    p, x, c = (find(rows, s, 1, 1) for s in ("envoy_passthrough", "ferry_redis", "ferry_cache"))
    if p and x:
        add("added p50 over passthrough, batch 1 (cache off)", x["p50_us"] - p["p50_us"], "≤ 200 µs",
            x["p50_us"] - p["p50_us"] <= 200, "µs")
        add("added p99 over passthrough, batch 1 (cache off)", x["p99_us"] - p["p99_us"], "≤ 500 µs",
            x["p99_us"] - p["p99_us"] <= 500, "µs")
    if p and c:
        add("added p50 over passthrough, batch 1, near-cache hit", c["p50_us"] - p["p50_us"], "≤ 60 µs",
            c["p50_us"] - p["p50_us"] <= 60, "µs")
    p, x = find(rows, "envoy_passthrough", 100, 1), find(rows, "ferry_redis", 100, 1)
    if p and x:
        add("added p99 over passthrough, batch 100 (cache off)", x["p99_us"] - p["p99_us"], "≤ 2000 µs",
            x["p99_us"] - p["p99_us"] <= 2000, "µs")
    out += native_targets(rows)
    out += speed_targets(rows)
    out += on_demand_report.targets(rows, meta)
    mem = meta.get("redis_memory", {})
    r = ratio(mem.get("ferry_key_bytes"), mem.get("feast_precomputed_blob_bytes"))
    add("Redis bytes/entity, Ferry key / Feast precomputed blob", r and round(r, 3), "≤ 0.2",
        r is not None and r <= 0.2)
    rate = materialize_rates(meta).get("ferry")
    add("ferry materialize throughput", rate and round(rate), "≥ 100,000 entities/s",
        rate is not None and rate >= 100_000, "entities/s")
    return out


def native_targets(rows):
    """The targets of issue #14 for the native build (dynamic module)."""
    out = []

    def add(name, value, bound, met, unit=""):
        out.append({"target": name, "measured": value, "bound": bound, "met": met, "unit": unit})

    p, c, sdk, rest = (find(rows, s, 1, 1) for s in
                       ("envoy_passthrough", "ferry_native_cache", "feast_sdk", "feast_precomputed"))
    # The cache-off targets, for the module calling the reader cluster and with its in-process
    # reader (FERRY_NATIVE_READER).
    for scenario, how in (("ferry_native", "native"), ("ferry_native_inproc", "native in-process")):
        n = find(rows, scenario, 1, 1)
        if n and sdk:
            add(f"{how}, batch 1 (cache off): whole enriched request p50 vs Feast SDK lookup p50",
                f"{n['p50_us']} vs {sdk['p50_us']}", "below", n["p50_us"] < sdk["p50_us"], "µs")
        if p and n:
            add(f"{how}: added p50 over passthrough, batch 1 (cache off)",
                n["p50_us"] - p["p50_us"], "≤ 200 µs", n["p50_us"] - p["p50_us"] <= 200, "µs")
        r = ratio(rest and rest["p99_us"], n and n["p99_us"])
        add(f"{how}: p99 Feast REST (precomputed) / Ferry, batch 1", r and round(r, 1), "≥ 10×",
            r is not None and r >= 10, "×")
        p100, n100 = find(rows, "envoy_passthrough", 100, 1), find(rows, scenario, 100, 1)
        if p100 and n100:
            add(f"{how}: added p99 over passthrough, batch 100 (cache off)",
                n100["p99_us"] - p100["p99_us"], "≤ 2000 µs",
                n100["p99_us"] - p100["p99_us"] <= 2000, "µs")
    if p and c:
        add("native: added p50 over passthrough, batch 1, near-cache hit", c["p50_us"] - p["p50_us"],
            "≤ 60 µs", c["p50_us"] - p["p50_us"] <= 60, "µs")
    return out


BUILDS = (("ferry_redis", "Wasm"), ("ferry_native", "native"), ("ferry_native_inproc", "native in-process"))


def met_text(t, yes, no):
    """Whether a target was met; one with nothing measured (its rows are not in a partial run,
    `BENCH_SCENARIOS`/`BENCH_BATCHES`) is neither."""
    if t["measured"] is None:
        return "not run"
    return yes if t["met"] else no


def speed_targets(rows):
    """The ratio goals of issue #34 that a full run measures: Wasm against native on the same
    reader cluster (what each adds over the passthrough), and Feast's REST server against each
    build at p99 (at batch 1 beside its ceiling: Feast's p99 over the passthrough's)."""
    out = []

    def add(name, value, bound, met, unit=""):
        out.append({"target": name, "measured": value, "bound": bound, "met": met, "unit": unit})

    for b in (1, 10, 100):
        p, w, n = (find(rows, s, b, 1) for s in ("envoy_passthrough", "ferry_redis", "ferry_native"))
        for q in ("p50_us", "p99_us"):
            r = ratio(w and p and w[q] - p[q], n and p and n[q] - p[q])
            add(f"Wasm / native (both on the reader cluster), added {q[:3]} over passthrough, batch {b}",
                r and round(r, 2), "≤ 1.5×", r is not None and 0 < r <= 1.5, "×")
    for conns in (1, 8):
        for b in (1, 10, 100):
            f, p = find(rows, "feast_precomputed", b, conns), find(rows, "envoy_passthrough", b, conns)
            for scenario, how in BUILDS:
                x = find(rows, scenario, b, conns)
                r = ratio(f and f["p99_us"], x and x["p99_us"])
                if b == 1:
                    ceiling = ratio(f and f["p99_us"], p and p["p99_us"])
                    add(f"p99 Feast REST / {how}, batch 1, {conns} connection(s) (ceiling: Feast / "
                        f"passthrough {ceiling and round(ceiling, 1)}×)", r and round(r, 1), "reported",
                        r is not None, "×")
                else:
                    add(f"p99 Feast REST / {how}, batch {b}, {conns} connection(s)", r and round(r, 1),
                        "≥ 10×", r is not None and r >= 10, "×")
    return out


def plot_added(rows, path):
    """Added latency over Envoy passthrough (ferry scenarios), next to what a Feast lookup
    costs by itself (REST call, or the in-process SDK call), per batch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, (key, title) in zip(axes, [("p50_us", "p50"), ("p99_us", "p99")]):
        for s in FILTERED + ["feast_precomputed", "feast_sdk"]:
            pts = []
            for r in rows:
                if r["scenario"] != s or r["connections"] != 1 or r["rate"] is not None:
                    continue
                if s in FILTERED:
                    p = find(rows, "envoy_passthrough", r["batch"], 1)
                    if not p:
                        continue
                    # Under noise a percentile can come out below passthrough's: not plotted
                    # on a log scale (the tables show it).
                    if r[key] > p[key]:
                        pts.append((r["batch"], r[key] - p[key]))
                else:
                    pts.append((r["batch"], r[key]))
            if pts:
                label = f"{s} (added)" if s in FILTERED else f"{s} (whole lookup)"
                plot_us(ax, sorted(pts), label)
        batch_axes(ax, f"{title} added over Envoy passthrough, 1 connection")
    axes[0].set_ylabel("ms (log)")
    save(fig, axes[1], path)


def plot_us(ax, pts, label):
    """One line of (batch, microseconds) points, drawn in milliseconds."""
    ax.plot([b for b, _ in pts], [v / 1000 for _, v in pts], marker="o", ms=3, label=label)


def save(fig, legend_ax, path):
    """Writes the figure to `path`, the legend on `legend_ax`."""
    legend_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=72)


def batch_axes(ax, title):
    """One panel of a plot against the batch size: both axes logarithmic, batches 1 to 100."""
    import matplotlib.ticker

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1, 5, 10, 50, 100])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("entities per request")
    ax.grid(True, which="both", alpha=0.3)


def materialize_rates(meta):
    rates = {}
    fm = meta.get("ferry_materialize")
    if fm and fm.get("wall_s"):
        rates["ferry"] = fm["entities"] / fm["wall_s"]
        m = re.search(r"= (\d+) entities/s", fm.get("output", ""))
        if m:
            rates["ferry_write_only"] = int(m.group(1))
    xm = meta.get("feast_materialize")
    if xm and xm.get("wall_s"):
        rates["feast"] = xm["entities"] / xm["wall_s"]
        t = xm.get("timings", {})
        if t.get("precompute_s"):
            rates["feast_precompute_only"] = xm["entities"] / t["precompute_s"]
        if t.get("views_s"):
            rates["feast_views_only"] = xm["entities"] / t["views_s"]
    return rates


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), sharey=True)
    for ax, (key, title) in zip(axes, [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")]):
        for s in SCENARIOS:
            pts = sorted((r["batch"], r[key]) for r in rows
                         if r["scenario"] == s and r["connections"] == 1 and r["rate"] is None)
            if pts:
                plot_us(ax, pts, s)
        batch_axes(ax, f"{title}, closed loop, 1 connection")
    axes[0].set_ylabel("latency (ms, log)")
    save(fig, axes[2], path)


def table(rows, connections, rate):
    lines = ["| scenario | batch | p50 | p90 | p99 | p99.9 | max | req/s | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in SCENARIOS:
        for r in sorted((r for r in rows if r["scenario"] == s and r["connections"] == connections
                         and r["rate"] == rate), key=lambda r: r["batch"]):
            dropped = f", {r['dropped']} dropped" if r.get("dropped") else ""
            saturated = rate is not None and (r.get("dropped") or r["rps"] < 0.95 * rate)
            mark = " **saturated**" if saturated else ""
            if not r.get("requests"):
                lines.append(f"| {s} | {r['batch']} | – | – | – | – | – | 0{mark} | {r['errors']}{dropped} |")
                continue
            lines.append(f"| {s} | {r['batch']} | {fmt_us(r['p50_us'])} | {fmt_us(r['p90_us'])} | "
                         f"{fmt_us(r['p99_us'])} | {fmt_us(r['p999_us'])} | {fmt_us(r['max_us'])} | "
                         f"{r['rps']:.0f}{mark} | {r['errors']}{dropped} |")
    return "\n".join(lines)


def derived(rows):
    lines = ["| batch | added p50 / p99 over passthrough (cache off) | added p50 / p99 (near cache) | "
             "filter + reader call beyond the reader's own time (ferry_redis − passthrough − reader_direct, p50) | p99 Feast precomputed ÷ Ferry | "
             "p99 Feast regular ÷ Ferry | req/s Ferry ÷ Feast precomputed (8 conns) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for b in sorted({r["batch"] for r in rows}):
        p, x, c, d, f, g = (find(rows, "envoy_passthrough", b, 1), find(rows, "ferry_redis", b, 1),
                            find(rows, "ferry_cache", b, 1), find(rows, "reader_direct", b, 1),
                            find(rows, "feast_precomputed", b, 1), find(rows, "feast_regular", b, 1))
        x8, f8 = find(rows, "ferry_redis", b, 8), find(rows, "feast_precomputed", b, 8)

        def add(a, z, k):
            return f"{a[k] - z[k]} µs" if a and z else "–"

        def beyond(x, p, d):
            return f"{x['p50_us'] - p['p50_us'] - d['p50_us']} µs" if x and p and d else "–"

        def rat(a, z):
            r = ratio(a, z)
            return f"{r:.1f}×" if r else "–"
        lines.append(
            f"| {b} | {add(x, p, 'p50_us')} / {add(x, p, 'p99_us')} | {add(c, p, 'p50_us')} / {add(c, p, 'p99_us')} | "
            f"{beyond(x, p, d)} | {rat(f and f['p99_us'], x and x['p99_us'])} | "
            f"{rat(g and g['p99_us'], x and x['p99_us'])} | {rat(x8 and x8['rps'], f8 and f8['rps'])} |")
    return "\n".join(lines)


def derived_native(rows):
    """Wasm and native side by side, and against Feast's REST server and in-process SDK."""
    lines = ["| batch | Wasm added p50 / p99 (cache off) | native added p50 / p99 (cache off) | "
             "native in-process added p50 / p99 (cache off) | "
             "Wasm added p50 / p99 (near cache) | native added p50 / p99 (near cache) | "
             "native (in-process) whole request p50 / Feast SDK lookup p50 | "
             "p99 Feast REST ÷ native (in-process) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in sorted({r["batch"] for r in rows}):
        p = find(rows, "envoy_passthrough", b, 1)
        w, n, ni, wc, nc, sdk, rest = (find(rows, s, b, 1) for s in
                                       ("ferry_redis", "ferry_native", "ferry_native_inproc",
                                        "ferry_cache", "ferry_native_cache", "feast_sdk",
                                        "feast_precomputed"))

        def add(a):
            return f"{a['p50_us'] - p['p50_us']} / {a['p99_us'] - p['p99_us']} µs" if a and p else "–"

        def pair(x, y):
            return f"{fmt_us(x)} ({fmt_us(y)})" if x and y else (fmt_us(x) if x else "–")
        whole = (f"{pair(n and n['p50_us'], ni and ni['p50_us'])} / {fmt_us(sdk['p50_us'])}"
                 if n and sdk else "–")
        r = ratio(rest and rest["p99_us"], n and n["p99_us"])
        ri = ratio(rest and rest["p99_us"], ni and ni["p99_us"])
        rs = f"{r:.1f}×" if r else "–"
        if ri:
            rs += f" ({ri:.1f}×)"
        lines.append(f"| {b} | {add(w)} | {add(n)} | {add(ni)} | {add(wc)} | {add(nc)} | {whole} | "
                     f"{rs} |")
    return "\n".join(lines)


def envoy_histograms(stats):
    """(name, {"P50": ms, ...}) of Envoy's /stats?format=json histograms, cumulative values."""
    out = []
    for entry in (stats or {}).get("stats", []):
        h = entry.get("histograms")
        if not h:
            continue
        names = [f"P{q:g}" for q in h.get("supported_quantiles", [])]
        for c in h.get("computed_quantiles", []):
            values = {n: v.get("cumulative") for n, v in zip(names, c.get("values", []))}
            out.append((c["name"], values))
    return out


def section(doc):
    rows, meta = doc["rows"], doc["meta"]
    run = meta.get("run", {})
    mem = meta.get("redis_memory", {})
    rates = materialize_rates(meta)
    rate_values = sorted({r["rate"] for r in rows if r["rate"] is not None})
    out = [START, "",
           f"Run of {doc['generated_at']} ({'QUICK smoke run' if run.get('quick') else 'full run'}: "
           f"{run.get('entities')} entities, {run.get('duration_s')} s measured per run after "
           f"{run.get('warmup_s')} s warm-up). Machine: {doc['machine'].get('cpu')}, "
           f"{doc['machine'].get('cores')} cores, {doc['machine'].get('memory_gib')} GiB; Envoy "
           f"{doc['machine'].get('envoy')}, Redis {doc['machine'].get('redis')}, Feast "
           f"{doc['machine'].get('feast')}. Raw rows: `results/latest.json`.", "",
           "![latency percentiles vs batch size](results/latency.png)", "",
           "![added latency over passthrough vs batch size](results/added.png)", "",
           "### Targets", "", "| target | measured | bound | met |", "|---|---:|---|---|"]
    for t in doc["targets"]:
        v = "–" if t["measured"] is None else f"{t['measured']}{(' ' + t['unit']) if t['unit'] and t['unit'] != '×' else t['unit']}"
        out.append(f"| {t['target']} | {v} | {t['bound']} | {met_text(t, 'yes', '**no**')} |")
    out += ["", "### Derived (closed loop, 1 connection, unless said)", "", derived(rows), "",
            "### Wasm vs native build, and Feast (closed loop, 1 connection)", "", derived_native(rows), "",
            "### On-demand features: stored only, on-demand only, the mix, Feast's ODFV (closed loop, 1 connection, "
            "p50 / p99)", "", on_demand_report.table(rows, meta), "",
            "### Closed loop, 1 connection (latency of one request at a time)", "", table(rows, 1, None), "",
            "### Closed loop, 8 connections (throughput)", "", table(rows, 8, None), ""]
    for rate in rate_values:
        out += [f"### Open loop, {rate:.0f} req/s over 8 connections (latency from the intended send time)",
                "", table(rows, 8, rate), ""]
    fm, xm = meta.get("ferry_materialize", {}), meta.get("feast_materialize", {})
    stats = envoy_histograms(meta.get("envoy_stats"))
    if stats:
        out += ["### Envoy's own histograms (all runs together, ms)", "",
                "| histogram | p50 | p90 | p99 |", "|---|---:|---:|---:|"]
        out += [f"| `{name}` | {q.get('P50')} | {q.get('P90')} | {q.get('P99')} |" for name, q in stats]
        out.append("")
    out += ["### Redis memory per entity", "",
            "| layout | bytes per entity |", "|---|---:|",
            f"| Ferry: one string per entity (`MEMORY USAGE`, key + value + overhead) | {mem.get('ferry_key_bytes')} |",
            f"| Ferry: the stored vector alone (`STRLEN`) | {mem.get('ferry_value_bytes')} |",
            f"| Feast: the precomputed blob alone (`HSTRLEN`) | {mem.get('feast_precomputed_blob_bytes')} |",
            f"| Feast: the whole entity hash (`MEMORY USAGE`: {mem.get('feast_hash_fields')} fields, per-view values + blob) | {mem.get('feast_hash_bytes')} |",
            f"| `INFO memory` growth / entities, Ferry | {fm.get('used_memory_delta', 0) / max(1, fm.get('entities', 1)):.0f} |",
            f"| `INFO memory` growth / entities, Feast (views + precompute) | {xm.get('used_memory_delta', 0) / max(1, xm.get('entities', 1)):.0f} |",
            "", "### Materialization", "", "| | entities/s |", "|---|---:|",
            f"| `ferry materialize` (whole command: read Parquet, build vectors, MSET per batch) | {rates.get('ferry', 0):,.0f} |",
            f"| `ferry materialize`, its own figure for the write phase | {rates.get('ferry_write_only', 0):,.0f} |",
            f"| Feast `materialize` with precompute (whole call) | {rates.get('feast', 0):,.0f} |",
            f"| Feast, the view writes alone | {rates.get('feast_views_only', 0):,.0f} |",
            f"| Feast, the precompute step alone | {rates.get('feast_precompute_only', 0):,.0f} |",
            "", END]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", required=True)
    p.add_argument("--meta", required=True)
    p.add_argument("--envoy", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--readme", required=True)
    args = p.parse_args()
    with open(args.rows) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    with open(args.meta) as f:
        meta = json.load(f)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    doc = {
        "generated_at": now.isoformat().replace("+00:00", "Z"),
        "machine": machine(args.envoy),
        "rows": rows,
        "meta": meta,
    }
    doc["targets"] = targets(rows, meta)
    os.makedirs(args.out, exist_ok=True)
    latest = os.path.join(args.out, "latest.json")
    with open(latest, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    shutil.copy(latest, os.path.join(args.out, now.strftime("%Y-%m-%dT%H%M%SZ") + ".json"))
    plot(rows, os.path.join(args.out, "latency.png"))
    plot_added(rows, os.path.join(args.out, "added.png"))
    try:
        with open(args.readme) as f:
            readme = f.read()
    except FileNotFoundError:
        readme = ("# Ferry bench run (not recorded)\n\n`make bench RECORD=1` writes a run to "
                  "bench/README.md and bench/results/.\n")
    if START in readme and END in readme:
        readme = readme[:readme.index(START)] + section(doc) + readme[readme.index(END) + len(END):]
    else:
        readme = readme.rstrip("\n") + "\n\n## Results\n\n" + section(doc) + "\n"
    with open(args.readme, "w") as f:
        f.write(readme)
    for t in doc["targets"]:
        print(f"{met_text(t, 'met   ', 'MISSED')} {t['target']}: {t['measured']} (bound {t['bound']})")
    print(f"wrote {latest}, {args.readme} and {os.path.join(args.out, 'latency.png')}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The on-demand part of `make bench`'s report (issue #21): Chalk's three scenarios behind one
Envoy (stored features only, on-demand only over request fields, the mix of stored and five
derived features) on both builds, Feast's on-demand feature view in python mode, and the
targets, with criterion's cost of five derived features per request taken in the same run.

  on_demand_report.py criterion TARGET_DIR   prints criterion's estimates of the pairs (plain,
                                             five derived features) as JSON, for meta.json
report.py imports `table`, `targets` and SCENARIOS from here."""

import json
import os
import sys

SCENARIOS = ["ferry_mix", "ferry_od", "ferry_native_mix", "ferry_native_od", "feast_odfv"]
BATCHES = (1, 10, 100)
# criterion's benchmark ids: (build, batch) -> (plain, with five derived features).
CRITERION = {
    **{("native", b): (f"filter_request_derived/plain/{b}", f"filter_request_derived/derived5/{b}")
       for b in BATCHES},
    **{("wasm", b): (f"request/enriched_{b}_entities_plain", f"request/enriched_{b}_entities_derived5")
       for b in (1, 10)},
}


def criterion(target_dir):
    """Time in µs of each benchmark of CRITERION found under TARGET_DIR/criterion."""
    out = {}
    for ids in CRITERION.values():
        for bench_id in ids:
            path = os.path.join(target_dir, "criterion", bench_id, "new", "estimates.json")
            try:
                with open(path) as f:
                    est = json.load(f)
                # The figure criterion prints: the slope when it has one (linear sampling).
                out[bench_id] = round((est.get("slope") or est["mean"])["point_estimate"] / 1000, 3)
            except (OSError, KeyError, ValueError):
                pass
    return out


def find(rows, scenario, batch, connections=1):
    return next((r for r in rows if (r["scenario"], r["batch"], r["connections"], r["rate"])
                 == (scenario, batch, connections, None)), None)


def added(meta, build, batch):
    """criterion: what five derived features add to one request of `batch` instances, in µs."""
    c = meta.get("criterion") or {}
    ids = CRITERION.get((build, batch))
    if not ids or ids[0] not in c or ids[1] not in c:
        return None
    return round(c[ids[1]] - c[ids[0]], 2)


def us(x):
    return "–" if x is None else f"{x:,} µs"


def table(rows, meta):
    """p50 / p99 of each scenario at 1 connection, per build and batch, with criterion's figure."""
    lines = ["| build | batch | stored only | near-cache hit (stored) | on-demand only | mix (stored + 5 derived) "
             "| mix − stored, p50 | criterion: 5 derived per request (per instance) | Feast regular | Feast + ODFV (python) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for build, stored, cache, od, mix in (("Wasm", "ferry_redis", "ferry_cache", "ferry_od", "ferry_mix"),
                                          ("native", "ferry_native", "ferry_native_cache", "ferry_native_od",
                                           "ferry_native_mix")):
        for b in sorted({r["batch"] for r in rows}):
            got = [find(rows, s, b) for s in (stored, cache, od, mix, "feast_regular", "feast_odfv")]
            if not any(got[:4]):
                continue
            cells = [f"{us(r['p50_us'])} / {us(r['p99_us'])}" if r else "–" for r in got]
            diff = us(got[3]["p50_us"] - got[0]["p50_us"]) if got[0] and got[3] else "–"
            c = added(meta, build.lower(), b)
            crit = f"{c} µs ({c / b:.2f} µs)" if c is not None else "–"
            lines.append(f"| {build} | {b} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {diff} | {crit} "
                         f"| {cells[4]} | {cells[5]} |")
    return "\n".join(lines)


def targets(rows, meta):
    """Issue #21's targets, each measured in this run (p50, 1 connection, closed loop)."""
    out = []

    def add(name, value, bound, met, unit=""):
        out.append({"target": name, "measured": value, "bound": bound, "met": met, "unit": unit})

    for build, bound in (("native", 10), ("wasm", 25)):
        c = added(meta, build, 1)
        add(f"criterion: five derived features per instance, {build} ({'filter_request' if build == 'native' else 'wasm host'}, batch 1)",
            c, f"≤ {bound} µs", c is not None and c <= bound, "µs")
    for build, od, cache in (("native", "ferry_native_od", "ferry_native_cache"), ("Wasm", "ferry_od", "ferry_cache")):
        for b in (1, 100):
            o, c = find(rows, od, b), find(rows, cache, b)
            if o and c:
                add(f"on-demand-only p50 − near-cache hit p50, {build}, batch {b}", o["p50_us"] - c["p50_us"], "≤ 0 µs",
                    o["p50_us"] <= c["p50_us"], "µs")
    for build, mix, stored in (("native", "ferry_native_mix", "ferry_native"), ("Wasm", "ferry_mix", "ferry_redis")):
        for b in (1, 10, 100):
            m, s, c = find(rows, mix, b), find(rows, stored, b), added(meta, build.lower(), b)
            if m and s and c is not None:
                add(f"mix p50 − stored-only p50, {build}, batch {b} (bound: criterion's difference)",
                    m["p50_us"] - s["p50_us"], f"≤ {c} µs", m["p50_us"] - s["p50_us"] <= c, "µs")
    m, s = find(rows, "ferry_native_mix", 100), find(rows, "ferry_native", 100)
    if m and s:
        r = (m["p50_us"] / s["p50_us"] - 1) * 100
        add("batch 100, native: mix p50 over stored-only p50", round(r, 1), "≤ 5 %", r <= 5, "%")
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "criterion":
        print(json.dumps(criterion(sys.argv[2])))
    else:
        sys.exit(__doc__)

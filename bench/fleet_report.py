#!/usr/bin/env python3
"""The fleet figures from ferry-fleet's rows (bench/fleet.sh): a Markdown table (fleet.md), the
curve from 100 to 10,000 Envoys as an SVG drawn here (no plotting package), and with --readme
the table between the fleet markers of bench/README.md."""
import argparse
import json
import math
import statistics
from pathlib import Path

BEGIN, END = "<!-- fleet:begin -->", "<!-- fleet:end -->"


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def pushes(row, size):
    return [p for p in row["pushes"] if abs(p["size_bytes"] - size) < size * 0.1]


def table(rows):
    out = ["ADS: ms from the push to p50 / p99 / all ACKed (median of the pushes); memory of "
           "`ferry serve` per idle stream (RSS idle minus before any stream, over N).", "",
           "| N | transport | connect s | KB/stream | 100 KB p50 / p99 / all ms | 100 KB cpu s | "
           "1 MB p50 / p99 / all ms | peak MB | real Envoys ms (same version) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r["mode"] == "ads"), key=lambda r: (r["n"], r["transport"])):
        cells = []
        for size in (100_000, 1_000_000):
            ps = pushes(r, size)
            cells.append(" / ".join(fmt(med([p[k] for p in ps])) for k in ("ack_p50_ms", "ack_p99_ms", "ack_all_ms")) if ps else "-")
        small = pushes(r, 100_000)
        real = []
        for p in small:
            real += [f"{fmt(t)}{'' if same else ' (DIFFERENT)'}" for t, same in zip(p["real_envoy_ms"], p["real_envoy_same_version"])]
        peak = max((p["peak_rss_bytes"] for p in r["pushes"]), default=0) / 1e6
        out.append(f"| {r['n']:,} | {r['transport']} | {fmt(r['connect_s'], 1)} | {r['bytes_per_stream'] / 1000:.1f} | "
                   f"{cells[0]} | {fmt(med([p['cpu_s'] for p in small]), 2)} | {cells[1]} | {peak:.0f} | {', '.join(real) or '-'} |")
    out += ["", "Pull: polls of `GET /v1/snapshot` at the filter's period, latency from the request to the body read.", "",
            "| N | transport | period ms | KB/poller | polls | 200 / 304 / failed | p50 ms | p99 ms | p99.9 ms | max ms | cpu s | push loaded by all, ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r["mode"] == "pull"), key=lambda r: (r["n"], r["transport"])):
        out.append(f"| {r['n']:,} | {r['transport']} | {r['poll_ms']} | {r['bytes_per_poller'] / 1000:.1f} | {r['polls']:,} | "
                   f"{r['answered_200']} / {r['answered_304']} / {r['failed']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                   f"{r['p999_ms']:.2f} | {r['max_ms']:.2f} | {r['cpu_s']:.2f} | {fmt(r['push_all_loaded_ms'])} |")
    reps = sorted((r for r in rows if r["mode"] == "replicas"), key=lambda r: r["n"])
    if reps:
        out += ["", "Replicas: two `ferry serve --shared-state` on one Redis, half the fleet on each, 100 KB pushed "
                "to replica A; ms from the push to A's answer, and to all of A's half, of B's half, of the fleet "
                "ACKed (each push).", "",
                "| N | A answered ms | A's half all ms | B's half all ms | all ms |",
                "|---|---|---|---|---|"]
        for r in reps:
            col = lambda k: ", ".join(fmt(p[k]) for p in r["pushes"])
            out.append(f"| {r['n']:,} | {col('post_ms')} | {col('own_half_all_ms')} | {col('other_half_all_ms')} | "
                       f"{col('ack_all_ms')} |")
    return "\n".join(out) + "\n"


def series(rows):
    """(title, unit, {label: [(n, value)]}) per panel."""
    lat, mem = {}, {}
    for r in rows:
        t = r["transport"]
        if r["mode"] == "ads":
            small = pushes(r, 100_000)
            for key, name in (("ack_all_ms", "all ACKed"), ("ack_p99_ms", "p99 ACKed")):
                v = med([p[key] for p in small])
                if v is not None:
                    lat.setdefault(f"ADS 100 KB {name}, {t}", []).append((r["n"], v))
            mem.setdefault(f"ADS, {t}", []).append((r["n"], r["bytes_per_stream"] / 1000))
        elif r["mode"] == "replicas":
            v = med([p["ack_all_ms"] for p in pushes(r, 100_000)])
            if v is not None:
                lat.setdefault(f"2 replicas, 100 KB all ACKed, {t}", []).append((r["n"], v))
        else:
            lat.setdefault(f"pull p99.9, {t}", []).append((r["n"], r["p999_ms"]))
            mem.setdefault(f"pull, {t}", []).append((r["n"], r["bytes_per_poller"] / 1000))
    return [("Time (ms, log scale)", lat, True), ("ferry serve KB per idle client", mem, False)]


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]


def panel(x0, title, data, log_y, w=460, h=300):
    ns = sorted({n for pts in data.values() for n, _ in pts}) or [100]
    vals = [v for pts in data.values() for _, v in pts if v and v > 0] or [1]
    lo_x, hi_x = math.log10(min(ns)), math.log10(max(ns)) + 1e-9
    if log_y:
        lo_y, hi_y = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)) + 1e-9)
        fy = lambda v: (math.log10(max(v, 10 ** lo_y)) - lo_y) / max(hi_y - lo_y, 1)
        ticks = [10 ** e for e in range(lo_y, hi_y + 1)]
    else:
        top = max(vals) * 1.15
        fy = lambda v: v / top
        step = 10 ** math.floor(math.log10(top / 2))
        ticks = [step * i for i in range(int(top / step) + 1)]
    L, T, PW, PH = x0 + 60, 40, w - 80, h - 90
    X = lambda n: L + (math.log10(n) - lo_x) / max(hi_x - lo_x, 1e-9) * PW
    Y = lambda v: T + PH - fy(v) * PH
    s = [f'<text x="{x0 + w / 2}" y="20" text-anchor="middle" font-weight="bold">{title}</text>',
         f'<rect x="{L}" y="{T}" width="{PW}" height="{PH}" fill="none" stroke="#999"/>']
    for t in ticks:
        s.append(f'<line x1="{L}" x2="{L + PW}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" stroke="#eee"/>'
                 f'<text x="{L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>')
    for n in ns:
        s.append(f'<text x="{X(n):.1f}" y="{T + PH + 16}" text-anchor="middle" font-size="11">{n:,}</text>')
    s.append(f'<text x="{L + PW / 2}" y="{T + PH + 32}" text-anchor="middle" font-size="11">simulated Envoys (log scale)</text>')
    for i, (label, pts) in enumerate(sorted(data.items())):
        c = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        s.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (c, " ".join(f"{X(n):.1f},{Y(v):.1f}" for n, v in pts)))
        s += [f'<circle cx="{X(n):.1f}" cy="{Y(v):.1f}" r="3" fill="{c}"/>' for n, v in pts]
        ly = T + PH + 48 + 14 * i
        s.append(f'<line x1="{L}" x2="{L + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="{c}" stroke-width="2"/>'
                 f'<text x="{L + 24}" y="{ly}" font-size="11">{label}</text>')
    return s


def svg(rows):
    panels = series(rows)
    height = 300 + 14 * max(len(d) for _, d, _ in panels) + 10
    body = []
    for i, (title, data, log_y) in enumerate(panels):
        body += panel(i * 480, title, data, log_y)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{height}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(body) + "</svg>\n")


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--rows", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--readme")
    args = a.parse_args()
    rows = [json.loads(l) for l in Path(args.rows).read_text().splitlines() if l.strip()]
    out = Path(args.out)
    text = table(rows)
    (out / "fleet.md").write_text(text)
    (out / "fleet.svg").write_text(svg(rows))
    print(text)
    if args.readme:
        readme = Path(args.readme).read_text()
        if BEGIN in readme and END in readme:
            head, rest = readme.split(BEGIN, 1)
            readme = head + BEGIN + "\n" + text + END + rest.split(END, 1)[1]
            Path(args.readme).write_text(readme)


if __name__ == "__main__":
    main()

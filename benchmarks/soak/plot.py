#!/usr/bin/env python3
"""Plots a soak run (the JSON lines of `formattest-dev soak`) as one SVG, with no dependencies.

usage: benchmarks/soak/plot.py SOAK.jsonl [SOAK2.jsonl ...] --out docs/soak.svg [--title TEXT]

Each input is one run (one colour); three panels share the time axis: latency (p50, p99,
p99.9 and max per window, log scale), requests per second, and the server's resident memory.
"""
import argparse
import json
import math

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
WIDTH, PANEL, MARGIN_LEFT, MARGIN_TOP, GAP = 760, 190, 70, 40, 50


def load(path):
    rows = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def scale(value, low, high, size, log=False):
    if log:
        value, low, high = (math.log10(max(v, 1e-9)) for v in (value, low, high))
    if high == low:
        return size / 2
    return size - (value - low) / (high - low) * size


def panel(svg, top, title, series, log=False, unit=""):
    """series: [(label, colour, dash, [(x, y), ...])]."""
    points = [p for _, _, _, values in series for p in values]
    if not points:
        return
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x_low, x_high = 0, max(xs)
    y_low = min(ys) if log else 0
    y_high = max(ys)
    if log:
        y_low = 10 ** math.floor(math.log10(max(y_low, 1)))
        y_high = 10 ** math.ceil(math.log10(max(y_high, 1)))
    else:
        y_high *= 1.1
    plot_width = WIDTH - MARGIN_LEFT - 20
    svg.append(f'<text x="{MARGIN_LEFT}" y="{top - 8}" font-size="13" font-weight="bold">{title}</text>')
    svg.append(f'<rect x="{MARGIN_LEFT}" y="{top}" width="{plot_width}" height="{PANEL}" fill="none" stroke="#999"/>')
    ticks = []
    if log:
        value = y_low
        while value <= y_high:
            ticks.append(value)
            value *= 10
    else:
        ticks = [y_high * i / 4 for i in range(5)]
    for tick in ticks:
        y = top + scale(tick, y_low, y_high, PANEL, log)
        svg.append(f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        label = f"{tick:,.0f}{unit}"
        svg.append(f'<text x="{MARGIN_LEFT - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{label}</text>')
    for i in range(6):
        x_value = x_high * i / 5
        x = MARGIN_LEFT + (x_value - x_low) / max(x_high - x_low, 1) * plot_width
        # Minutes for a long run; seconds for one under five minutes (where minutes would repeat).
        tick_label = f"{x_value / 60:.0f} min" if x_high >= 300 else f"{x_value:.0f} s"
        svg.append(f'<text x="{x:.1f}" y="{top + PANEL + 14}" font-size="10" text-anchor="middle">{tick_label}</text>')
    legend_x = MARGIN_LEFT + 8
    for label, colour, dash, values in series:
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{MARGIN_LEFT + (x - x_low) / max(x_high - x_low, 1) * plot_width:.1f},{top + scale(y, y_low, y_high, PANEL, log):.1f}"
            for i, (x, y) in enumerate(values)
        )
        svg.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.6" stroke-dasharray="{dash}"/>')
        svg.append(f'<text x="{legend_x}" y="{top + 14}" font-size="10" fill="{colour}">{label}</text>')
        legend_x += 7 * len(label) + 14


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="FormAttest soak")
    arguments = parser.parse_args()
    # A window without a request (the last, partial one, after the load stopped) has no latency.
    runs = [(path.rsplit("/", 1)[-1], [r for r in load(path) if r.get("requests", 1) > 0]) for path in arguments.runs]
    height = MARGIN_TOP + 3 * (PANEL + GAP) + 10
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{MARGIN_LEFT}" y="20" font-size="15">{arguments.title}</text>']
    latency, throughput, memory = [], [], []
    for index, (name, rows) in enumerate(runs):
        colour = COLOURS[index % len(COLOURS)]
        for key, label, dash in [("p50Microseconds", "p50", "2,2"), ("p99Microseconds", "p99", ""),
                                 ("p999Microseconds", "p99.9", "6,3"), ("maxMicroseconds", "max", "1,3")]:
            latency.append((f"{name} {label}", colour, dash, [(r["endSeconds"], r[key] / 1000) for r in rows]))
        throughput.append((name, colour, "", [(r["endSeconds"], r["requestsPerSecond"]) for r in rows]))
        memory.append((name, colour, "", [(r["endSeconds"], r.get("serverRSSBytes", 0) / 2**20) for r in rows if r.get("serverRSSBytes")]))
    panel(svg, MARGIN_TOP + 20, "latency per window (ms, log scale)", latency, log=True)
    panel(svg, MARGIN_TOP + 20 + PANEL + GAP, "requests per second", throughput)
    panel(svg, MARGIN_TOP + 20 + 2 * (PANEL + GAP), "server resident memory (MiB)", memory)
    svg.append("</svg>")
    with open(arguments.out, "w") as handle:
        handle.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The requests a soak's server answered while each purge pass ran, and the others.

usage: benchmarks/soak/during_purge.py SERVER_LOG

SERVER_LOG is the server's JSON log at debug level (FORMATTEST_SOAK_LOG_LEVEL=debug,
FORMATTEST_SOAK_SERVER_LOG; benchmarks/soak/run.sh). A pass's "purged expired records" line is
written when it ends, and it began duration_ms before; a request counts as during the pass when
it was in progress at any moment of it (its log line's time minus its ms, to its time). Prints,
for each pass that purged something, its records, steps, duration and longest step with the
requests during it (count, p99, worst); then the requests outside every pass of over 100,000
records (the backlog's), with how many took 100 ms or more. docs/performance.md, "Sustained
operation".
"""
import json, sys, datetime
def t(s): return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
reqs, passes = [], []
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: continue
    if d.get("message") == "request": reqs.append((t(d["time"]), float(d["ms"])))
    elif d.get("message") == "purged expired records" and int(d["count"]) > 0:
        end = t(d["time"]); passes.append((end - int(d["duration_ms"]) / 1000, end, d))
def stats(xs):
    if not xs: return "none"
    xs = sorted(xs); return f"{len(xs)} requests, p99 {xs[min(len(xs)-1, int(len(xs)*0.99))]:.1f} ms, worst {xs[-1]:.1f} ms"
inside = []
for start, end, d in passes:
    # a request that ended in the pass or waited into it: its start (end - ms) before the pass's end and its end after the start
    xs = [ms for (e, ms) in reqs if e >= start and e - ms / 1000 <= end]
    inside += xs
    print(f"pass {d['time']}: {d['count']} records, {d['steps']} steps, {int(d['duration_ms'])/1000:.1f} s, longest step {d['longest_step_ms']} ms: {stats(xs)}")
big = [p for p in passes if int(p[2]['count']) > 100000]
outside = [ms for (e, ms) in reqs if not any(e >= s and e - ms / 1000 <= en for s, en, _ in big)]
print("outside the large pass:", stats(outside), "; at or above 100 ms:", sum(1 for x in outside if x >= 100))

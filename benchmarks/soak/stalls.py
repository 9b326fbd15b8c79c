#!/usr/bin/env python3
"""Sets the slow requests of a soak run beside what held the store's writer at the time.

usage: benchmarks/soak/stalls.py SERVER_LOG [THRESHOLD_MS]

SERVER_LOG: the JSON-lines log of `serve --log-level debug --log-format json` (benchmarks/soak/run.sh
with FORMATTEST_SOAK_LOG_LEVEL=debug and FORMATTEST_SOAK_SERVER_LOG=PATH). Each line's `time` is
when it was written, at the end of what it reports; a request's `ms`, a purge step's `held_ms`, a
checkpoint's `duration_ms` and a slow transaction's phases say how long before that it began.

Prints: the purge steps' phases (lock wait, statements, commit: p50 / p99 / max), the checkpoints
by mode (count, frames, duration p50 / max), and for every request that took THRESHOLD_MS (default
100) or more in the server, the purge steps, checkpoints and slow transactions that overlapped it.
"""
import json
import sys
from datetime import datetime


def seconds(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    path = sys.argv[1]
    threshold = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
    requests, steps, checkpoints, slow = [], [], [], []
    with open(path) as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            end = seconds(entry["time"])
            message = entry.get("message")
            if message == "request" and "ms" in entry:
                requests.append((end - float(entry["ms"]) / 1000, end, float(entry["ms"])))
            elif message == "purge step":
                held = float(entry["held_ms"])
                steps.append((end - held / 1000, end, entry))
            elif message == "wal checkpoint" and "duration_ms" in entry:
                checkpoints.append((end - float(entry["duration_ms"]) / 1000, end, entry))
            elif message == "slow write transaction":
                total = sum(float(entry[k]) for k in ("lock_wait_ms", "statements_ms", "commit_ms"))
                slow.append((end - total / 1000, end, entry))

    print(f"requests: {len(requests)}; at or above {threshold:g} ms: {sum(1 for r in requests if r[2] >= threshold)}; "
          f"worst {max((r[2] for r in requests), default=0):.1f} ms")
    if steps:
        print(f"purge steps: {len(steps)}")
        for phase in ("lock_wait_ms", "statements_ms", "commit_ms", "held_ms"):
            values = [float(s[2][phase]) for s in steps if phase in s[2]]
            print(f"  {phase}: p50 {percentile(values, 50):.2f}  p99 {percentile(values, 99):.2f}  max {max(values, default=0):.2f}")
    modes = {}
    for _, _, entry in checkpoints:
        modes.setdefault(entry["mode"], []).append(entry)
    for mode, entries in sorted(modes.items()):
        durations = [float(e["duration_ms"]) for e in entries]
        frames = [int(e["frames"]) for e in entries]
        print(f"checkpoints {mode}: {len(entries)}, frames max {max(frames)}, duration p50 {percentile(durations, 50):.2f} "
              f"max {max(durations):.2f} ms, busy {sum(1 for e in entries if e['busy'] == 'true')}")
    print(f"slow write transactions (50 ms or more): {len(slow)}")
    for _, _, entry in slow:
        print(f"  {entry['time']} writes {entry['writes']} lock_wait {entry['lock_wait_ms']} statements {entry['statements_ms']} "
              f"commit {entry['commit_ms']} ms")

    # Slow requests that overlapped the same events are one stall: one line each.
    print(f"requests at or above {threshold:g} ms, by stall, and what overlapped them:")
    stalls = []
    for start, end, ms in sorted((r for r in requests if r[2] >= threshold), key=lambda r: r[1]):
        overlapping = []
        for kind, events in (("purge step", steps), ("checkpoint", checkpoints), ("slow transaction", slow)):
            for event_start, event_end, entry in events:
                if event_start < end and event_end > start:
                    detail = {k: v for k, v in entry.items() if k not in ("time", "level", "message", "logger")}
                    overlapping.append(f"{kind} ending {entry['time'][11:]}: {detail}")
        if stalls and (stalls[-1]["events"] == overlapping or start < stalls[-1]["end"]):
            stall = stalls[-1]
            stall["count"] += 1
            stall["worst"] = max(stall["worst"], ms)
            stall["end"] = max(stall["end"], end)
            for line in overlapping:
                if line not in stall["events"]:
                    stall["events"].append(line)
        else:
            stalls.append({"first": end, "end": end, "count": 1, "worst": ms, "events": overlapping})
    for stall in stalls:
        when = datetime.utcfromtimestamp(stall["first"]).strftime("%H:%M:%S.%f")[:-3]
        print(f"  {when}: {stall['count']} request(s), worst {stall['worst']:.1f} ms")
        for line in stall["events"] or ["nothing of the store's logged overlapped it"]:
            print(f"      {line}")

    # Each slow transaction: the checkpoints that ran while it committed.
    if slow:
        print("slow write transactions and the checkpoints that overlapped them:")
        for start, end, entry in slow:
            with_checkpoint = [c for c in checkpoints if c[0] < end and c[1] > start]
            names = ", ".join(f"{c[2]['mode']} {c[2]['duration_ms']} ms ({c[2]['frames']} frames)" for c in with_checkpoint) or "none"
            print(f"  {entry['time'][11:]} commit {entry['commit_ms']} ms: {names}")

if __name__ == "__main__":
    main()

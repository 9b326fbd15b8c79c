#!/usr/bin/env python3
"""Times a 4 KB write and fdatasync every 20 ms, for the length of a run, beside the service.

usage: benchmarks/soak/fsync_probe.py SECONDS DIRECTORY [OUT.json]

What the disk does to a commit whatever the service does: if the probe's syncs stall at the times
the service's commits do, the stall is the disk's (shared with other processes), not the
service's. Prints (and writes to OUT.json) the count, p50 / p99 / max in ms, and the end time
(UTC, ms) and duration of every sync of 50 ms or more.
"""
import json
import os
import sys
import time
from datetime import datetime, timezone


def main():
    seconds = float(sys.argv[1])
    path = os.path.join(sys.argv[2], f"fsync-probe-{os.getpid()}")
    out = sys.argv[3] if len(sys.argv) > 3 else None
    block = os.urandom(4096)
    durations, slow = [], []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + seconds
        offset = 0
        while time.monotonic() < deadline:
            started = time.monotonic()
            os.pwrite(fd, block, offset)
            os.fdatasync(fd)
            ms = (time.monotonic() - started) * 1000
            offset = (offset + 4096) % (1 << 20)
            durations.append(ms)
            if ms >= 50:
                slow.append([datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3], round(ms, 1)])
            time.sleep(max(0.0, 0.02 - (time.monotonic() - started)))
    finally:
        os.close(fd)
        os.unlink(path)
    durations.sort()
    pick = lambda p: durations[min(len(durations) - 1, int(p / 100 * (len(durations) - 1)))] if durations else 0
    report = {"syncs": len(durations), "p50_ms": round(pick(50), 2), "p99_ms": round(pick(99), 2),
              "max_ms": round(durations[-1] if durations else 0, 1), "at_or_above_50_ms": slow}
    print(json.dumps(report))
    if out:
        with open(out, "w") as handle:
            json.dump(report, handle)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""HTTP load on POST /api/appattest/assert from a second process, one keep-alive connection per
key (so each key's counters arrive in order). Bodies come from `formattest-dev simulate prepare-load`.

usage: loadgen.py --url http://127.0.0.1:8080 --bodies FILE [--duration SECONDS] [--rss-pid PID] [--loop]
With --loop, a connection that has sent all its bodies starts over (the server answers 409 replay).
Prints JSON: requests, requests/s, latency percentiles (ms), statuses; with --rss-pid, the
server's resident memory sampled every 10 s.
"""
import argparse
import asyncio
import json
import time
import urllib.parse
from collections import Counter, defaultdict


def cycle(bodies, loop):
    while True:
        yield from bodies
        if not loop:
            return


async def connection(host, port, bodies, deadline, latencies, statuses, loop):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for body in cycle(bodies, loop):
            if time.monotonic() >= deadline:
                break
            payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            request = (
                f"POST /api/appattest/assert HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n"
            ).encode() + payload
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
            length = 0
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b""):
                    break
                name, _, value = header.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            statuses[int(status_line.split()[1])] += 1
    finally:
        writer.close()


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


async def sample_rss(pid, deadline, samples):
    start = time.monotonic()
    while time.monotonic() < deadline:
        samples.append({"seconds": round(time.monotonic() - start), "rssKiB": rss_kib(pid)})
        await asyncio.sleep(10)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--bodies", required=True)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--rss-pid", type=int)
    parser.add_argument("--loop", action="store_true")
    args = parser.parse_args()
    url = urllib.parse.urlparse(args.url)
    per_connection = defaultdict(list)
    for line in open(args.bodies):
        entry = json.loads(line)
        per_connection[entry["connection"]].append(entry["body"])
    latencies, statuses, rss = [], Counter(), []
    started = time.monotonic()
    deadline = started + args.duration
    tasks = [connection(url.hostname, url.port, bodies, deadline, latencies, statuses, args.loop) for bodies in per_connection.values()]
    if args.rss_pid:
        tasks.append(sample_rss(args.rss_pid, deadline, rss))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    latencies.sort()

    def percentile(p):
        return round(latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000, 3) if latencies else None

    report = {
        "connections": len(per_connection),
        "requests": len(latencies),
        "seconds": round(elapsed, 2),
        "requestsPerSecond": round(len(latencies) / elapsed, 1),
        "p50Milliseconds": percentile(0.50),
        "p90Milliseconds": percentile(0.90),
        "p99Milliseconds": percentile(0.99),
        "maxMilliseconds": round(latencies[-1] * 1000, 3) if latencies else None,
        "statuses": dict(statuses),
    }
    if rss:
        report["serverRss"] = rss
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

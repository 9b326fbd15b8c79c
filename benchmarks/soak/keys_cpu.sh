#!/usr/bin/env bash
# Assert CPU per request and p99 with stores of different sizes (issue 32: 10^7 keys against 10^3),
# the same load on each, the stores taken in turn round after round so that the machine's drift
# lands on all of them alike. Each run is benchmarks/soak/run.sh on the store as it is
# (FORMATTEST_SOAK_STORE), one window for the whole run; prints one line a run:
# store, keys, database bytes, requests, server CPU per request (us), p50, p99, max (ms).
#
# usage: benchmarks/soak/keys_cpu.sh ROUNDS SECONDS RATE STORE...
#   each STORE made by `formattest-dev simulate backlog --store sqlite:STORE --keys N --signing-keys 64
#   --filler-blobs small --batch 1000000`; FORMATTEST_BINARY as for run.sh; 16 connections.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rounds="$1"; seconds="$2"; rate="$3"; shift 3
for round in $(seq 1 "$rounds"); do
    for store in "$@"; do
        keys=$(sqlite3 "$store" "SELECT count(*) FROM keys")
        bytes=$(stat -c %s "$store")
        line=$(FORMATTEST_SOAK_STORE="$store" FORMATTEST_SOAK_WINDOW="$seconds" FORMATTEST_SOAK_CONNECTIONS=16 \
            FORMATTEST_SOAK_OUT=/dev/null "$here/run.sh" "$seconds" "$rate" 2>/dev/null | tail -1)
        python3 - "$line" "$round" "$(basename "$store")" "$keys" "$bytes" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
cpu = d.get("serverCPUMicrosecondsPerRequest")
print("round %s %s keys %s bytes %s requests %d cpu_us %s p50_ms %.1f p99_ms %.1f max_ms %.1f errors %d" % (
    sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], d["requests"], cpu, d["p50Microseconds"] / 1000,
    d["p99Microseconds"] / 1000, d["maxMicroseconds"] / 1000, d["statusErrors"]))
PY
    done
done

#!/usr/bin/env bash
# The MongoDB path's per-request cost, two builds alternated against one mongoeco server.
#
# usage: benchmarks/mongo/ab.sh OLD_FORMATTEST_DEV NEW_FORMATTEST_DEV [ROUNDS] [SECONDS]
#
# Each round runs `formattest-dev bench --only flow --flow-store URI --duration SECONDS` with each
# binary (old first in odd rounds, new first in even ones, so that drift falls on both), each on a
# fresh bench_* database of the same server. Prints one line per run and the medians: flows/s,
# p50 and p99 (µs, mongoeco's time included) and cpuMicroseconds, this process's CPU per flow
# (user + system, every thread; mongoeco's own CPU is not in it): what the store's codec costs.
# mongoeco (Python, in .venv-mongoeco) is started here and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1
new=$2
rounds=${3:-6}
seconds=${4:-8}
work=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

.venv-mongoeco/bin/python scripts/mongoeco_server.py >"$work/server.out" 2>"$work/server.err" &
server=$!
for _ in $(seq 1 100); do
    grep -q '^URI ' "$work/server.out" 2>/dev/null && break
    sleep 0.1
done
uri=$(sed -n 's/^URI //p' "$work/server.out")
[ -n "$uri" ] || { echo "mongoeco did not start" >&2; cat "$work/server.err" >&2; exit 1; }

run() { # label binary
    "$2" bench --only flow --flow-store "$uri" --duration "$seconds" 2>/dev/null | python3 -c '
import json, sys
label = sys.argv[1]
cases = json.load(sys.stdin)["cases"]
case = next(c for c in cases if c["name"] == "flow.assert.mongodb")
print(json.dumps({"build": label, "flowsPerSecond": round(case["opsPerSecond"], 1), "p50": round(case["p50Microseconds"]),
                  "p99": round(case["p99Microseconds"]), "cpuMicroseconds": round(case["cpuMicroseconds"], 1)}))
' "$1" | tee -a "$work/runs.jsonl"
}

for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then run old "$old"; run new "$new"; else run new "$new"; run old "$old"; fi
done

python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
for build in ("old", "new"):
    mine = [r for r in runs if r["build"] == build]
    print(build, {k: statistics.median(r[k] for r in mine) for k in ("flowsPerSecond", "p50", "p99", "cpuMicroseconds")})
PY

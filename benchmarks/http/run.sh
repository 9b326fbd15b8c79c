#!/usr/bin/env bash
# HTTP load on POST /api/appattest/assert: a release server on SQLite (or MongoDB with
# FORMATTEST_MONGODB_URI), pre-signed forms from `formattest-dev simulate prepare-load`, and a
# generator with one connection per key, so each key's counters arrive in order:
# - `formattest-dev load` (the default): one thread, one event loop for every connection;
# - wrk with assert.lua (FORMATTEST_GENERATOR=wrk): wrk keeps a connection's requests in order
#   only with a thread per connection, and with 16 of them on two cores about half of its CPU went
#   to switching between its own threads (docs/performance.md). The former Python generator,
#   loadgen.py, spent most of a core.
#
# Also, in the same run: `formattest-dev bench --only assertion,jws` for the budget the server's CPU
# per request is compared with (one assertion verification + one JWS signing), the server's CPU
# time over the load from /proc/PID/stat, and its threads' context switches per request (from
# /proc/PID/task/*/status).
#
# usage: benchmarks/http/run.sh [CONNECTIONS] [SECONDS]      (from any directory)
# environment: FORMATTEST_BINARY (a built release formattest; default: build one; the developer
#   tools come from the formattest-dev beside it, built too when it is missing),
#   FORMATTEST_LOAD_RATE (bodies prepared per second of load, default 8000),
#   FORMATTEST_MONGODB_URI (load MongoDB instead of SQLite), FORMATTEST_LOAD_PORT (default 18080),
#   FORMATTEST_PERF (a file: `perf record -g` samples the server over the load into it),
#   FORMATTEST_FLOOR_SECONDS (default 5; 0 skips it: GET /healthz on the same server afterwards, the
#   server's CPU per request of the HTTP stack alone, with wrk),
#   FORMATTEST_GENERATOR (formattest, the default, or wrk),
#   FORMATTEST_SERVE_ARGS (more arguments for serve, split at spaces: the evidence log on, for one).
# Prints progress on stderr and one JSON report on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
connections="${1:-2}"
seconds="${2:-15}"
floor_seconds="${FORMATTEST_FLOOR_SECONDS:-5}"
generator="${FORMATTEST_GENERATOR:-formattest}"
case "$generator" in formattest | wrk) ;; *) echo "FORMATTEST_GENERATOR must be formattest or wrk" >&2; exit 2 ;; esac
rate="${FORMATTEST_LOAD_RATE:-8000}"
port="${FORMATTEST_LOAD_PORT:-18080}"
say() { printf '[http-bench] %s\n' "$*" >&2; }
command -v wrk >/dev/null || { say "wrk is missing (Debian: apt-get install wrk)"; exit 1; }

if [ -n "${FORMATTEST_BINARY:-}" ]; then
    binary="$(cd "$(dirname "$FORMATTEST_BINARY")" && pwd)/$(basename "$FORMATTEST_BINARY")"
else
    say "building the release formattest (swift build -c release) ..."
    (cd "$root" && swift build -c release --product formattest >/dev/null)
    binary="$root/.build/release/formattest"
fi
# The developer tools (bench, simulate): the product's binary contains no simulator.
dev_binary="$(dirname "$binary")/formattest-dev"
if [ ! -x "$dev_binary" ]; then
    say "building the release formattest-dev (swift build -c release) ..."
    (cd "$root" && swift build -c release --product formattest-dev >/dev/null)
    dev_binary="$root/.build/release/formattest-dev"
fi
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
cd "$root"

store="sqlite:$work/store.sqlite"
database=()
if [ -n "${FORMATTEST_MONGODB_URI:-}" ]; then
    store="$FORMATTEST_MONGODB_URI"
    database=(--mongodb-database "load_$$")
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

say "budget: formattest-dev bench --only assertion,jws --duration 2 ..."
"$dev_binary" bench --only assertion,jws --duration 2 > "$work/bench.json"

per_key=$((seconds * rate / connections + 100))
say "preparing $connections keys × $per_key pre-signed bodies ..."
"$dev_binary" simulate root > "$work/root.pem"
"$dev_binary" simulate prepare-load --store "$store" "${database[@]}" --keys "$connections" \
    --per-key "$per_key" --out "$work/bodies.jsonl"
mkdir "$work/bodies"
python3 - "$work/bodies.jsonl" "$work/bodies" <<'PY'
import json, sys
files = {}
for line in open(sys.argv[1]):
    entry = json.loads(line)
    connection = int(entry["connection"])
    if connection not in files:
        files[connection] = open(f"{sys.argv[2]}/bodies-{connection}.json", "w")
    files[connection].write(json.dumps(entry["body"], separators=(",", ":"), ensure_ascii=False) + "\n")
PY

say "starting the server on port $port ..."
"$binary" serve --port "$port" --store "$store" "${database[@]}" --root "$work/root.pem" --data-dir "$work/data" \
    --log-level warning --form-max-age 3600 --insecure-no-caller-auth --rate-limit-assertions-per-user 1000000 --rate-limit-per-address 1000000 \
    ${FORMATTEST_SERVE_ARGS:-} &
server=$!
ready=""
for _ in $(seq 1 150); do
    kill -0 "$server" 2>/dev/null || break
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz')" 2>/dev/null && { ready=1; break; }
    sleep 0.2
done
[ -n "$ready" ] || { say "the server did not start"; exit 1; }

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
# Context switches of all the server's threads (voluntary: a thread blocked or handed off work;
# involuntary: preempted). A thread hand-off is a count, not a time: it compares builds where the
# machine's speed drifts too much for CPU time to show a few percent.
context_switches() { cat /proc/"$server"/task/*/status 2>/dev/null | awk '/_ctxt_switches/ { total += $2 } END { print total + 0 }'; }
say "$generator: $connections connections for $seconds s ..."
ticks_before=$(cpu_ticks)
switches_before=$(context_switches)
# Each thread's CPU (its name, then utime and stime in ticks), for the CPU by kind of thread: the
# event loops, the cooperative pool, NIO's blocking-IO pool (SGLTN-TP: the evidence log's files).
thread_stats() { for stat in /proc/"$server"/task/*/stat; do printf '%s %s\n' "$(basename "$(dirname "$stat")")" "$(cat "$stat" 2>/dev/null)"; done; }
thread_stats > "$work/threads.before"
profiler=""
if [ -n "${FORMATTEST_PERF:-}" ]; then
    perf record -q -F 499 -g -p "$server" -o "$FORMATTEST_PERF" -- sleep "$seconds" 2>/dev/null &
    profiler=$!
fi
# The generator runs under a Python parent that reports its CPU time (user + system, from
# getrusage): it shares the two cores with the server, and its share is part of the figure.
if [ "$generator" = wrk ]; then
    load=(wrk -t "$connections" -c "$connections" -d "${seconds}s" -s "$here/assert.lua" "http://127.0.0.1:$port" -- "$work/bodies")
else
    load=("$dev_binary" load --port "$port" --connections "$connections" --duration "$seconds" --bodies "$work/bodies")
fi
python3 - "$work/load.cpu" "${load[@]}" <<'PY' | tee "$work/load.out" >&2
import resource, subprocess, sys
status = subprocess.run(sys.argv[2:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{usage.ru_utime + usage.ru_stime}\n")
sys.exit(status)
PY
ticks_after=$(cpu_ticks)
switches_after=$(context_switches)
thread_stats > "$work/threads.after"
[ -n "$profiler" ] && wait "$profiler"

# The floor: the same server and connections on GET /healthz (the HTTP stack, the middleware, a
# JSON answer; the store's probe is shared over its interval), for what a request costs before any
# verification, JSON parsing of a form, signing or commit.
floor_ticks=0
floor_requests=0
if [ "$floor_seconds" -gt 0 ]; then
    say "wrk: GET /healthz, $connections connections for $floor_seconds s (the HTTP floor) ..."
    floor_before=$(cpu_ticks)
    floor_requests=$(wrk -t "$connections" -c "$connections" -d "${floor_seconds}s" "http://127.0.0.1:$port/healthz" \
        | awk '/requests in/ { print $1 }')
    floor_ticks=$(($(cpu_ticks) - floor_before))
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work/load.out" "$work/bench.json" "$((ticks_after - ticks_before))" "$(getconf CLK_TCK)" "$connections" \
    "$load_before" "$load_after" "$store" "$work/load.cpu" "$floor_ticks" "${floor_requests:-0}" "$((switches_after - switches_before))" \
    "$generator" "$work/threads.before" "$work/threads.after" <<'PY'
import json, re, sys
load_out, bench_path, ticks, hertz, connections, load_before, load_after, store, load_cpu, floor_ticks, floor_requests, switches, generator, threads_before, threads_after = sys.argv[1:]


def thread_ticks(path):
    """{tid: (name with its number as #N, utime + stime)} from `tid <contents of /proc/PID/task/TID/stat>` lines."""
    threads = {}
    for line in open(path):
        tid, _, stat = line.partition(" ")
        if "(" not in stat:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        threads[tid] = (re.sub(r"\d+$", "N", name), int(fields[11]) + int(fields[12]))
    return threads
result = next(json.loads(line) for line in open(load_out) if line.startswith('{"requests"'))
# `formattest-dev load` reports its CPU over the window (reading and making the requests before it
# are not the load's); wrk's is its whole run, from getrusage.
generator_seconds = result["cpuMicroseconds"] / 1e6 if "cpuMicroseconds" in result else float(open(load_cpu).read())
bench = json.load(open(bench_path))
requests = result["requests"]
seconds = result["durationMicroseconds"] / 1e6
errors = sum(result["errors"].values())
cpu_us = int(ticks) / int(hertz) / requests * 1e6 if requests else None
budget = bench.get("cpuBudgetMicroseconds")
connections = int(connections)
before, after = thread_ticks(threads_before), thread_ticks(threads_after)
by_thread = {}
for tid, (name, used) in after.items():
    by_thread[name] = by_thread.get(name, 0) + used - before.get(tid, (name, 0))[1]
by_thread = {name: round(used / int(hertz) / requests * 1e6, 1) for name, used in sorted(by_thread.items()) if used} if requests else {}
report = {
    "store": "mongodb" if store.startswith("mongodb") else "sqlite",
    "connections": connections,
    "generator": generator,
    "requests": requests,
    "seconds": round(seconds, 2),
    "requestsPerSecond": round(requests / seconds, 1),
    "p50Milliseconds": result["p50Microseconds"] / 1000,
    "p90Milliseconds": result["p90Microseconds"] / 1000,
    "p99Milliseconds": result["p99Microseconds"] / 1000,
    "maxMilliseconds": result["maxMicroseconds"] / 1000,
    "errors": errors,
    "generatorErrors": result["errors"],
    "exhaustedConnections": result["exhaustedConnections"],
    "serverCpuMicrosecondsPerRequest": round(cpu_us, 1) if cpu_us else None,
    "budgetMicroseconds(assertion.verify+jws.sign)": budget,
    "serverCpuPerRequestOverBudget": round(cpu_us / budget, 2) if cpu_us and budget else None,
    "serverContextSwitchesPerRequest": round(int(switches) / requests, 2) if requests else None,
    "generatorCpuMicrosecondsPerRequest": round(generator_seconds / requests * 1e6, 1) if requests else None,
    "floorServerCpuMicrosecondsPerRequest(GET /healthz)":
        round(int(floor_ticks) / int(hertz) / int(floor_requests) * 1e6, 1) if int(floor_requests) else None,
    "serverCpuMicrosecondsPerRequestByThread": by_thread,
    "loadAverageBefore": load_before,
    "loadAverageAfter": load_after,
}
goals = {}
if report["store"] == "sqlite" and connections == 16:
    goals["requestsPerSecond >= 5000"] = report["requestsPerSecond"] >= 5000
    goals["p99 <= 10 ms"] = report["p99Milliseconds"] <= 10
if report["store"] == "sqlite" and connections == 2:
    goals["p99 <= 3 ms"] = report["p99Milliseconds"] <= 3
goals["zero errors"] = errors == 0 and result["exhaustedConnections"] == 0
if report["serverCpuPerRequestOverBudget"] is not None:
    goals["server CPU per request <= 3 x budget"] = report["serverCpuPerRequestOverBudget"] <= 3
report["goals"] = goals
print(json.dumps(report, indent=2))
PY

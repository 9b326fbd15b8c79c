#!/usr/bin/env bash
# The cost of tracing on the HTTP assert (docs/performance.md, "Tracing"), in short alternated
# slices: two servers of the same build run side by side, each on a SQLite store of its own filled
# with the same keys, one without tracing and one with `--otlp-endpoint` to a local OTLP/HTTP
# receiver (e2e/observability/otlp_receiver.py --count-only, which decodes every export). Each
# round loads one server, then the other (off-on, then on-off in the next round), for SECONDS each
# with `formattest-dev soak` at saturation (it signs fresh forms as it sends them; every slice starts
# the keys' counters above the last slice's). Only the loaded server works: the other one idles.
# Per slice: requests/s, p50, p99 and the loaded server's CPU per request (/proc); per round, on
# over off for both; at the end the median of the rounds and their range.
#
# usage: benchmarks/soak/tracing_slices.sh [SECONDS] [ROUNDS] [OUT-DIR]      (default 10 s, 6 rounds)
# environment: FORMATTEST_BINARY (a built release formattest; the formattest-dev beside it is used;
#   default .build/release/formattest), FORMATTEST_SOAK_CONNECTIONS (default 4),
#   FORMATTEST_SOAK_KEYS (default 16), FORMATTEST_SOAK_PORT (the off server's; the on server's is
#   the next one, the receiver's the one after; default 18190).
# Run it at high priority on a shared machine: benchmarks/high-priority.sh -15 benchmarks/soak/tracing_slices.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-10}"
rounds="${2:-6}"
out="${3:-$PWD/tracing-slices}"
connections="${FORMATTEST_SOAK_CONNECTIONS:-4}"
keys="${FORMATTEST_SOAK_KEYS:-16}"
port="${FORMATTEST_SOAK_PORT:-18190}"
binary="${FORMATTEST_BINARY:-$root/.build/release/formattest}"
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
dev_binary="$(dirname "$binary")/formattest-dev"
say() { printf '[tracing] %s\n' "$*" >&2; }
mkdir -p "$out"
rm -f "$out"/slices.jsonl "$out"/spans.jsonl
work=$(mktemp -d)
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"' EXIT

receiver_port=$((port + 2))
"$root/.venv-otlp/bin/python" "$root/e2e/observability/otlp_receiver.py" "$out/spans.jsonl" --port "$receiver_port" --count-only \
    < <(sleep 86400) > /dev/null &
pids+=($!)
"$dev_binary" simulate root > "$work/root.pem"

declare -A server_pid database
for mode in off on; do
    database[$mode]="$work/$mode.sqlite"
    "$dev_binary" simulate backlog --store "sqlite:${database[$mode]}" --keys "$keys" --signing-keys "$keys" --expired-forms 0 >&2
    extra=()
    [ "$mode" = on ] && extra=(--otlp-endpoint "http://127.0.0.1:$receiver_port")
    mode_port=$port
    [ "$mode" = on ] && mode_port=$((port + 1))
    "$binary" serve --port "$mode_port" --store "sqlite:${database[$mode]}" --root "$work/root.pem" --data-dir "$work/data-$mode" \
        --insecure-no-caller-auth --log-level notice --form-max-age 60 --form-max-skew 5 \
        --rate-limit-per-address 1000000 --rate-limit-assertions-per-user 1000000 "${extra[@]}" 2> "$work/server-$mode.log" &
    server_pid[$mode]=$!
    pids+=($!)
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$mode_port") 2>/dev/null && break
        sleep 0.1
    done
done

slice=0
# One slice on MODE: soak at saturation for SECONDS, one window; its line goes to slices.jsonl.
run_slice() {
    local mode="$1" round="$2" mode_port=$port
    [ "$mode" = on ] && mode_port=$((port + 1))
    slice=$((slice + 1))
    "$dev_binary" soak --port "$mode_port" --keys "$keys" --connections "$connections" --duration "$seconds" --window "$seconds" \
        --first-counter $((slice * 1000000 + 1)) --server-pid "${server_pid[$mode]}" --database "${database[$mode]}" \
        | python3 -c '
import json, sys
mode, round_ = sys.argv[1], int(sys.argv[2])
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        row.update({"mode": mode, "round": round_})
        print(json.dumps(row))
' "$mode" "$round" >> "$out/slices.jsonl"
}

say "warm-up: one slice on each server (not counted)"
run_slice off 0
run_slice on 0
for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order=(off on); else order=(on off); fi
    for mode in "${order[@]}"; do
        say "round $round: $mode, ${seconds}s"
        run_slice "$mode" "$round"
    done
done
sleep 6  # the exporter's last batch
python3 - "$out/slices.jsonl" "$out/spans.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
spans = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
measured = [r for r in rows if r["round"] > 0]
def figure(mode, key):
    return [r[key] for r in measured if r["mode"] == mode and r.get(key) is not None]
for row in measured:
    print(json.dumps({k: row.get(k) for k in ("round", "mode", "requests", "requestsPerSecond", "p50Microseconds", "p99Microseconds",
                                             "serverCPUMicrosecondsPerRequest", "generatorCPUMicrosecondsPerRequest", "statusErrors")}))
rounds = sorted({r["round"] for r in measured})
def ratios(key):
    values = []
    for n in rounds:
        off = [r[key] for r in measured if r["round"] == n and r["mode"] == "off"]
        on = [r[key] for r in measured if r["round"] == n and r["mode"] == "on"]
        if off and on and off[0]:
            values.append(on[0] / off[0])
    return values
summary = {}
for key in ("serverCPUMicrosecondsPerRequest", "requestsPerSecond", "p50Microseconds", "p99Microseconds"):
    values = ratios(key)
    if values:
        summary[key] = {
            "offMedian": statistics.median(figure("off", key)), "onMedian": statistics.median(figure("on", key)),
            "onOverOffMedian": round(statistics.median(values), 3),
            "onOverOffMinimum": round(min(values), 3), "onOverOffMaximum": round(max(values), 3),
        }
on_requests = sum(r["requests"] for r in rows if r["mode"] == "on")
summary["rounds"] = len(rounds)
summary["statusErrors"] = sum(r["statusErrors"] for r in rows)
summary["spansPerTracedRequest"] = round(sum(s["spans"] for s in spans) / on_requests, 2) if on_requests else None
summary["otlpBytesPerTracedRequest"] = round(sum(s["bytes"] for s in spans) / on_requests) if on_requests else None
print(json.dumps({"summary": summary}))
PY

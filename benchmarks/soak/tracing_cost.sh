#!/usr/bin/env bash
# The cost of tracing (docs/performance.md, "Tracing"): soak runs of the same build alternated,
# without tracing and with `--otlp-endpoint` to a local OTLP/HTTP receiver
# (e2e/observability/otlp_receiver.py --count-only, which decodes each export and counts its spans).
#
# usage: benchmarks/soak/tracing_cost.sh [SECONDS] [ROUNDS] [OUT-DIR]
# environment: as benchmarks/soak/run.sh (FORMATTEST_BINARY, FORMATTEST_SOAK_*); the receiver's
#   Python is .venv-otlp's (scripts/setup).
# Writes OUT-DIR/off-N.jsonl and OUT-DIR/on-N.jsonl (the soak's JSON lines) and OUT-DIR/spans.jsonl
# (the receiver's counts), and prints one summary line a run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-60}"
rounds="${2:-2}"
out="${3:-$PWD/tracing-cost}"
mkdir -p "$out"
receiver_port="${FORMATTEST_OTLP_PORT:-14318}"
"$root/.venv-otlp/bin/python" "$root/e2e/observability/otlp_receiver.py" "$out/spans.jsonl" --port "$receiver_port" --count-only \
    < <(sleep $(( (seconds + 120) * rounds * 2 ))) > /dev/null &
receiver=$!
trap 'kill "$receiver" 2>/dev/null || true' EXIT
summary() {
    # The run's windows but the first (warm-up): requests/s, median p50, worst p99, server CPU per request.
    python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][1:]
cpu = [r["serverCPUMicrosecondsPerRequest"] for r in rows if r.get("serverCPUMicrosecondsPerRequest")]
print(json.dumps({
    "run": sys.argv[1].rsplit("/", 1)[-1], "windows": len(rows),
    "requestsPerSecond": round(statistics.mean(r["requestsPerSecond"] for r in rows), 1),
    "p50Microseconds": statistics.median(r["p50Microseconds"] for r in rows),
    "p99Microseconds": max(r["p99Microseconds"] for r in rows),
    "serverCPUMicrosecondsPerRequest": round(statistics.mean(cpu)) if cpu else None,
    "statusErrors": sum(r["statusErrors"] for r in rows),
}))
PY
}
for round in $(seq 1 "$rounds"); do
    FORMATTEST_SOAK_OUT="$out/off-$round.jsonl" FORMATTEST_SERVE_EXTRA="" bash "$here/run.sh" "$seconds" 0 2>/dev/null >/dev/null
    summary "$out/off-$round.jsonl"
    FORMATTEST_SOAK_OUT="$out/on-$round.jsonl" FORMATTEST_SERVE_EXTRA="--otlp-endpoint http://127.0.0.1:$receiver_port" \
        bash "$here/run.sh" "$seconds" 0 2>/dev/null >/dev/null
    summary "$out/on-$round.jsonl"
done

#!/usr/bin/env bash
# The batch measurements of docs/performance.md ("Batch: wrap --batch over every core", issue 33),
# on a release build: lines/s and peak memory of `formattest wrap --batch --out FILE` over N
# simulated lines that verify, the same at N/10 lines (memory must not grow with the input), then
# the same N-line command killed with SIGKILL halfway and run again: it must report every line
# (resumed + done = N, failed 0) and leave an output byte-identical to the uninterrupted run's.
# The cryptographic limit to compare with comes from `formattest-dev bench --only batch` (run it
# just before or after, see docs/performance.md).
#
# usage: benchmarks/batch/run.sh [LINES]              (default 100000)
# environment: FORMATTEST_BINARY (a built release formattest; the formattest-dev beside it is used),
#   FORMATTEST_BATCH_WORK (a directory kept for inspection; default a temporary one, removed).
# Run it at high priority on a shared machine: nice -n -15 benchmarks/batch/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lines="${1:-100000}"
binary="${FORMATTEST_BINARY:-$root/.build/release/formattest}"
dev_binary="$(dirname "$binary")/formattest-dev"
say() { printf '[batch] %s\n' "$*" >&2; }
if [ -n "${FORMATTEST_BATCH_WORK:-}" ]; then
    work="$FORMATTEST_BATCH_WORK"
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
small=$((lines / 10))

"$dev_binary" simulate root > "$work/root.pem"
say "generating $lines and $small lines (simulate batch-input, 16 keys, at the real now)"
"$dev_binary" simulate batch-input --count "$lines" --out "$work/in-$lines.jsonl"
"$dev_binary" simulate batch-input --count "$small" --out "$work/in-$small.jsonl"

# One run under /usr/bin/time -v: prints lines/s, wall, CPU and peak RSS as one JSON line.
measure() {
    local count="$1" input="$2" out="$3"
    /usr/bin/time -v -o "$work/time-$count.txt" "$binary" wrap --batch "$input" --out "$out" --root "$work/root.pem" \
        > "$work/summary-$count.json"
    python3 - "$count" "$work/time-$count.txt" "$work/summary-$count.json" <<'EOF'
import json, re, sys
count, timing, summary = int(sys.argv[1]), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
def field(name):
    return re.search(re.escape(name) + r": (.*)", timing).group(1).strip()
wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
seconds = sum(float(part) * 60 ** index for index, part in enumerate(reversed(wall)))
print(json.dumps({
    "lines": count, "wrapped": summary.get("wrapped"), "failed": summary.get("failed"),
    "wallSeconds": round(seconds, 2), "linesPerSecond": round(count / seconds, 1),
    "userSeconds": float(field("User time (seconds)")), "systemSeconds": float(field("System time (seconds)")),
    "peakRSSKiB": int(field("Maximum resident set size (kbytes)")),
}))
EOF
}

say "wrap --batch over $small lines"
measure "$small" "$work/in-$small.jsonl" "$work/out-$small.jsonl"
say "wrap --batch over $lines lines (the reference output)"
measure "$lines" "$work/in-$lines.jsonl" "$work/reference.jsonl"

say "the same, killed with SIGKILL once half the records are out, then run again"
"$binary" wrap --batch "$work/in-$lines.jsonl" --out "$work/resumed.jsonl" --root "$work/root.pem" > /dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
    done_lines=0
    [ -f "$work/resumed.jsonl" ] && done_lines=$(wc -l < "$work/resumed.jsonl")
    [ "$done_lines" -ge $((lines / 2)) ] && break
    sleep 0.05
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
before=$(wc -l < "$work/resumed.jsonl")
"$binary" wrap --batch "$work/in-$lines.jsonl" --out "$work/resumed.jsonl" --root "$work/root.pem" > "$work/summary-resumed.json"
python3 - "$lines" "$before" "$work/summary-resumed.json" "$work/reference.jsonl" "$work/resumed.jsonl" <<'EOF'
import json, sys
lines, before = int(sys.argv[1]), int(sys.argv[2])
summary = json.load(open(sys.argv[3]))
reference, resumed = open(sys.argv[4], "rb").read(), open(sys.argv[5], "rb").read()
records = resumed.count(b"\n")
print(json.dumps({
    "killedAfterRecords": before, "resumed": summary.get("resumed"), "total": summary.get("total"),
    "wrapped": summary.get("wrapped"), "failed": summary.get("failed"), "records": records,
    "identicalToUninterrupted": reference == resumed,
}))
ok = summary.get("total") == lines and summary.get("wrapped") == lines and records == lines and reference == resumed
sys.exit(0 if ok else 1)
EOF

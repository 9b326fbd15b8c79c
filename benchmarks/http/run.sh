#!/usr/bin/env bash
# HTTP load on POST /api/appattest/assert: a release server on SQLite (or MongoDB with
# FORMATTEST_MONGODB_URI), pre-signed forms from `formattest simulate prepare-load`, and
# loadgen.py in a second process with one connection per key.
# usage: benchmarks/http/run.sh [CONNECTIONS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
connections="${1:-2}"
seconds="${2:-15}"
swift build -c release --product formattest >/dev/null
binary=.build/release/formattest
work=$(mktemp -d)
store="sqlite:$work/store.sqlite"
database=()
if [ -n "${FORMATTEST_MONGODB_URI:-}" ]; then
    store="$FORMATTEST_MONGODB_URI"
    database=(--mongodb-database "load_$$")
fi
"$binary" simulate root > "$work/root.pem"
"$binary" simulate prepare-load --store "$store" "${database[@]}" --keys "$connections" \
    --per-key $((seconds * 1600 / connections)) --out "$work/bodies.jsonl"
"$binary" serve --port 18080 --store "$store" "${database[@]}" --root "$work/root.pem" --data-dir "$work/data" \
    --log-level warning --form-max-age 3600 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18080/healthz')" 2>/dev/null && break
    sleep 0.2
done
python3 benchmarks/http/loadgen.py --url http://127.0.0.1:18080 --bodies "$work/bodies.jsonl" --duration "$seconds" --rss-pid "$server"

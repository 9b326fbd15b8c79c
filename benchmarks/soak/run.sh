#!/usr/bin/env bash
# The soak benchmark (docs/performance.md, "Sustained operation"): a release server on SQLite
# with a short form window, so that replay records expire and are purged during the run, under
# `formattest-dev soak`, which signs fresh forms as it goes. Optionally starts from a backlog of
# expired records (the purge's worst case) and a store of many keys.
#
# usage: benchmarks/soak/run.sh [SECONDS] [RATE]       RATE 0 (default): saturation
# environment: FORMATTEST_BINARY (a built release formattest; the formattest-dev beside it is used),
#   FORMATTEST_SOAK_KEYS (the keys that sign, default 64), FORMATTEST_SOAK_STORE_KEYS (keys in the
#   store, default FORMATTEST_SOAK_KEYS: the rest are fillers that never sign),
#   FORMATTEST_SOAK_FILLER_BLOBS (full, the default: the fillers carry real-size registration
#   blobs; small: 64 bytes, so that 10^7 keys fit the disk), FORMATTEST_SOAK_BACKLOG (expired replay
#   records to start with, default 0), FORMATTEST_SOAK_CONNECTIONS (default 4),
#   FORMATTEST_SOAK_WINDOW (seconds per reported line, default 60), FORMATTEST_SOAK_FORM_MAX_AGE
#   (the form window in seconds, default 60), FORMATTEST_SOAK_OUT (the JSON lines, default
#   ./soak.jsonl), FORMATTEST_SOAK_PORT (default 18090), FORMATTEST_SERVE_EXTRA (more serve
#   arguments, split on spaces: `--otlp-endpoint http://127.0.0.1:4318` for the tracing cost),
#   FORMATTEST_SOAK_LOG_LEVEL (the server's, default notice; debug logs every request, purge step
#   and checkpoint, in JSON lines: benchmarks/soak/stalls.py sets them side by side),
#   FORMATTEST_SOAK_SERVER_LOG (where to keep the server's log; by default it goes with the run),
#   FORMATTEST_SOAK_STORE (a store filled before by `simulate backlog`, used in place and not filled:
#   the signing keys' counters are set back to 0 and the replay records deleted first, so that one
#   large store serves several runs; FORMATTEST_SOAK_STORE_KEYS, _BACKLOG and _FILLER_BLOBS are then
#   ignored).
# The per-user assertion budget (issue 31, 60 a window by default) is lifted: this is load from a
# few keys of one user, not a hostile user.
# Prints the server's purge log lines on stderr at the end; plot with benchmarks/soak/plot.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-600}"
rate="${2:-0}"
keys="${FORMATTEST_SOAK_KEYS:-64}"
store_keys="${FORMATTEST_SOAK_STORE_KEYS:-$keys}"
filler_blobs="${FORMATTEST_SOAK_FILLER_BLOBS:-full}"
backlog="${FORMATTEST_SOAK_BACKLOG:-0}"
connections="${FORMATTEST_SOAK_CONNECTIONS:-4}"
window="${FORMATTEST_SOAK_WINDOW:-60}"
max_age="${FORMATTEST_SOAK_FORM_MAX_AGE:-60}"
out="${FORMATTEST_SOAK_OUT:-$PWD/soak.jsonl}"
port="${FORMATTEST_SOAK_PORT:-18090}"
say() { printf '[soak] %s\n' "$*" >&2; }

if [ -n "${FORMATTEST_BINARY:-}" ]; then
    binary="$(cd "$(dirname "$FORMATTEST_BINARY")" && pwd)/$(basename "$FORMATTEST_BINARY")"
else
    say "building the release binaries (swift build -c release) ..."
    (cd "$root" && swift build -c release --product formattest >/dev/null && swift build -c release --product formattest-dev >/dev/null)
    binary="$root/.build/release/formattest"
fi
dev_binary="$(dirname "$binary")/formattest-dev"
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
database="$work/store.sqlite"

if [ -n "${FORMATTEST_SOAK_STORE:-}" ]; then
    database="$FORMATTEST_SOAK_STORE"
    say "using the store $database as it is (the $keys signing keys' counters back to 0, replay records deleted)"
    sqlite3 "$database" "UPDATE keys SET counter = 0, counter_form_hash = NULL WHERE username IN ($(seq -s, -f "'backlog-%.0f'" 0 $((keys - 1))))" \
        "DELETE FROM form_hashes" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
else
    say "filling the store: $store_keys keys ($keys signing, fillers' blobs $filler_blobs), $backlog expired replay records"
    "$dev_binary" simulate backlog --store "sqlite:$database" --keys "$store_keys" --signing-keys "$keys" --filler-blobs "$filler_blobs" \
        --expired-forms "$backlog" >&2
fi
"$dev_binary" simulate root > "$work/root.pem"

"$binary" serve --port "$port" --store "sqlite:$database" --root "$work/root.pem" --data-dir "$work" \
    --insecure-no-caller-auth --log-level "${FORMATTEST_SOAK_LOG_LEVEL:-notice}" --log-format json \
    --form-max-age "$max_age" --form-max-skew 5 \
    --rate-limit-per-address 1000000 --rate-limit-assertions-per-user 1000000 \
    ${FORMATTEST_SERVE_EXTRA:-} 2> "$work/server.log" &
server=$!
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

say "soak: ${seconds}s, rate ${rate} (0: saturation), $connections connections, form window ${max_age}s"
"$dev_binary" soak --port "$port" --keys "$keys" --connections "$connections" --duration "$seconds" --rate "$rate" \
    --window "$window" --server-pid "$server" --database "$database" | tee "$out"
kill "$server"
wait "$server" 2>/dev/null || true
server=""
grep "purged expired records" "$work/server.log" >&2 || say "no purge pass logged"
if [ -n "${FORMATTEST_SOAK_SERVER_LOG:-}" ]; then
    cp "$work/server.log" "$FORMATTEST_SOAK_SERVER_LOG"
    say "kept the server's log in $FORMATTEST_SOAK_SERVER_LOG"
fi
say "wrote $out"

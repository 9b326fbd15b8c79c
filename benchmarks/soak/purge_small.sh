#!/usr/bin/env bash
# SustainedOperationTests.backlogPurgedUnderLoad by hand, on the binaries in BINDIR (docs/performance.md,
# "Sustained operation"): a store with 60,000 expired replay records and 5,000 expired challenges,
# 300 forms over 2 connections while the service (purge every 0.5 s) works the backlog off; prints
# load's report, the WAL's size once nothing expired is left, and the purge's log line.
#
# usage: benchmarks/soak/purge_small.sh BINDIR [PORT]     (BINDIR holds formattest and formattest-dev)
set -euo pipefail
bin="$1"; port="${2:-18433}"
w=$(mktemp -d); db="$w/store.sqlite"; trap 'rm -rf "$w"' EXIT
"$bin/formattest-dev" simulate root > "$w/root.pem"
"$bin/formattest-dev" simulate backlog --store "sqlite:$db" --keys 3 --expired-forms 60000 --challenges 5000 > /dev/null
"$bin/formattest-dev" simulate prepare-load --store "sqlite:$db" --keys 2 --per-key 150 --seed 7 --out "$w/bodies.jsonl" > /dev/null
mkdir -p "$w/bodies"
python3 - "$w" <<'PY'
import json, sys, collections
w = sys.argv[1]; per = collections.defaultdict(list)
for line in open(f"{w}/bodies.jsonl"):
    e = json.loads(line); per[e["connection"]].append(json.dumps(e["body"], sort_keys=True, separators=(",", ":")))
for c, lines in per.items():
    open(f"{w}/bodies/bodies-{c}.json", "w").write("\n".join(lines) + "\n")
PY
ls -la "$db-wal" 2>/dev/null || echo "no wal before serve"
"$bin/formattest" serve --port $port --store "sqlite:$db" --root "$w/root.pem" --data-dir "$w" --log-level notice --form-max-age 3600 \
  --insecure-no-caller-auth --purge-interval 0.5 --rate-limit-assertions-per-user 100000 --rate-limit-per-address 1000000 2> "$w/server.log" &
srv=$!
for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
"$bin/formattest-dev" load --port $port --connections 2 --duration 120 --bodies "$w/bodies"
for i in $(seq 1 600); do
  n=$(sqlite3 "$db" "SELECT (SELECT count(*) FROM form_hashes WHERE expires_at <= $(date +%s)) + (SELECT count(*) FROM challenges WHERE expires_at <= $(date +%s))")
  [ "$n" = 0 ] && break; sleep 0.2
done
echo "expired left: $n; WAL bytes: $(stat -c %s "$db-wal")"
kill $srv; wait $srv || true
grep "purged expired records" "$w/server.log"

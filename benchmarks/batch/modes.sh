#!/usr/bin/env bash
# The same input through every output mode of `formattest wrap --batch` (issue 33): --out FILE,
# --out - and --out-dir give byte-identical tokens for every line, apart from the server-signed
# JWS's `jti` (a random id) and its ECDSA signature (randomized), which are random by design and
# are compared with those two taken out (they must differ between runs). The FIDO2 wrapper is
# compared whole. BatchScaleTests.everyOutputMode checks the same on 120 lines.
#
# usage: benchmarks/batch/modes.sh [LINES]        (default 2000)
# environment: FORMATTEST_BINARY (a built release formattest; the formattest-dev beside it is used).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lines="${1:-2000}"
binary="${FORMATTEST_BINARY:-$root/.build/release/formattest}"
dev_binary="$(dirname "$binary")/formattest-dev"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$dev_binary" simulate root > "$work/root.pem"
"$dev_binary" simulate batch-input --count "$lines" --format fido2 --format jws --out "$work/in.jsonl"
"$binary" keys generate --data-dir "$work/data" > /dev/null
options=(--root "$work/root.pem" --data-dir "$work/data")
"$binary" wrap --batch "$work/in.jsonl" --out "$work/file.jsonl" "${options[@]}" > /dev/null
"$binary" wrap --batch "$work/in.jsonl" --out - "${options[@]}" > "$work/stdout.jsonl" 2> /dev/null
"$binary" wrap --batch "$work/in.jsonl" --out-dir "$work/dir" "${options[@]}" > /dev/null
python3 - "$lines" "$work" <<'EOF'
import base64, json, os, sys
lines, work = int(sys.argv[1]), sys.argv[2]

def tokens(record):
    """The record's tokens exactly as written (the last member)."""
    marker = '"tokens":'
    return record[record.index(marker) + len(marker):-1]

def normalized(text):
    """The tokens with the JWS's jti and signature taken out; those two apart."""
    marker = '"serverAttestation":"'
    start = text.index(marker) + len(marker)
    end = text.index('"', start)
    header, payload, signature = text[start:end].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    jti = claims.pop("jti")
    return text[:start] + header + "|" + json.dumps(claims, sort_keys=True) + text[end:], (jti, signature)

file_records = open(f"{work}/file.jsonl").read().splitlines()
stdout_records = open(f"{work}/stdout.jsonl").read().splitlines()
assert len(file_records) == len(stdout_records) == lines, (len(file_records), len(stdout_records))
identical = random_differs = 0
for a, b in zip(file_records, stdout_records):
    name = json.loads(a)["name"]
    from_dir = open(f"{work}/dir/{name}.json").read().rstrip("\n")
    (ta, ra), (tb, rb), (tc, rc) = normalized(tokens(a)), normalized(tokens(b)), normalized(from_dir)
    identical += ta == tb == tc
    random_differs += ra[0] != rb[0] != rc[0] and ra[1] != rb[1] != rc[1]
files = len([f for f in os.listdir(f"{work}/dir") if not f.startswith(".")])
print(json.dumps({"lines": lines, "filesInOutDir": files, "identicalButJtiAndSignature": identical, "jtiAndSignatureDiffer": random_differs}))
sys.exit(0 if identical == random_differs == files == lines else 1)
EOF

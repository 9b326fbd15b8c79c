#!/usr/bin/env bash
# Measures the peers (pyattest, rfc8785) in a venv, then FormAttest's release build, on the same
# inputs and machine. usage: benchmarks/peers/run.sh [SECONDS_PER_CASE]
set -euo pipefail
cd "$(dirname "$0")/../.."
duration="${1:-3}"
if [ ! -x .venv-peers/bin/python ]; then
    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -q "rfc8785==0.1.4" "pyattest==1.0.5"
fi
echo "== peers"
.venv-peers/bin/python benchmarks/peers/bench_peers.py --duration "$duration"
echo "== formattest (release)"
swift build -c release --product formattest-dev >/dev/null
.build/release/formattest-dev bench --duration "$duration"

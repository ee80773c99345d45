#!/usr/bin/env bash
# Replicated throughput, latency, CPU and memory, sluice against Apache Kafka, three nodes each (bench/replicated.py).
#   bench/replicated.sh [--rounds N] [--records N] [--out FILE]
# Uses target/release/sluice (SLUICE_BIN), building it if missing; creates .cache/venv
# (tests/clients/requirements.txt) and fetches the Kafka jars first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/tests/clients/venv.sh"
"$ROOT/compat/kafka/fetch.sh" >/dev/null
[[ -x "${SLUICE_BIN:-target/release/sluice}" ]] || cargo build --release
exec "$VENV/bin/python" "$ROOT/bench/replicated.py" "$@"

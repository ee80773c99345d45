#!/usr/bin/env bash
# Replicated throughput, latency, CPU and memory, sluice against Apache Kafka, three nodes each (bench/replicated.py).
#   bench/replicated.sh [--rounds N] [--records N] [--out FILE]
# Installs librdkafka-dev if missing (apt) and builds .cache/rdkbench; uses target/release/sluice
# (SLUICE_BIN), building it if missing; creates .cache/venv (tests/clients/requirements.txt) and
# fetches the Kafka jars first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if ! dpkg -s librdkafka-dev >/dev/null 2>&1; then
  echo "replicated.sh: installing librdkafka-dev (apt)" >&2
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq librdkafka-dev >&2
fi
mkdir -p .cache
if [[ ! -x .cache/rdkbench || bench/rdkbench.c -nt .cache/rdkbench ]]; then
  cc -O2 -Wall -o .cache/rdkbench bench/rdkbench.c -lrdkafka -lpthread
fi
source "$ROOT/tests/clients/venv.sh"
"$ROOT/compat/kafka/fetch.sh" >/dev/null
[[ -x "${SLUICE_BIN:-target/release/sluice}" ]] || cargo build --release
exec "$VENV/bin/python" "$ROOT/bench/replicated.py" "$@"

#!/usr/bin/env bash
# Replay the golden client conversations and the edge cases against a freshly started
# Apache Kafka (compat/kafka/kafka-ref.sh) and a freshly started sluice, and compare the
# decoded responses field by field. Exit status 1 on any mismatch.
#   protocol-tests/run.sh [replay.py args...]     e.g. --only edge, -v
# Env: SLUICE_BIN (default target/release/sluice), PYTHON (to create .cache/venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v java >/dev/null || { echo "protocol-tests: java (17+) is needed to run Apache Kafka" >&2; exit 1; }
source "$ROOT/tests/clients/venv.sh"
"$ROOT/compat/kafka/fetch.sh" >/dev/null
export SLUICE_BIN="${SLUICE_BIN:-$ROOT/target/release/sluice}"
[[ -x "$SLUICE_BIN" ]] || { echo "protocol-tests: no sluice binary at $SLUICE_BIN (cargo build --release)" >&2; exit 1; }
exec "$VENV/bin/python" "$ROOT/protocol-tests/replay.py" --sluice-bin "$SLUICE_BIN" "$@"

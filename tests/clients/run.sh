#!/usr/bin/env bash
# Run the client compatibility suite.
#   tests/clients/run.sh [pytest args...]
# Env: TARGET=sluice|kafka (default sluice), SLUICE_BIN (default target/release/sluice),
#      KAFKA_VERSION (jars for kafka-ref / kafka-dump-log), SLUICE_ONLY_SELFCHECK=1.
# Creates .cache/venv, installs tests/clients/requirements.txt, fetches the Kafka jars
# (needed for TARGET=kafka, kafka-dump-log and the Kafka-log-dir test), then runs pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tests/clients/venv.sh"
"$ROOT/compat/kafka/fetch.sh" >/dev/null
# default to the whole suite unless a test path is given
for a in "$@"; do
  if [[ "$a" != -* && -e "${a%%::*}" ]]; then
    exec "$VENV/bin/pytest" -q -p no:cacheprovider "$@"
  fi
done
exec "$VENV/bin/pytest" "$ROOT/tests/clients" -q -p no:cacheprovider "$@"

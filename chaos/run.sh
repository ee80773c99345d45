#!/usr/bin/env bash
# Jepsen-style fault runs against a real 3-node cluster (chaos/README.md).
#   chaos/run.sh [run.py args...]   one run (chaos/run.py --help)
#   chaos/run.sh ci                 what `make test` runs: the checker's own tests, every fault
#                                   on sluice and on Apache Kafka with acks=all (no anomaly
#                                   allowed), and sluice with acks=1 and stranded leaders (the
#                                   checker must find lost writes)
# Creates .cache/venv (tests/clients/requirements.txt) and fetches the Kafka jars first.
# Env: CHAOS_CI_SECONDS (default 90), the length of each of ci's acks=all runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/tests/clients/venv.sh"
"$ROOT/compat/kafka/fetch.sh" >/dev/null
PY="$VENV/bin/python"
if [[ "${1:-}" != ci ]]; then
  exec "$PY" "$ROOT/chaos/run.py" "$@"
fi

secs="${CHAOS_CI_SECONDS:-90}"
out="$(mktemp -d /tmp/sluice-chaos-ci-XXXXXX)"
(cd "$ROOT/chaos" && "$PY" -m pytest -q -p no:cacheprovider test_checker.py)
if [[ "$(id -u)" != 0 ]]; then
  echo "chaos/run.sh ci: not root, so no network namespaces: these runs leave out the partition faults" >&2
fi
run() { # name, run.py args...
  local name="$1"; shift
  echo "== chaos: $name"
  if ! "$PY" "$ROOT/chaos/run.py" --summary "$out/$name.json" "$@" >"$out/$name.log" 2>&1; then
    grep -v '^%' "$out/$name.log" | tail -n 60 >&2
    echo "chaos/run.sh ci: '$name' failed (log: $out/$name.log)" >&2
    exit 1
  fi
  grep -E "OK:|self-check:" "$out/$name.log"
}
run sluice-acks-all --target sluice --duration "$secs" --seed 1
run sluice-acks1-stranded --target sluice --duration 40 --acks 1 --faults strand-leader --seed 2 --expect-loss
run kafka-acks-all --target kafka --duration "$secs" --seed 1
rm -rf "$out"

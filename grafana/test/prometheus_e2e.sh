#!/usr/bin/env bash
# Starts sluice and a real Prometheus (Debian's package) on loopback, drives produce/consume load,
# then evaluates every expression used in grafana/dashboards and grafana/alerts.yml through
# Prometheus's HTTP API and checks each returns series with sane values.
#
#   grafana/test/prometheus_e2e.sh            # uses $SLUICE_BIN or target/{release,debug}/sluice
#   LOAD_SECONDS=40 grafana/test/prometheus_e2e.sh
#
# Needs: prometheus (installed with apt-get if missing), python3 with confluent-kafka
# ($PYTHON, default the repo venv .cache/venv).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    echo "installing Debian's prometheus package"
    if ! apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; then
        apt-get update >/dev/null
        apt-get install -y --no-install-recommends prometheus >/dev/null
    fi
fi

if [[ -z "${SLUICE_BIN:-}" ]]; then
    for b in "$repo/target/release/sluice" "$repo/target/debug/sluice"; do
        if [[ -x "$b" ]]; then SLUICE_BIN="$b"; break; fi
    done
fi
[[ -x "${SLUICE_BIN:-}" ]] || { echo "no sluice binary: build it or set SLUICE_BIN" >&2; exit 2; }

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for p in "$repo/.cache/venv/bin/python" python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import confluent_kafka' 2>/dev/null; then PYTHON="$p"; break; fi
    done
fi
[[ -n "$PYTHON" ]] || { echo "no python with confluent-kafka: set PYTHON" >&2; exit 2; }

echo "promtool: checking and unit-testing the alert rules"
(cd "$repo/grafana" && promtool check rules alerts.yml && promtool test rules alerts_test.yml)

export SLUICE_BIN
exec "$PYTHON" "$here/prometheus_e2e.py" "$repo"

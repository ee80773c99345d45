#!/usr/bin/env bash
# make bench: sluice vs Apache Kafka side by side, A B A B, medians -> bench/RESULTS.md + results.png
#
#   bench/run.sh                 smoke sizes (a few minutes)
#   BENCH_FULL=1 bench/run.sh    the sizes of issue 6 (2 GiB per produce run, 10,000 partitions)
#   BENCH_REPORT_ONLY=1 bench/run.sh   regenerate RESULTS.md/results.png from bench/results.json
#
# Knobs (env): see bench/README.md. Installs what it needs on a fresh Debian machine:
# apt (librdkafka-dev, iperf3, gcc, taskset), Kafka jars from Maven Central (compat/kafka/fetch.sh),
# a venv with matplotlib + confluent-kafka from PyPI under .cache/bench-venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="$ROOT/.cache/bench"
VENV="$ROOT/.cache/bench-venv"
mkdir -p "$CACHE"

need_pkgs=()
for p in librdkafka-dev iperf3 gcc util-linux pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
command -v java >/dev/null || need_pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need_pkgs+=(maven)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
if ((${#need_pkgs[@]})); then
  echo "bench: installing ${need_pkgs[*]} (apt)" >&2
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >&2
fi

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import matplotlib, confluent_kafka' 2>/dev/null; then
  echo "bench: creating $VENV (matplotlib, confluent-kafka)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q matplotlib confluent-kafka >&2
fi

if [[ -n "${BENCH_OUT_DIR:-}" ]]; then
  mkdir -p "$BENCH_OUT_DIR"
  BENCH_OUT_DIR="$(cd "$BENCH_OUT_DIR" && pwd)"
  export BENCH_OUT_DIR
fi

if [[ "${BENCH_REPORT_ONLY:-0}" == "1" ]]; then
  exec "$VENV/bin/python" "$HERE/report.py"
fi

RDK="$CACHE/rdkbench"
if [[ ! -x "$RDK" || "$HERE/rdkbench.c" -nt "$RDK" ]]; then
  cc -O2 -Wall -o "$RDK" "$HERE/rdkbench.c" -lrdkafka -lpthread
fi
FETCHBENCH="$CACHE/fetchbench"
if [[ ! -x "$FETCHBENCH" || "$HERE/fetchbench.c" -nt "$FETCHBENCH" ]]; then
  cc -O2 -Wall -Wextra -o "$FETCHBENCH" "$HERE/fetchbench.c"
fi

LIBS="$("$ROOT/compat/kafka/fetch.sh" | tail -n 1)"

SLUICE_BIN="${SLUICE_BIN:-$ROOT/target/release/sluice}"
[[ "$SLUICE_BIN" = /* ]] || SLUICE_BIN="$ROOT/$SLUICE_BIN"
if [[ ! -x "$SLUICE_BIN" ]]; then
  (cd "$ROOT" && cargo build --release)
fi
# Work on a private copy: target/ may be rebuilt while the benchmark runs.
SNAP="$CACHE/sluice-under-test"
cp "$SLUICE_BIN" "$SNAP.tmp" && mv "$SNAP.tmp" "$SNAP"
commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [[ -n "$(git -C "$ROOT" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null)" ]]; then commit="$commit+dirty-src"; fi
commit="$commit (binary built $(date -u -r "$SLUICE_BIN" '+%Y-%m-%d %H:%M UTC'))"

if (( $(nproc) >= 2 )); then : "${BENCH_BROKER_CPUS:=0}" "${BENCH_CLIENT_CPUS:=1}"; else : "${BENCH_BROKER_CPUS:=0}" "${BENCH_CLIENT_CPUS:=0}"; fi
export BENCH_BROKER_CPUS BENCH_CLIENT_CPUS
export BENCH_RDKBENCH="$RDK" BENCH_FETCHBENCH="$FETCHBENCH" BENCH_SLUICE="$SNAP" BENCH_KAFKA_LIBS="$LIBS" BENCH_SLUICE_COMMIT="$commit"
export BENCH_WORK="${BENCH_WORK:-$CACHE/work}"
rm -rf "$BENCH_WORK"; mkdir -p "$BENCH_WORK"
taskset -c "$BENCH_CLIENT_CPUS" "$VENV/bin/python" "$HERE/bench.py"
"$VENV/bin/python" "$HERE/report.py"

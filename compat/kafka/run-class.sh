#!/usr/bin/env bash
# Like Kafka's bin/kafka-run-class.sh: run a main class from the Kafka jars
# fetched by fetch.sh (fetched on first use).
#
#   run-class.sh CLASS [args...]
#   CLASS may be "a.B|c.D": the first class present in the jars is used
#   (main classes moved between Kafka versions).
#
# Env: KAFKA_VERSION, KAFKA_HEAP_OPTS (default -Xmx512m), KAFKA_OPTS (extra JVM
# flags), KAFKA_LOG4J_CONFIG (log4j2 config file; default: quiet tools config).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 ]]; then
  echo "usage: $0 CLASS [args...]" >&2
  exit 2
fi
CLASS="$1"; shift
LIBS="$("$HERE/fetch.sh" | tail -n 1)"

if [[ "$CLASS" == *"|"* ]]; then
  chosen=""
  IFS='|' read -r -a candidates <<<"$CLASS"
  for c in "${candidates[@]}"; do
    path="${c//.//}.class"
    for j in "$LIBS"/kafka*.jar; do
      if unzip -l "$j" "$path" >/dev/null 2>&1; then chosen="$c"; break 2; fi
    done
  done
  if [[ -z "$chosen" ]]; then
    echo "run-class.sh: none of $CLASS found in $LIBS" >&2
    exit 2
  fi
  CLASS="$chosen"
fi

LOG4J="${KAFKA_LOG4J_CONFIG:-$HERE/log4j2-tools.properties}"
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$LOG4J" \
  ${KAFKA_OPTS:-} \
  -cp "$LIBS/*" "$CLASS" "$@"

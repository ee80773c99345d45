#!/usr/bin/env bash
# Run real Apache Kafka (KRaft, broker+controller in one JVM per node) from the jars
# fetched by fetch.sh, for comparing sluice against it: one node, or several (below).
#
#   kafka-ref.sh start  [--port N] [--host H] [--dir D] [--controller-port M] [--state-dir S] [--override k=v]...
#                       [--node-id I --voters 1@127.0.0.1:M1,2@127.0.0.1:M2,... --cluster-id C]
#                       [--no-wait]
#   kafka-ref.sh wait   [--port N] [--host H] [--dir D] [--state-dir S]   # until a --no-wait start serves
#   kafka-ref.sh stop   [--dir D] [--state-dir S]     # SIGTERM, wait, SIGKILL after 60s
#   kafka-ref.sh kill9  [--dir D] [--state-dir S]     # SIGKILL, wait
#   kafka-ref.sh status [--dir D] [--state-dir S]     # exit 0 if running
#
# D (default .cache/kafka-ref/data) is used as log.dirs. The generated
# server.properties, the pid file and Kafka's own logs go to S (default
# "D.ref", a sibling of D) so that D holds only what Kafka itself writes there.
# Storage is formatted with a random cluster id only when D has no
# meta.properties yet, so start after stop/kill9 reuses the data.
# The PLAINTEXT listener is H:N (default 127.0.0.1:9092); the controller listens on
# H:M (default: a free port). start returns once the broker serves and
# prints "bootstrap=H:N". (chaos/ starts nodes in network namespaces of their own,
# each with an address H of its own.)
#
# A multi-node cluster is one start per node, each with its own D, N and M, the same --voters
# (every node's id@controller address) and the same --cluster-id, and --no-wait: a node serves
# only once a majority of the voters runs, so start them all, then wait for each.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

cmd="${1:-}"; [[ $# -gt 0 ]] && shift
PORT=9092
HOST=127.0.0.1
CPORT=""
DIR="$ROOT/.cache/kafka-ref/data"
STATE=""
OVERRIDES=()
NODE_ID=1
VOTERS=""
CLUSTER_ID=""
WAIT=1
START_TIMEOUT="${KAFKA_REF_START_TIMEOUT:-90}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    --node-id) NODE_ID="$2"; shift 2 ;;
    --voters) VOTERS="$2"; shift 2 ;;
    --cluster-id) CLUSTER_ID="$2"; shift 2 ;;
    --no-wait) WAIT=0; shift ;;
    --controller-port) CPORT="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --state-dir) STATE="$2"; shift 2 ;;
    --override) OVERRIDES+=("$2"); shift 2 ;;
    *) echo "kafka-ref.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
STATE="${STATE:-${DIR%/}.ref}"
mkdir -p "$STATE"
PIDFILE="$STATE/kafka.pid"
PROPS="$STATE/server.properties"

running() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_gone() { # pid timeout_s
  local pid="$1" t="$2" i=0
  while kill -0 "$pid" 2>/dev/null; do
    # a zombie child of ours would never disappear; ps state Z counts as gone
    if [[ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" == "Z" ]]; then return 0; fi
    sleep 0.2; i=$((i+1))
    if (( i > t*5 )); then return 1; fi
  done
}

wait_serving() { # pid
  local pid="$1" deadline=$((SECONDS + START_TIMEOUT))
  while true; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "kafka-ref.sh: Kafka exited during startup; stdout/stderr:" >&2
      tail -n 40 "$STATE/stdout.log" >&2
      grep -E "ERROR|FATAL" "$STATE/server.log" | tail -n 20 >&2 || true
      rm -f "$PIDFILE"
      exit 1
    fi
    if grep -q "Kafka Server started" "$STATE/server.log" 2>/dev/null &&
       python3 -c "import socket,sys; socket.create_connection(('$HOST',$PORT),1).close()" 2>/dev/null; then
      break
    fi
    if (( SECONDS > deadline )); then
      echo "kafka-ref.sh: Kafka did not start within ${START_TIMEOUT}s" >&2
      tail -n 40 "$STATE/server.log" >&2
      kill -9 "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
  echo "bootstrap=$HOST:$PORT"
}

case "$cmd" in
  start)
    if running; then
      echo "kafka-ref.sh: already running (pid $(cat "$PIDFILE"))" >&2
      exit 1
    fi
    "$HERE/fetch.sh" >/dev/null
    [[ -n "$CPORT" ]] || CPORT="$(free_port)"
    {
      echo "process.roles=broker,controller"
      echo "node.id=$NODE_ID"
      echo "controller.quorum.voters=${VOTERS:-$NODE_ID@$HOST:$CPORT}"
      echo "listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT"
      echo "advertised.listeners=PLAINTEXT://$HOST:$PORT"
      echo "controller.listener.names=CONTROLLER"
      echo "inter.broker.listener.name=PLAINTEXT"
      echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
      echo "log.dirs=$DIR"
      echo "num.partitions=1"
      echo "offsets.topic.replication.factor=1"
      echo "offsets.topic.num.partitions=5"
      echo "transaction.state.log.replication.factor=1"
      echo "transaction.state.log.min.isr=1"
      echo "transaction.state.log.num.partitions=5"
      echo "share.coordinator.state.topic.replication.factor=1"
      echo "share.coordinator.state.topic.min.isr=1"
      echo "group.initial.rebalance.delay.ms=0"
      for kv in "${OVERRIDES[@]+"${OVERRIDES[@]}"}"; do echo "$kv"; done
    } >"$PROPS"
    if [[ ! -f "$DIR/meta.properties" ]]; then
      # Kafka's form of a random uuid; like Kafka's Uuid.randomUuid, never one starting with '-'
      # (one in 64 would), which the storage tool would take for a flag.
      CID="${CLUSTER_ID:-$(python3 -c 'import base64,uuid
while (s := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"): pass
print(s)')}"
      if ! "$HERE/run-class.sh" kafka.tools.StorageTool format -t "$CID" -c "$PROPS" >"$STATE/format.log" 2>&1; then
        echo "kafka-ref.sh: storage format failed:" >&2
        cat "$STATE/format.log" >&2
        exit 1
      fi
    fi
    LIBS="$("$HERE/fetch.sh" | tail -n 1)"
    : >"$STATE/server.log"
    # shellcheck disable=SC2086
    setsid java ${KAFKA_HEAP_OPTS:--Xmx1g -Xms256m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -Djava.awt.headless=true \
      -Dkafka.logs.dir="$STATE" \
      -Dlog4j2.configurationFile="$HERE/log4j2-server.properties" \
      ${KAFKA_OPTS:-} \
      -cp "$LIBS/*" kafka.Kafka "$PROPS" </dev/null >"$STATE/stdout.log" 2>&1 &
    echo $! >"$PIDFILE"
    if (( WAIT )); then wait_serving "$!"; fi
    ;;
  wait)
    if ! running; then echo "kafka-ref.sh: not running" >&2; exit 1; fi
    wait_serving "$(cat "$PIDFILE")"
    ;;
  stop)
    if ! running; then echo "kafka-ref.sh: not running"; rm -f "$PIDFILE"; exit 0; fi
    pid="$(cat "$PIDFILE")"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 60; then
      echo "kafka-ref.sh: no exit after SIGTERM within 60s, sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 10 || true
    fi
    rm -f "$PIDFILE"
    echo "stopped"
    ;;
  kill9)
    if ! running; then echo "kafka-ref.sh: not running"; rm -f "$PIDFILE"; exit 0; fi
    pid="$(cat "$PIDFILE")"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || true
    rm -f "$PIDFILE"
    echo "killed"
    ;;
  status)
    if running; then echo "running pid=$(cat "$PIDFILE")"; exit 0; else echo "stopped"; exit 3; fi
    ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

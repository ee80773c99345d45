#!/usr/bin/env bash
# Run every client compatibility scenario against sluice or Apache Kafka and print a matrix.
#
#   compat/run.sh [--target sluice|kafka] [--nodes N] [--bootstrap HOST:PORT,...] [--log-dir DIR]
#                 [--clients a,b] [--timeout SECS] [-j N] [--write-matrix]
#
#   --target       sluice (default) or kafka; only for sluice are compat/expected-failures.txt
#                  applied (and, with --nodes above 1, compat/expected-failures-cluster.txt too)
#   --nodes        1 (default), or a cluster of N nodes: `sluice dev-cluster N`, or N Kafka nodes
#                  each broker and controller (kafka-ref.sh --voters)
#   --bootstrap    use a running broker; otherwise the runner starts one in a temp dir:
#                  sluice from $SLUICE_BIN (default target/release/sluice), kafka via compat/kafka/kafka-ref.sh
#   --log-dir      the running broker's log.dirs (lets the kafka-dump-log scenario find segments)
#   --clients      subset of: java kafka-tools kcat confluent-python franz-go kafkajs kafka-python
#   --timeout      per-scenario timeout (default 120 s)
#   -j             clients run concurrently (default 3)
#   --write-matrix save results to compat/results/<target>.tsv (a cluster's to <target>-cluster.tsv)
#                  and regenerate compat/MATRIX.md
#
# Exit status: 0 when every scenario did what was expected (pass, or fail where listed in
# expected-failures.txt); 1 on any unexpected result in either direction.
#
# On a cluster the runner exports COMPAT_NODE_CTL, a script the `leader-failover` scenarios call
# as `$COMPAT_NODE_CTL kill9 NODE` (kill -9 that broker) and `$COMPAT_NODE_CTL start NODE`
# (start it again and wait until it serves). Those scenarios run after all the others, one
# client at a time, with --failover-timeout each (default 300 s); on a single node they SKIP.
# Client dependencies are installed into .cache/ on first use.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${SLUICE_CACHE:-$ROOT/.cache}"
C="$CACHE/compat"
TARGET=sluice BOOTSTRAP="" LOGDIR="" TIMEOUT=120 FAILOVER_TIMEOUT=300 JOBS=3 WRITE=0 NODES=1
CLIENTS="java kafka-tools kcat confluent-python franz-go kafkajs kafka-python"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) TARGET="$2"; shift 2 ;;
    --bootstrap) BOOTSTRAP="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --log-dir) LOGDIR="$2"; shift 2 ;;
    --clients) CLIENTS="${2//,/ }"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --failover-timeout) FAILOVER_TIMEOUT="$2"; shift 2 ;;
    -j) JOBS="$2"; shift 2 ;;
    --write-matrix) WRITE=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$TARGET" == sluice || "$TARGET" == kafka ]] || { echo "run.sh: --target must be sluice or kafka" >&2; exit 2; }
(( WRITE == 0 || NODES == 1 || NODES == 3 )) || { echo "run.sh: --write-matrix records single-node and three-node runs only" >&2; exit 2; }
mkdir -p "$C"
say() { echo "compat: $*" >&2; }
START=$SECONDS

# ------------------------------------------------------------------ client setup (cached)
VENV="$C/venv"
stamp_ok() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }
need() { command -v "$1" >/dev/null 2>&1 || { say "MISSING TOOLCHAIN: '$1' not found on PATH ($2); $3 scenarios cannot run"; return 1; }; }

setup_python() {
  need python3 "install python3 + python3-venv" "$1" || return 1
  local sum; sum="$(cat "$HERE/python/requirements.txt" | sha1sum | cut -c1-12)"
  stamp_ok "$VENV/.stamp" "$sum" && return 0
  say "installing Python client packages into $VENV (first use)"
  { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q -r "$HERE/python/requirements.txt"; } >"$C/pip.log" 2>&1 \
    || { say "pip install failed, see $C/pip.log"; tail -5 "$C/pip.log" >&2; return 1; }
  echo "$sum" >"$VENV/.stamp"
}
setup_java() {
  need java "Java 17+, apt-get install openjdk-17-jdk-headless" java && need mvn "apt-get install maven" java && need javac "a JDK, not only a JRE" java || return 1
  local sum; sum="$(cat "$HERE/java/pom.xml" | sha1sum | cut -c1-12)"
  if ! stamp_ok "$C/java/.cp-stamp" "$sum"; then
    say "resolving kafka-clients with Maven into $CACHE/m2 (first use)"
    mkdir -p "$C/java"
    mvn -B -q -f "$HERE/java/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath -Dmdep.outputFile="$C/java/cp.txt" >"$C/java/mvn.log" 2>&1 \
      || { say "mvn failed, see $C/java/mvn.log"; tail -5 "$C/java/mvn.log" >&2; return 1; }
    echo "$sum" >"$C/java/.cp-stamp"
  fi
  local ssum; ssum="$(cat "$HERE"/java/src/main/java/sluice/compat/*.java | sha1sum | cut -c1-12)"
  if ! stamp_ok "$C/java/.src-stamp" "$ssum"; then
    rm -rf "$C/java/classes"; mkdir -p "$C/java/classes"
    javac -nowarn -d "$C/java/classes" -cp "$(cat "$C/java/cp.txt")" "$HERE"/java/src/main/java/sluice/compat/*.java >"$C/java/javac.log" 2>&1 \
      || { say "javac failed:"; cat "$C/java/javac.log" >&2; return 1; }
    echo "$ssum" >"$C/java/.src-stamp"
  fi
}
setup_go() {
  need go "install Go 1.26+ (franz-go needs it)" franz-go || return 1
  mkdir -p "$C/bin"
  ( cd "$HERE/go" && GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-mod=mod go build -o "$C/bin/compat-go" . ) >"$C/go-build.log" 2>&1 \
    || { say "go build failed, see $C/go-build.log"; tail -5 "$C/go-build.log" >&2; return 1; }
}
setup_node() {
  need node "install Node.js 18+" kafkajs && need npm "install npm" kafkajs || return 1
  local sum; sum="$(cat "$HERE/node/package.json" "$HERE/node/package-lock.json" | sha1sum | cut -c1-12)"
  stamp_ok "$C/node/.stamp" "$sum" && return 0
  say "installing kafkajs with npm into $C/node (first use)"
  mkdir -p "$C/node" && cp "$HERE/node/package.json" "$HERE/node/package-lock.json" "$C/node/"
  ( cd "$C/node" && npm ci --no-audit --no-fund ) >"$C/npm.log" 2>&1 || { say "npm ci failed, see $C/npm.log"; tail -5 "$C/npm.log" >&2; return 1; }
  echo "$sum" >"$C/node/.stamp"
}
setup_kcat() {
  if ! command -v kcat >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      say "installing kcat with apt-get (first use)"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } >"$C/apt.log" 2>&1
    fi
    need kcat "apt-get install kcat" kcat || return 1
  fi
  setup_python kcat
}
setup_tools() {
  need java "Java 17+" kafka-tools && need python3 "python3" kafka-tools || return 1
  "$ROOT/compat/kafka/fetch.sh" >/dev/null || { say "compat/kafka/fetch.sh failed"; return 1; }
}

client_setup() {
  case "$1" in
    java) setup_java ;; kafka-tools) setup_tools ;; kcat) setup_kcat ;;
    confluent-python|kafka-python) setup_python "$1" ;; franz-go) setup_go ;; kafkajs) setup_node ;;
    *) say "unknown client $1"; return 1 ;;
  esac
}
client_cmd() {
  case "$1" in
    java) echo java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$C/java/classes:$(cat "$C/java/cp.txt")" sluice.compat.Main ;;
    kafka-tools) echo python3 "$HERE/tools/scenarios.py" ;;
    kcat) echo "$VENV/bin/python" "$HERE/kcat/scenarios.py" ;;
    confluent-python) echo "$VENV/bin/python" "$HERE/python/confluent_scenarios.py" ;;
    kafka-python) echo "$VENV/bin/python" "$HERE/python/kafka_python_scenarios.py" ;;
    franz-go) echo "$C/bin/compat-go" ;;
    kafkajs) echo env NODE_PATH="$C/node/node_modules" node "$HERE/node/scenarios.js" ;;
  esac
}

# ------------------------------------------------------------------ the target broker
TMP="$(mktemp -d "${TMPDIR:-/tmp}/sluice-compat.XXXXXX")"
BROKER_PID="" KREF_DIR="" KREF_NODES=0
cleanup() {
  if [[ -n "$BROKER_PID" ]]; then kill "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null; fi
  if [[ -n "$KREF_DIR" ]]; then "$ROOT/compat/kafka/kafka-ref.sh" stop --dir "$KREF_DIR" --state-dir "$TMP/kafka-state" >/dev/null 2>&1; fi
  for i in $(seq 1 "$KREF_NODES"); do
    "$ROOT/compat/kafka/kafka-ref.sh" kill9 --dir "$TMP/kafka$i/data" --state-dir "$TMP/kafka$i/state" >/dev/null 2>&1
  done
  # Nodes the failover scenarios started again run outside dev-cluster.
  pkill -9 -f -- "serve .*log.dirs=$TMP/data/node" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "$BOOTSTRAP" ]]; then
  if [[ "$TARGET" == sluice && "$NODES" != 1 ]]; then
    BIN="${SLUICE_BIN:-$ROOT/target/release/sluice}"
    [[ -x "$BIN" ]] || { say "no sluice binary at $BIN (cargo build --release, or set SLUICE_BIN)"; exit 2; }
    # A base port whose client, controller (+100) and metrics (+200) ports are all free.
    BASE="$(python3 - "$NODES" <<'PY'
import socket, sys
n = int(sys.argv[1])
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); base = s.getsockname()[1]; s.close()
    if base + 200 + n > 65535:
        continue
    try:
        held = []
        for off in [o + k for o in (0, 100, 200) for k in range(n)]:
            h = socket.socket(); h.bind(("127.0.0.1", base + off)); held.append(h)
        for h in held:
            h.close()
        print(base)
        break
    except OSError:
        pass
PY
)"
    "$BIN" dev-cluster "$NODES" --dir "$TMP/data" --port "$BASE" >"$TMP/sluice.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 1 300); do
      BOOTSTRAP="$(sed -n 's/^bootstrap.servers=//p' "$TMP/sluice.log" | head -1)"
      [[ -n "$BOOTSTRAP" ]] && break
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.1
    done
    [[ -n "$BOOTSTRAP" ]] || { say "sluice dev-cluster did not start:"; tail -20 "$TMP/sluice.log" >&2; exit 2; }
    # Until every node is unfenced, Metadata lists fewer brokers than the scenarios expect.
    for i in $(seq 1 "$NODES"); do
      for _ in $(seq 1 300); do
        grep -q "this broker is unfenced" "$TMP/data/node$i.log" 2>/dev/null && break
        sleep 0.1
      done
    done
    LOGDIR="$(seq -f "$TMP/data/node%g" -s: 1 "$NODES")"
    # kill9 saves the node's command line; start runs it again, outside dev-cluster.
    cat >"$TMP/node-ctl" <<CTL
#!/usr/bin/env bash
set -euo pipefail
node="\$2" log="$TMP/data/node\$2.log"
case "\$1" in
  kill9)
    pid="\$(pgrep -f -- "serve .*log.dirs=$TMP/data/node\$node( |\$)" | head -1)"
    [[ -n "\$pid" ]] || { echo "node \$node is not running" >&2; exit 1; }
    cp "/proc/\$pid/cmdline" "$TMP/node\$node.cmdline"
    kill -9 "\$pid" ;;
  start)
    before="\$(grep -c "this broker is unfenced" "\$log" || true)"
    mapfile -d '' args <"$TMP/node\$node.cmdline"
    setsid "\${args[@]}" >>"\$log" 2>&1 </dev/null &
    for _ in \$(seq 1 600); do
      (( \$(grep -c "this broker is unfenced" "\$log" || true) > before )) && exit 0
      sleep 0.1
    done
    echo "node \$node did not come back within 60 s" >&2; exit 1 ;;
  *) echo "usage: node-ctl kill9|start NODE" >&2; exit 2 ;;
esac
CTL
    chmod +x "$TMP/node-ctl"
    export COMPAT_NODE_CTL="$TMP/node-ctl"
    say "started a $NODES-node sluice cluster ($BIN) at $BOOTSTRAP"
  elif [[ "$TARGET" == sluice ]]; then
    BIN="${SLUICE_BIN:-$ROOT/target/release/sluice}"
    [[ -x "$BIN" ]] || { say "no sluice binary at $BIN (cargo build --release, or set SLUICE_BIN)"; exit 2; }
    mkdir -p "$TMP/data"
    "$BIN" serve --override log.dirs="$TMP/data" --override listeners=PLAINTEXT://127.0.0.1:0 >"$TMP/sluice.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 1 100); do
      BOOTSTRAP="$(sed -n 's/.*sluice listening on PLAINTEXT:\/\/\([0-9.:]*\).*/\1/p' "$TMP/sluice.log" | head -1)"
      [[ -n "$BOOTSTRAP" ]] && break
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.1
    done
    [[ -n "$BOOTSTRAP" ]] || { say "sluice did not start:"; tail -20 "$TMP/sluice.log" >&2; exit 2; }
    LOGDIR="$TMP/data"
    say "started sluice ($BIN) at $BOOTSTRAP, log dir $LOGDIR"
  elif [[ "$NODES" != 1 ]]; then
    free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
    PORTS=() CPORTS=() VOTERS=""
    for i in $(seq 1 "$NODES"); do
      PORTS+=("$(free_port)"); CPORTS+=("$(free_port)")
      VOTERS="${VOTERS:+$VOTERS,}$i@127.0.0.1:${CPORTS[$((i - 1))]}"
    done
    CID="$(python3 -c 'import base64; print(base64.urlsafe_b64encode(b"sluice-compat-kc").decode().rstrip("="))')"
    say "starting a $NODES-node Apache Kafka cluster (compat/kafka/kafka-ref.sh)"
    KREF_NODES="$NODES"
    for i in $(seq 1 "$NODES"); do
      "$ROOT/compat/kafka/kafka-ref.sh" start --dir "$TMP/kafka$i/data" --state-dir "$TMP/kafka$i/state" \
        --port "${PORTS[$((i - 1))]}" --controller-port "${CPORTS[$((i - 1))]}" --node-id "$i" --voters "$VOTERS" \
        --cluster-id "$CID" --no-wait >&2 || { say "Kafka node $i did not start"; exit 2; }
    done
    for i in $(seq 1 "$NODES"); do
      "$ROOT/compat/kafka/kafka-ref.sh" wait --dir "$TMP/kafka$i/data" --state-dir "$TMP/kafka$i/state" \
        --port "${PORTS[$((i - 1))]}" >&2 || { say "Kafka node $i did not serve"; exit 2; }
    done
    BOOTSTRAP="$(for p in "${PORTS[@]}"; do printf '127.0.0.1:%s,' "$p"; done)"; BOOTSTRAP="${BOOTSTRAP%,}"
    LOGDIR="$(seq -f "$TMP/kafka%g/data" -s: 1 "$NODES")"
    cat >"$TMP/node-ctl" <<CTL
#!/usr/bin/env bash
set -euo pipefail
ports=(${PORTS[*]}) cports=(${CPORTS[*]})
n="\$2" ref=("$ROOT/compat/kafka/kafka-ref.sh")
dirs=(--dir "$TMP/kafka\$n/data" --state-dir "$TMP/kafka\$n/state" --port "\${ports[\$((n - 1))]}")
case "\$1" in
  kill9) "\${ref[@]}" kill9 "\${dirs[@]}" >&2 ;;
  start)
    "\${ref[@]}" start "\${dirs[@]}" --controller-port "\${cports[\$((n - 1))]}" --node-id "\$n" \\
      --voters "$VOTERS" --cluster-id "$CID" --no-wait >&2
    "\${ref[@]}" wait "\${dirs[@]}" >&2 ;;
  *) echo "usage: node-ctl kill9|start NODE" >&2; exit 2 ;;
esac
CTL
    chmod +x "$TMP/node-ctl"
    export COMPAT_NODE_CTL="$TMP/node-ctl"
  else
    PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    KREF_DIR="$TMP/kafka-data"
    say "starting Apache Kafka (compat/kafka/kafka-ref.sh) on port $PORT"
    "$ROOT/compat/kafka/kafka-ref.sh" start --port "$PORT" --dir "$KREF_DIR" --state-dir "$TMP/kafka-state" >&2 || { say "Kafka did not start"; exit 2; }
    BOOTSTRAP="127.0.0.1:$PORT" LOGDIR="$KREF_DIR"
  fi
fi
export COMPAT_LOG_DIR="$LOGDIR"

# ------------------------------------------------------------------ run
RES="$TMP/results"; mkdir -p "$RES"
run_client() { # client -> $RES/<client>.tsv  (client \t scenario \t PASS|FAIL|SKIP \t detail \t secs)
  local cl="$1" out="$RES/$1.tsv" cmd names
  : >"$out"
  if ! client_setup "$cl" 2>"$RES/$cl.setup"; then
    cat "$RES/$cl.setup" >&2
    printf '%s\t%s\tFAIL\t%s\t0\n' "$cl" "*" "client setup failed: $(grep -m1 -i 'missing\|failed' "$RES/$cl.setup" | tr '\t' ' ')" >>"$out"
    return
  fi
  cat "$RES/$cl.setup" >&2
  read -r -a cmd <<<"$(client_cmd "$cl")"
  names="$("${cmd[@]}" list 2>/dev/null)" || { printf '%s\t*\tFAIL\tcannot list scenarios\t0\n' "$cl" >>"$out"; return; }
  for sc in $names; do
    # Scenarios that kill brokers run later, alone (run_failover).
    [[ "$sc" == leader-failover ]] && { echo "$cl" >>"$RES/failover-clients"; continue; }
    run_scenario "$cl" "$sc" "$TIMEOUT" "${cmd[@]}"
  done
}
run_scenario() { # client scenario timeout cmd... -> a line in $RES/<client>.tsv
  local cl="$1" sc="$2" limit="$3"; shift 3
  local cmd=("$@") out="$RES/$cl.tsv"
  local t0=$SECONDS line status detail
  line="$(timeout -k 5 "$limit" "${cmd[@]}" "$BOOTSTRAP" "$sc" 2>"$RES/$cl.$sc.err" | grep -m1 "^SCENARIO $cl $sc ")"
  if [[ -n "$line" ]]; then
    status="$(cut -d' ' -f4 <<<"$line")"; detail="$(cut -d' ' -f5- <<<"$line")"
  else
    status=FAIL; detail="no result (timeout ${limit}s or crash): $(tail -n1 "$RES/$cl.$sc.err" | cut -c1-200)"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$cl" "$sc" "$status" "${detail//$'\t'/ }" "$((SECONDS - t0))" >>"$out"
  printf '  %-16s %-24s %-4s %3ss  %s\n' "$cl" "$sc" "$status" "$((SECONDS - t0))" "${detail:0:150}" >&2
}
run_failover() { # every client's leader-failover scenario, one at a time, in client order
  [[ -f "$RES/failover-clients" ]] || return 0
  for cl in $CLIENTS; do
    grep -qx "$cl" "$RES/failover-clients" || continue
    read -r -a cmd <<<"$(client_cmd "$cl")"
    run_scenario "$cl" leader-failover "$FAILOVER_TIMEOUT" "${cmd[@]}"
  done
}

say "target=$TARGET bootstrap=$BOOTSTRAP clients: $CLIENTS (-j $JOBS, ${TIMEOUT}s per scenario)"
# setups that share the venv must not race: do python first
for cl in $CLIENTS; do case "$cl" in kcat|confluent-python|kafka-python) setup_python "$cl" || true ;; esac; done
# wait only for the client jobs (the broker is a child too)
PIDS=()
for cl in $CLIENTS; do
  while :; do
    live=0
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill -0 "$p" 2>/dev/null && live=$((live + 1)); done
    (( live < JOBS )) && break
    sleep 0.3
  done
  run_client "$cl" &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p"; done
run_failover
cat "$RES"/*.tsv >"$TMP/all.tsv" 2>/dev/null
WALL=$((SECONDS - START))
MARGS=(--target "$TARGET" --results "$TMP/all.tsv" --expected "$HERE/expected-failures.txt"
       --expected-cluster "$HERE/expected-failures-cluster.txt" --nodes "$NODES" --wall "$WALL" --err-dir "$RES")
SUFFIX=""; (( NODES > 1 )) && SUFFIX="-cluster"
(( WRITE )) && MARGS+=(--write "$HERE/results/$TARGET$SUFFIX.tsv" --matrix "$HERE/MATRIX.md")
python3 "$HERE/matrix.py" "${MARGS[@]}" | tee "$TMP/matrix.out"
rc=${PIPESTATUS[0]}
if (( rc != 0 )); then
  # The broker's own log, for the unexpected results above (Kafka's: its warnings and errors).
  if [[ -f "$TMP/sluice.log" ]]; then echo; echo "== last 40 lines of the sluice log"; tail -n 40 "$TMP/sluice.log"; fi
  for f in "$TMP"/data/node*.log; do
    [[ -f "$f" ]] && { echo; echo "== WARN/ERROR lines of $(basename "$f")"; grep -E "WARN|ERROR" "$f" | tail -n 20; }
  done
  if [[ -f "$TMP/kafka-state/server.log" ]]; then
    echo; echo "== last 30 WARN/ERROR lines of Kafka's server.log"; grep -E "WARN|ERROR" "$TMP/kafka-state/server.log" | tail -n 30
  fi
  echo; grep "^UNEXPECTED" "$TMP/matrix.out"
fi
exit "$rc"

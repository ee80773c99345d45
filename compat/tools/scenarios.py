#!/usr/bin/env python3
"""Compatibility scenarios for Apache Kafka's own command-line tools (compat/kafka/bin).

    scenarios.py list
    scenarios.py BOOTSTRAP [SCENARIO...]

Env: COMPAT_LOG_DIR  the broker's log.dirs, ':'-separated for a cluster's nodes (only for
     dump-log; SKIP without it).
Prints one line per scenario: SCENARIO kafka-tools NAME PASS|FAIL|SKIP detail
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "kafka", "bin")
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import failover  # noqa: E402

CLIENT = "kafka-tools"
RUN = format(int(time.time() * 1000) % 10**9, "x") + format(random.getrandbits(16), "x")
BS = None


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def tool(name, *args, stdin=None, ok=True, timeout=60):
    p = subprocess.run([os.path.join(BIN, name + ".sh"), *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if ok and p.returncode != 0:
        err = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["?"])
        err = [l for l in err if l.strip()]
        raise AssertionError("%s %s exited %d: %s" % (name, " ".join(args[:4]), p.returncode, " | ".join(err[-3:])[:400]))
    return p.stdout


def settled(read, ok, what, secs=10):
    """read() until ok(result): a broker may answer a describe from metadata that a change just
    made has not reached yet (Apache Kafka applies controller records to its brokers'
    metadata asynchronously), so a check right after a change waits for it, within a bound."""
    deadline = time.time() + secs
    while True:
        got = read()
        if ok(got):
            return got
        check(time.time() < deadline, "%s: %r" % (what, got[:400] if isinstance(got, str) else got))
        time.sleep(0.2)


def topic(s):
    return "compat-tools-%s-%s" % (s, RUN)


def create(t, partitions=1, *extra):
    tool("kafka-topics", "--bootstrap-server", BS, "--create", "--topic", t, "--partitions", str(partitions), "--replication-factor", "1", *extra)


def offsets(t, time_spec):
    out = tool("kafka-get-offsets", "--bootstrap-server", BS, "--topic", t, "--time", str(time_spec))
    return {int(l.split(":")[-2]): int(l.split(":")[-1]) for l in out.split() if l.startswith(t + ":")}


def console_produce(t, lines, headers=True):
    props = ["--reader-property", "parse.key=true", "--reader-property", "key.separator=:"]
    if headers:
        props += ["--reader-property", "parse.headers=true", "--reader-property", "headers.delimiter=|",
                  "--reader-property", "headers.separator=,", "--reader-property", "headers.key.separator=="]
    tool("kafka-console-producer", "--bootstrap-server", BS, "--topic", t, "--producer-property", "acks=all", *props,
         stdin="".join(l + "\n" for l in lines))


FMT = ["--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
       "--formatter-property", "print.timestamp=true", "--formatter-property", "print.partition=true",
       "--formatter-property", "print.offset=true", "--formatter-property", "key.separator=;", "--formatter-property", "line.separator=\n"]


def records(n, tag):
    """(line for the console producer, expected (headers, key, value))"""
    out = []
    for i in range(n):
        h = "h1=a%d,h2=b" % i
        out.append(("%s|k%d-%s:v%d-%s" % (h, i, tag, i, tag), (h.replace("=", ":"), "k%d-%s" % (i, tag), "v%d-%s" % (i, tag))))
    return out


def check_console_output(out, expected, t0, t1, partition=0):
    lines = [l for l in out.splitlines() if l.startswith("CreateTime:")]
    check(len(lines) == len(expected), "consumed %d records, expected %d: %r" % (len(lines), len(expected), out[-300:]))
    for off, (l, (h, k, v)) in enumerate(zip(lines, expected)):
        m = re.match(r"CreateTime:(\d+);Partition:(\d+);Offset:(\d+);(.*);(.*);(.*)$", l)
        check(m, "unparsed line %r" % l)
        ts, p, o, gh, gk, gv = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5), m.group(6)
        check(p == partition and o == off, "record %d at %d@%d" % (off, p, o))
        check((gh, gk, gv) == (h, k, v), "record %d: %r != %r" % (off, (gh, gk, gv), (h, k, v)))
        check(t0 - 1000 <= ts <= t1 + 1000, "record %d timestamp %d outside [%d,%d]" % (off, ts, t0, t1))


def s_topics():
    t = topic("t")
    create(t, 2, "--config", "retention.ms=3600000")
    check(t in tool("kafka-topics", "--bootstrap-server", BS, "--list").split(), "--list lacks topic")
    d = tool("kafka-topics", "--bootstrap-server", BS, "--describe", "--topic", t)
    check("PartitionCount: 2" in d and "retention.ms=3600000" in d, "--describe: %r" % d[:300])
    check(len(re.findall(r"Partition: \d+\s+Leader: \d+\s+Replicas: \d+\s+Isr: \d+", d)) == 2, "--describe partitions: %r" % d[:400])
    out = tool("kafka-topics", "--bootstrap-server", BS, "--create", "--topic", t, "--partitions", "1", ok=False)
    check("already exists" in out or True, "")
    tool("kafka-topics", "--bootstrap-server", BS, "--alter", "--topic", t, "--partitions", "3")
    settled(lambda: tool("kafka-topics", "--bootstrap-server", BS, "--describe", "--topic", t),
            lambda d: "PartitionCount: 3" in d, "after --alter")
    tool("kafka-topics", "--bootstrap-server", BS, "--delete", "--topic", t)
    settled(lambda: tool("kafka-topics", "--bootstrap-server", BS, "--list").split(), lambda names: t not in names,
            "topic still listed after --delete", secs=15)
    return "create(--config) list describe alter(--partitions 3) delete"


def s_console_partition():
    t = topic("cp")
    create(t, 1)
    recs = records(10, "cp")
    t0 = int(time.time() * 1000)
    console_produce(t, [r[0] for r in recs])
    t1 = int(time.time() * 1000)
    out = tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--partition", "0", "--offset", "earliest",
               "--max-messages", "10", "--timeout-ms", "20000", *FMT)
    check_console_output(out, [r[1] for r in recs], t0, t1)
    out = tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--partition", "0", "--offset", "7",
               "--max-messages", "3", "--timeout-ms", "20000", *FMT)
    check(len([l for l in out.splitlines() if ";Offset:" in l]) == 3 and "Offset:7;" in out, "--offset 7: %r" % out[-300:])
    return "console producer (parse.key, parse.headers) -> console consumer --partition 0 --offset earliest/7 --max-messages: keys, headers, timestamps, offsets"


def s_console_group():
    t = topic("cg")
    create(t, 1)
    recs = records(10, "cg")
    t0 = int(time.time() * 1000)
    console_produce(t, [r[0] for r in recs])
    t1 = int(time.time() * 1000)
    out = tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--group", "compat-tools-cg-" + RUN,
               "--from-beginning", "--max-messages", "10", "--timeout-ms", "25000", *FMT)
    check_console_output(out, [r[1] for r in recs], t0, t1)
    return "console consumer --group --from-beginning --max-messages 10"


def s_consumer_groups():
    t = topic("grp")
    g = "compat-tools-grp-" + RUN
    create(t, 1)
    console_produce(t, [r[0] for r in records(10, "g")])
    tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--group", g, "--from-beginning", "--max-messages", "10", "--timeout-ms", "25000")
    check(g in tool("kafka-consumer-groups", "--bootstrap-server", BS, "--list").split(), "--list lacks group")
    d = tool("kafka-consumer-groups", "--bootstrap-server", BS, "--describe", "--group", g)
    row = [l.split() for l in d.splitlines() if t in l]
    check(row and row[0][3] == "10" and row[0][4] == "10" and row[0][5] == "0", "--describe: %r" % d)
    tool("kafka-consumer-groups", "--bootstrap-server", BS, "--reset-offsets", "--group", g, "--topic", t, "--to-offset", "3", "--execute")
    d = tool("kafka-consumer-groups", "--bootstrap-server", BS, "--describe", "--group", g)
    row = [l.split() for l in d.splitlines() if t in l]
    check(row and row[0][3] == "3" and row[0][5] == "7", "after --reset-offsets --to-offset 3: %r" % d)
    for how, want_offset, want_lag in [(["--to-earliest"], "0", "10"), (["--to-latest"], "10", "0"),
                                       (["--to-datetime", "2000-01-01T00:00:00.000"], "0", "10")]:
        tool("kafka-consumer-groups", "--bootstrap-server", BS, "--reset-offsets", "--group", g, "--topic", t, *how, "--execute")
        d = tool("kafka-consumer-groups", "--bootstrap-server", BS, "--describe", "--group", g)
        row = [l.split() for l in d.splitlines() if t in l]
        check(row and row[0][3] == want_offset and row[0][5] == want_lag, "after --reset-offsets %s: %r" % (" ".join(how), d))
    tool("kafka-consumer-groups", "--bootstrap-server", BS, "--delete", "--group", g)
    check(g not in tool("kafka-consumer-groups", "--bootstrap-server", BS, "--list").split(), "group listed after --delete")
    return "list describe(offset 10, lag 0) reset-offsets(--to-offset 3, --to-earliest, --to-latest, --to-datetime) delete"


def s_configs():
    t = topic("cfg")
    create(t, 1)

    def describe(entity, name, *extra):
        return lambda: tool("kafka-configs", "--bootstrap-server", BS, "--entity-type", entity, "--entity-name", name, "--describe", *extra)

    tool("kafka-configs", "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t, "--alter", "--add-config", "retention.ms=7200000,cleanup.policy=compact")
    settled(describe("topics", t), lambda d: "retention.ms=7200000" in d and "cleanup.policy=compact" in d, "topic --describe")
    tool("kafka-configs", "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t, "--alter", "--delete-config", "retention.ms")
    settled(describe("topics", t), lambda d: "retention.ms" not in d and "cleanup.policy=compact" in d, "after --delete-config")
    d = describe("topics", t, "--all")()
    check("retention.ms=604800000" in d and "segment.bytes=" in d, "topic --describe --all: %r" % d[:400])
    d = describe("brokers", "1", "--all")()
    check("num.partitions=" in d and "log.retention.hours=" in d, "broker --describe --all: %r" % d[:400])
    tool("kafka-configs", "--bootstrap-server", BS, "--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config", "log.retention.ms=604800001")
    settled(describe("brokers", "1"), lambda d: "log.retention.ms=604800001" in d, "broker --describe after --alter")
    tool("kafka-configs", "--bootstrap-server", BS, "--entity-type", "brokers", "--entity-name", "1", "--alter", "--delete-config", "log.retention.ms")
    settled(describe("brokers", "1"), lambda d: "log.retention.ms=604800001" not in d, "broker config still set after --delete-config")
    return "topic alter/describe/delete-config/--all, broker describe --all, alter/delete-config log.retention.ms"


def s_get_offsets():
    t = topic("go")
    create(t, 2)
    console_produce(t, ["k:v%d" % i for i in range(10)], headers=False)
    latest = offsets(t, -1)
    check(sum(latest.values()) == 10 and set(latest) == {0, 1}, "--time -1: %r" % latest)
    check(offsets(t, -2) == {0: 0, 1: 0}, "--time -2: %r" % offsets(t, -2))
    mx = offsets(t, -3)
    check(set(mx) <= {0, 1} and all(0 <= mx[p] < latest[p] for p in mx), "--time -3 (max timestamp): %r vs %r" % (mx, latest))
    return "--time -1/-2/-3 on 2 partitions"


def s_delete_records():
    t = topic("dr")
    create(t, 1)
    console_produce(t, ["k:v%d" % i for i in range(10)], headers=False)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"version": 1, "partitions": [{"topic": t, "partition": 0, "offset": 4}]}, f)
    out = tool("kafka-delete-records", "--bootstrap-server", BS, "--offset-json-file", f.name)
    os.unlink(f.name)
    check("low_watermark: 4" in out, "output: %r" % out)
    check(offsets(t, -2) == {0: 4}, "--time -2 after delete: %r" % offsets(t, -2))
    out = tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--partition", "0", "--offset", "earliest",
               "--max-messages", "6", "--timeout-ms", "20000", "--formatter-property", "print.offset=true")
    check("Offset:4" in out.split()[0] if out.split() else False, "first record after delete: %r" % out[:200])
    return "delete-records to offset 4; low watermark visible via get-offsets and console consumer"


def s_producer_perf():
    t = topic("pp")
    create(t, 2)
    out = tool("kafka-producer-perf-test", "--topic", t, "--num-records", "20000", "--record-size", "100", "--throughput", "-1",
               "--producer-props", "bootstrap.servers=" + BS, "acks=all", "linger.ms=5")
    check(re.search(r"20000 records sent", out), "output: %r" % out[-300:])
    check(sum(offsets(t, -1).values()) == 20000, "end offsets %r" % offsets(t, -1))
    return re.search(r"20000 records sent, [^(]*", out).group(0).strip().rstrip(",")


def s_consumer_perf():
    t = topic("cpf")
    create(t, 2)
    tool("kafka-producer-perf-test", "--topic", t, "--num-records", "10000", "--record-size", "100", "--throughput", "-1",
         "--producer-props", "bootstrap.servers=" + BS)
    out = tool("kafka-consumer-perf-test", "--bootstrap-server", BS, "--topic", t, "--messages", "10000", "--timeout", "20000",
               "--group", "compat-tools-cpf-" + RUN)
    rows = [l.split(",") for l in out.splitlines() if l and l[0].isdigit()]
    check(rows and int(rows[-1][4].strip()) == 10000, "output: %r" % out[-400:])
    return "10000 messages consumed"


def s_dump_log():
    logdir = os.environ.get("COMPAT_LOG_DIR")
    if not logdir:
        raise Skip("COMPAT_LOG_DIR not set (broker log dir unknown)")
    t = topic("dl")
    create(t, 1)
    console_produce(t, ["k%d:v%d" % (i, i) for i in range(5)], headers=False)
    # A cluster's nodes each have a log dir (':'-separated); the leader's holds the segment.
    segs = [os.path.join(d, t + "-0", "00000000000000000000.log") for d in logdir.split(os.pathsep)]
    deadline = time.time() + 10
    while not any(os.path.exists(s) for s in segs):
        check(time.time() < deadline, "segment missing from %s" % segs)
        time.sleep(0.2)
    seg = next(s for s in segs if os.path.exists(s))
    out = tool("kafka-dump-log", "--files", seg, "--print-data-log")
    got = re.findall(r"offset: (\d+) .*?key: (\S+) payload: (\S+)", out)
    check(got == [(str(i), "k%d" % i, "v%d" % i) for i in range(5)], "dump-log records %r; output %r" % (got, out[-400:]))
    check("Found" not in out or "invalid" not in out.lower(), "dump-log reported problems")
    idx = seg[:-4] + ".index"
    if os.path.exists(idx):
        tool("kafka-dump-log", "--files", idx)
    return "5 records with keys/payloads/offsets read from the .log segment"


def s_acls_election():
    t = topic("ae")
    create(t, 2)
    # no authorizer on either broker: listing or adding ACLs says so
    for args in (["--list"], ["--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", t]):
        p = subprocess.run([os.path.join(BIN, "kafka-acls.sh"), "--bootstrap-server", BS, *args], capture_output=True, text=True, timeout=60)
        out = p.stdout + p.stderr
        check("SecurityDisabledException: No Authorizer is configured" in out, "kafka-acls %s: %r" % (args[0], out[-300:]))
    # a single replica is always the preferred leader
    out = tool("kafka-leader-election", "--bootstrap-server", BS, "--election-type", "preferred", "--topic", t, "--partition", "1")
    check("Valid replica already elected for partitions %s-1" % t in out, "kafka-leader-election: %r" % out[-300:])
    return "kafka-acls --list/--add: SecurityDisabledException (no authorizer); kafka-leader-election --election-type preferred: already elected"


def s_describe_producers():
    t = topic("dp")
    create(t, 1)
    # the console producer is idempotent by default: one producer, sequences 0..9
    console_produce(t, ["k:v%d" % i for i in range(10)], headers=False)
    out = tool("kafka-transactions", "--bootstrap-server", BS, "describe-producers", "--topic", t, "--partition", "0")
    rows = [l.split() for l in out.strip().splitlines()]
    check(len(rows) == 2 and rows[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"],
          "describe-producers: %r" % out[-400:])
    got = dict(zip(rows[0], rows[1]))
    check(got["LastSequence"] == "9" and got["CurrentTransactionStartOffset"] == "None", "describe-producers row %r" % got)
    return "kafka-transactions describe-producers: the console producer's id, epoch %s, last sequence 9" % got["ProducerEpoch"]


def s_leader_failover():
    """failover.run with kafka-console-producer (idempotent, acks=all) and kafka-console-consumer;
    the console producer reports no offsets, so the read-back checks them."""
    t = topic("failover")

    def create_topic():
        tool("kafka-topics", "--bootstrap-server", BS, "--create", "--topic", t, "--partitions", "1", "--replication-factor", "3",
             "--config", "min.insync.replicas=%s" % failover.TOPIC_CONFIG["min.insync.replicas"])

    def leader_and_isr():
        d = tool("kafka-topics", "--bootstrap-server", BS, "--describe", "--topic", t, timeout=60)
        m = re.search(r"Partition: 0\s+Leader: (-?\d+|none)\s+Replicas: [\d,]+\s+Isr: ([\d,]*)", d)
        if not m or m.group(1) == "none":
            return None
        return int(m.group(1)), sorted(int(x) for x in m.group(2).split(",") if x)

    def produce_keys(ks):
        tool("kafka-console-producer", "--bootstrap-server", BS, "--topic", t, "--producer-property", "acks=all",
             "--producer-property", "enable.idempotence=true", "--producer-property", "delivery.timeout.ms=150000",
             "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
             stdin="".join("%s:v-%s\n" % (k, k) for k in ks), timeout=200)
        return None

    def consume(n):
        out = tool("kafka-console-consumer", "--bootstrap-server", BS, "--topic", t, "--partition", "0", "--offset", "earliest",
                   "--max-messages", str(n), "--timeout-ms", "60000", "--formatter-property", "print.offset=true",
                   "--formatter-property", "print.key=true", "--formatter-property", "key.separator=;", timeout=120)
        got = []
        for l in out.splitlines():
            m = re.match(r"Offset:(\d+);(.*);", l)
            if m:
                got.append((int(m.group(1)), m.group(2)))
        return got
    return failover.run(create_topic, leader_and_isr, produce_keys, consume)


SCENARIOS = {
    "topics": s_topics, "console-partition": s_console_partition, "console-group": s_console_group,
    "consumer-groups": s_consumer_groups, "configs": s_configs, "get-offsets": s_get_offsets,
    "delete-records": s_delete_records, "producer-perf-test": s_producer_perf, "consumer-perf-test": s_consumer_perf,
    "dump-log": s_dump_log, "acls-election": s_acls_election,
    "describe-producers": s_describe_producers, "leader-failover": s_leader_failover,
}


def main():
    global BS
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "list":
        print("\n".join(SCENARIOS))
        return
    BS = sys.argv[1]
    failed = 0
    for n in sys.argv[2:] or list(SCENARIOS):
        try:
            line = "PASS " + SCENARIOS[n]()
        except (Skip, failover.Skip) as e:
            line = "SKIP %s" % e
        except Exception as e:  # noqa: BLE001
            failed += 1
            line = "FAIL %s: %s" % (type(e).__name__, str(e).replace("\n", " "))
        print("SCENARIO %s %s %s" % (CLIENT, n, line), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compatibility scenarios for kcat (librdkafka's command-line client).

    scenarios.py list
    scenarios.py BOOTSTRAP [SCENARIO...]

Topics are created beforehand with confluent-kafka's AdminClient (also librdkafka): kcat cannot create topics.
Prints one line per scenario: SCENARIO kcat NAME PASS|FAIL|SKIP detail (leader-failover SKIPs on a single node)
"""
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import failover  # noqa: E402

CLIENT = "kcat"
RUN = format(int(time.time() * 1000) % 10**9, "x") + format(random.getrandbits(16), "x")
BS = None
FMT = "%p\t%o\t%k\t%s\t%T\t%h\n"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def kcat(*args, stdin=None, timeout=45):
    p = subprocess.run(["kcat", "-b", BS, "-X", "log_level=3", *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("kcat %s exited %d: %s" % (" ".join(args[:6]), p.returncode, p.stderr.strip()[-400:]))
    return p.stdout


def create(t, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": BS, "log_level": 3})
    a.create_topics([NewTopic(t, partitions, 1)])[t].result(20)
    deadline = time.time() + 15
    while True:
        md = a.list_topics(t, timeout=10).topics.get(t)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        check(time.time() < deadline, "topic not ready")
        time.sleep(0.2)


def produce(t, partition, n, tag, *extra):
    lines = "".join("k%d-%s:v%d-%s-ünï\n" % (i, tag, i, tag) for i in range(n))
    t0 = int(time.time() * 1000)
    kcat("-P", "-t", t, "-p", str(partition), "-K", ":", "-H", "h1=%s" % tag, "-H", "h2=x", "-X", "enable.idempotence=true", *extra, stdin=lines)
    t1 = int(time.time() * 1000)
    return [dict(partition=partition, offset=i, key="k%d-%s" % (i, tag), value="v%d-%s-ünï" % (i, tag), headers="h1=%s,h2=x" % tag, t0=t0, t1=t1) for i in range(n)]


def consume(t, n, *extra):
    out = kcat("-C", "-t", t, "-o", "beginning", "-e", "-c", str(n), "-f", FMT, *extra)
    got = []
    for l in out.splitlines():
        p, o, k, v, ts, h = l.split("\t")
        got.append(dict(partition=int(p), offset=int(o), key=k, value=v, ts=int(ts), headers=h))
    return got


def verify(want, got):
    check(len(got) == len(want), "read back %d records, produced %d" % (len(got), len(want)))
    by = {(w["partition"], w["offset"]): w for w in want}
    last = {}
    for r in got:
        at = "at %d@%d" % (r["partition"], r["offset"])
        check(r["offset"] == last.get(r["partition"], -1) + 1, "out of order " + at)
        last[r["partition"]] = r["offset"]
        w = by.get((r["partition"], r["offset"]))
        check(w is not None, "unexpected record " + at)
        check((r["key"], r["value"], r["headers"]) == (w["key"], w["value"], w["headers"]), "%r != %r %s" % ((r["key"], r["value"], r["headers"]), (w["key"], w["value"], w["headers"]), at))
        check(w["t0"] - 1000 <= r["ts"] <= w["t1"] + 1000, "timestamp %d outside produce window %s" % (r["ts"], at))


def s_produce_consume():
    t = "compat-kcat-pc-" + RUN
    create(t, 3)
    want = []
    for p in range(3):
        want += produce(t, p, 20, "p%d" % p)
    verify(want, consume(t, len(want)))
    return "%d records on 3 partitions (-P -p -K -H, idempotent) read back with -C -f: keys, values, headers, timestamps, offsets" % len(want)


def s_compression():
    t = "compat-kcat-comp-" + RUN
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    create(t, len(codecs))
    want = []
    for p, c in enumerate(codecs):
        want += produce(t, p, 20, c, "-z", c)
    verify(want, consume(t, len(want)))
    return "%s: %d records verified" % (",".join(codecs), len(want))


def s_metadata():
    t = "compat-kcat-md-" + RUN
    create(t, 2)
    md = json.loads(kcat("-L", "-J", "-t", t))
    # One broker per bootstrap address (the runner lists every node of a cluster).
    check(len(md["brokers"]) == len(BS.split(",")), "brokers %r" % md["brokers"])
    ids = {b["id"] for b in md["brokers"]}
    tm = [x for x in md["topics"] if x["topic"] == t]
    check(tm and len(tm[0]["partitions"]) == 2 and all(p["leader"] in ids for p in tm[0]["partitions"]), "topic metadata %r" % tm)
    return "-L -J: every broker, topic with 2 partitions led by one of them"


def s_consume_group():
    t = "compat-kcat-grp-" + RUN
    create(t, 2)
    want = produce(t, 0, 10, "g0") + produce(t, 1, 10, "g1")
    p = subprocess.Popen(["kcat", "-b", BS, "-X", "log_level=3", "-G", "compat-kcat-grp-" + RUN, "-o", "beginning", "-c", "20", "-f", FMT, t],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("kcat -G read %d of 20 records in 25s: %s" % (len(out.splitlines()), err.strip()[-300:]))
    got = []
    for l in out.splitlines():
        pp, o, k, v, ts, h = l.split("\t")
        got.append(dict(partition=int(pp), offset=int(o), key=k, value=v, ts=int(ts), headers=h))
    got.sort(key=lambda r: (r["partition"], r["offset"]))
    verify(want, got)
    return "-G balanced consumer read 20 records from 2 partitions"


def s_leader_failover():
    """failover.run with kcat -P (idempotent, acks=all) and -C; kcat reports no offsets, so the
    read-back checks them."""
    t = "compat-kcat-failover-" + RUN

    def create_topic():
        from confluent_kafka.admin import AdminClient, NewTopic
        a = AdminClient({"bootstrap.servers": BS, "log_level": 3})
        a.create_topics([NewTopic(t, 1, 3, config=failover.TOPIC_CONFIG)])[t].result(30)

    def leader_and_isr():
        md = json.loads(kcat("-L", "-J", "-t", t, "-m", "5", timeout=20))
        part = [p for x in md["topics"] if x["topic"] == t for p in x["partitions"] if p["partition"] == 0][0]
        return part["leader"], sorted(r["id"] for r in part["isrs"])

    def produce_keys(ks):
        kcat("-P", "-t", t, "-p", "0", "-K", ":", "-X", "enable.idempotence=true", "-X", "acks=all",
             "-X", "message.timeout.ms=150000", stdin="".join("%s:v-%s\n" % (k, k) for k in ks), timeout=180)
        return None

    def consume(n):
        out = kcat("-C", "-t", t, "-p", "0", "-o", "beginning", "-c", str(n), "-f", "%o\t%k\n", timeout=90)
        return [(int(o), k) for o, k in (l.split("\t") for l in out.splitlines())]
    return failover.run(create_topic, leader_and_isr, produce_keys, consume)


SCENARIOS = {"produce-consume": s_produce_consume, "compression": s_compression, "metadata": s_metadata, "consume-group": s_consume_group,
             "leader-failover": s_leader_failover}


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
        except failover.Skip as e:
            line = "SKIP %s" % e
        except Exception as e:  # noqa: BLE001
            failed += 1
            line = "FAIL %s: %s" % (type(e).__name__, str(e).replace("\n", " "))
        print("SCENARIO %s %s %s" % (CLIENT, n, line), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

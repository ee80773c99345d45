#!/usr/bin/env python3
"""Leader failover time of a three-node sluice cluster and a three-node Apache Kafka cluster,
side by side on this machine.

    bench/failover.py [--rounds N] [--out FILE]      (bench/failover.sh sets up the venv and jars)

Each round, for each broker in turn (alternating, so that the machine's drift falls on both
alike): three combined nodes on 127.0.0.1 with their defaults (tests/clients/conftest.py's
SluiceCluster, KafkaCluster: broker.session.timeout.ms 9000, heartbeats every 2000 ms), a topic
of one partition, replication factor 3, min.insync.replicas=2, led by a node that is not the
active controller (so that what is measured is the partition's failover, not the controller's
as well). A librdkafka producer (confluent-kafka, acks=all, idempotent, defaults otherwise)
sends a record every 10 ms; after 3 s of that, the leader is killed with SIGKILL. The failover
time is from the SIGKILL to the first acknowledgement of a record produced more than 50 ms
after it, which only the new leader can give, timed as librdkafka's latency of that record has
it (from produce() to the broker's answer). With default settings both brokers wait for the dead broker's
session to expire before moving its leadership, so the figure is mostly that timeout; what
differs is what each adds to it. Prints the medians and writes every figure as JSON.
"""
import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "clients"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from conftest import KafkaCluster, SluiceCluster  # noqa: E402
from kafkautil import kafka_tool  # noqa: E402

TOPIC = "failover"
# Records produced this long after the signal count: by then the process is surely gone.
GRACE = 0.05


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def active_controller(bootstrap):
    out = kafka_tool("MetadataQuorumCommand", "--bootstrap-server", bootstrap, "describe", "--status").stdout
    return int(re.search(r"LeaderId:\s+(\d+)", out).group(1))


def leader_of(admin):
    md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    p = md.partitions[0]
    return p.leader, sorted(p.isrs)


def one_failover(kind, workdir):
    cls = SluiceCluster if kind == "sluice" else KafkaCluster
    c = cls(workdir, 3)
    c.start()
    try:
        keeper = active_controller(c.bootstrap)
        lead, second = [n for n in (1, 2, 3) if n != keeper]
        kafka_tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", TOPIC,
                   "--replica-assignment", "%d:%d:%d" % (lead, second, keeper), "--config", "min.insync.replicas=2")
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        deadline = time.time() + 60
        while leader_of(admin) != (lead, [1, 2, 3]):
            if time.time() > deadline:
                raise SystemExit("%s: the topic did not get its whole ISR: %s" % (kind, leader_of(admin)))
            time.sleep(0.2)
        acks, lock, stop = [], threading.Lock(), threading.Event()
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0, "delivery.timeout.ms": 120000})

        def delivered(err, msg, sent):
            # When the answer came (librdkafka's latency runs from produce() to the broker's
            # answer), not when the callback ran: answers the old leader sent just before its
            # kill may be handed over after it.
            if err is None:
                with lock:
                    acks.append((sent, sent + msg.latency()))

        def send():
            i = 0
            while not stop.is_set():
                p.produce(TOPIC, value=b"%d" % i, partition=0,
                          on_delivery=lambda err, msg, sent=time.monotonic(): delivered(err, msg, sent))
                p.poll(0)
                i += 1
                time.sleep(0.01)
            p.flush(130)

        t = threading.Thread(target=send)
        t.start()
        time.sleep(3)
        with lock:
            before = len(acks)
        os.kill(c.pid(lead), signal.SIGKILL)
        killed = time.monotonic()
        c.kill9(lead)  # reaps it and forgets it
        first = None
        while first is None and time.monotonic() - killed < 120:
            time.sleep(0.01)
            with lock:
                first = min((answered for sent, answered in acks[before:] if sent > killed + GRACE), default=None)
        stop.set()
        t.join()
        if first is None:
            raise SystemExit("%s: no acknowledgement within 120 s of the kill" % kind)
        new_leader = leader_of(admin)[0]
        return {"seconds": first - killed, "acked_before": before, "killed": lead, "new_leader": new_leader}
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--order", default="sluice,kafka")
    ap.add_argument("--out", default=str(HERE / "failover.json"))
    args = ap.parse_args()
    kinds = args.order.split(",")
    runs = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="sluice-failover-") as tmp:
        for r in range(args.rounds):
            for k in kinds:
                res = one_failover(k, Path(tmp) / ("%s-%d" % (k, r)))
                log("round %d %s: %.2f s (leader %d killed, %d now leads)" % (r + 1, k, res["seconds"], res["killed"], res["new_leader"]))
                runs[k].append(res)
    summary = {k: {"median_s": statistics.median(x["seconds"] for x in v), "runs": v} for k, v in runs.items()}
    for k, v in summary.items():
        log("%s: median %.2f s over %d rounds: %s" % (k, v["median_s"], len(v["runs"]),
                                                     ", ".join("%.2f" % x["seconds"] for x in v["runs"])))
    if {"sluice", "kafka"} <= set(summary):
        log("ratio sluice/kafka: %.2f" % (summary["sluice"]["median_s"] / summary["kafka"]["median_s"]))
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Replicated produce throughput, end-to-end latency, CPU and memory of a three-node sluice
cluster and a three-node Apache Kafka cluster, side by side on this machine.

    bench/replicated.py [--rounds N] [--records N] [--out FILE]   (bench/replicated.sh sets up the venv and jars)

Each round, for each broker in turn (alternating, so that the machine's drift falls on both
alike): three combined nodes on 127.0.0.1 with their defaults (tests/clients/conftest.py's
SluiceCluster, KafkaCluster), two topics with replication factor 3 and min.insync.replicas=2,
created once every partition has its whole ISR:
- throughput: Kafka's own kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance)
  sends --records records of 1 KiB to a topic of 6 partitions, as fast as it can, acks=all
  (idempotent, the Java client's defaults otherwise); records/s, MB/s and the tool's own
  latency percentiles (send to acknowledgement). The three nodes' CPU seconds over the run
  (utime + stime from /proc, every thread) give CPU seconds per GB written.
- end-to-end latency: Kafka's kafka-e2e-latency (org.apache.kafka.tools.EndToEndLatency) sends
  2000 records of 1 KiB one at a time, acks=all, to a topic of one partition and waits for each
  to be consumed before the next: a record is readable once every in-sync replica has it, so
  this is the replication round trip as a client sees it. The tool's average (in fractions of
  a millisecond) and its p50, p99, p99.9 (whole milliseconds).
- resident memory of each node after both.
The clients run on the same two cores as the brokers, alike for both. Prints medians and the
sluice/Kafka ratios and writes every figure as JSON.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "clients"))

from confluent_kafka.admin import AdminClient  # noqa: E402

from conftest import KafkaCluster, SluiceCluster  # noqa: E402
from kafkautil import KAFKA_LIBS, kafka_tool  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
PERF_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                     r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")
E2E_RE = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)")
E2E_AVG_RE = re.compile(r"Avg latency: ([\d.]+) ms")
RECORD = 1024
E2E_RECORDS = 2000


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rss_mib(pid):
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def java_tool(cls, *args, timeout=600):
    r = subprocess.run(["java", "-cp", str(KAFKA_LIBS / "*"), "org.apache.kafka.tools." + cls, *args],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s\n%s" % (cls, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return r.stdout


def full_isr(admin, topic, partitions):
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    return md is not None and md.error is None and len(md.partitions) == partitions and all(
        sorted(p.isrs) == [1, 2, 3] and p.leader >= 0 for p in md.partitions.values())


def one_round(kind, workdir, records):
    cls = SluiceCluster if kind == "sluice" else KafkaCluster
    c = cls(workdir, 3)
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for topic, parts in (("replicated", 6), ("e2e", 1)):
            kafka_tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
                       "--partitions", str(parts), "--replication-factor", "3", "--config", "min.insync.replicas=2")
            deadline = time.time() + 60
            while not full_isr(admin, topic, parts):
                if time.time() > deadline:
                    raise SystemExit("%s: %s did not get its whole ISR" % (kind, topic))
                time.sleep(0.2)
        pids = [c.pid(n) for n in (1, 2, 3)]
        before = sum(cpu_s(p) for p in pids)
        out = java_tool("ProducerPerformance", "--topic", "replicated", "--num-records", str(records),
                        "--record-size", str(RECORD), "--throughput", "-1",
                        "--producer-props", "bootstrap.servers=%s" % c.bootstrap, "acks=all", "enable.idempotence=true")
        used = sum(cpu_s(p) for p in pids) - before
        m = None
        for line in out.splitlines():
            m = PERF_RE.search(line) or m
        if not m:
            raise SystemExit("%s: no summary from ProducerPerformance:\n%s" % (kind, out[-2000:]))
        sent = int(m.group(1))
        gb = sent * RECORD / 1e9
        res = {"records": sent, "rps": float(m.group(2)), "mbps": float(m.group(3)),
               "client_p50_ms": float(m.group(7)), "client_p99_ms": float(m.group(9)),
               "cpu_s": used, "cpu_s_per_gb": used / gb}
        out = java_tool("EndToEndLatency", c.bootstrap, "e2e", str(E2E_RECORDS), "all", str(RECORD))
        e, avg = E2E_RE.search(out), E2E_AVG_RE.search(out)
        if not e or not avg:
            raise SystemExit("%s: no percentiles from EndToEndLatency:\n%s" % (kind, out[-2000:]))
        res.update({"e2e_avg_ms": float(avg.group(1)), "e2e_p50_ms": float(e.group(1)), "e2e_p99_ms": float(e.group(2)), "e2e_p999_ms": float(e.group(3))})
        res["rss_mib"] = [rss_mib(p) for p in pids]
        return res
    finally:
        c.close()


KEYS = [("rps", "records/s", "%.0f"), ("mbps", "MB/s", "%.1f"), ("client_p50_ms", "producer p50 ms", "%.0f"),
        ("client_p99_ms", "producer p99 ms", "%.0f"), ("cpu_s_per_gb", "broker CPU s/GB", "%.1f"),
        ("e2e_avg_ms", "e2e avg ms", "%.3f"), ("e2e_p50_ms", "e2e p50 ms", "%.0f"), ("e2e_p99_ms", "e2e p99 ms", "%.0f"), ("e2e_p999_ms", "e2e p99.9 ms", "%.0f"),
        ("rss_mib_max", "largest node RSS MiB", "%.0f")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--order", default="sluice,kafka")
    ap.add_argument("--out", default=str(HERE / "replicated.json"))
    args = ap.parse_args()
    kinds = args.order.split(",")
    runs = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="sluice-replicated-") as tmp:
        for r in range(args.rounds):
            for k in kinds:
                res = one_round(k, Path(tmp) / ("%s-%d" % (k, r)), args.records)
                res["rss_mib_max"] = max(x for x in res["rss_mib"] if x is not None)
                log("round %d %s: %s" % (r + 1, k, ", ".join("%s %s" % (label, fmt % res[key]) for key, label, fmt in KEYS)))
                runs[k].append(res)
    summary = {k: {"medians": {key: statistics.median(x[key] for x in v) for key, _, _ in KEYS}, "runs": v}
               for k, v in runs.items()}
    for key, label, fmt in KEYS:
        row = ["%s %s" % (k, fmt % summary[k]["medians"][key]) for k in kinds]
        if {"sluice", "kafka"} <= set(summary) and summary["kafka"]["medians"][key]:
            row.append("ratio %.2f" % (summary["sluice"]["medians"][key] / summary["kafka"]["medians"][key]))
        log("median %s: %s" % (label, ", ".join(row)))
    Path(args.out).write_text(json.dumps({"rounds": args.rounds, "records": args.records, "record_bytes": RECORD,
                                          "e2e_records": E2E_RECORDS, "results": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()

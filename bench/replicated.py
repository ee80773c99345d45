#!/usr/bin/env python3
"""Replicated produce throughput, end-to-end latency, CPU and memory of a three-node sluice
cluster and a three-node Apache Kafka cluster, side by side on this machine.

    bench/replicated.py [--rounds N] [--records N] [--out FILE]   (bench/replicated.sh builds rdkbench, the venv and the jars)

Each round, for each broker in turn (alternating, so that the machine's drift falls on both
alike): three combined nodes on 127.0.0.1 with their defaults (tests/clients/conftest.py's
SluiceCluster, KafkaCluster), two topics with replication factor 3 and min.insync.replicas=2,
measured once every partition has its whole ISR:
- throughput: librdkafka (bench/rdkbench.c `produce`) sends --records records of 1 KiB to a
  topic of 6 partitions as fast as it takes them, acks=all, idempotent, its defaults otherwise;
  records/s and MiB/s to the last acknowledgement. The three nodes' CPU seconds over the run
  (utime + stime from /proc, every thread) give CPU seconds per GiB written.
- end-to-end latency at a fixed moderate rate: rdkbench `latency` produces 1,000 records/s of
  1 KiB, acks=all, to a topic of one partition for 10 s (after 2 s of warm-up) and a consumer in
  the same process reads them; a record is readable once every in-sync replica has it, so this
  is the replication round trip as a client sees it. Mean, p50, p99, p99.9 in ms.
- resident memory of each node after both.
The clients run on the same two cores as the brokers, alike for both. Prints medians and the
sluice/Kafka ratios and writes every figure as JSON.
"""
import argparse
import json
import os
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
from kafkautil import kafka_tool  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
RDK = os.environ.get("RDKBENCH", str(HERE.parent / ".cache" / "rdkbench"))
RECORD = 1024
LAT_RATE, LAT_SECS, LAT_WARMUP = 1000, 10, 2


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


def rdkbench(*args, timeout=600):
    """Runs rdkbench; returns its JSON line."""
    r = subprocess.run([RDK, *args], capture_output=True, text=True, timeout=timeout)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise SystemExit("rdkbench %s failed (exit %d):\n%s\n%s" % (args[0], r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return json.loads(lines[-1])


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
        out = rdkbench("produce", "-b", c.bootstrap, "-t", "replicated", "-n", str(records), "-s", str(RECORD),
                       "-X", "acks=all", "-X", "enable.idempotence=true")
        used = sum(cpu_s(p) for p in pids) - before
        if out["failed"]:
            raise SystemExit("%s: %d records failed: %s" % (kind, out["failed"], out["first_error"]))
        gib = out["records"] * RECORD / 2**30
        res = {"records": out["records"], "rps": out["rps"], "mibps": out["mbps"], "cpu_s": used, "cpu_s_per_gib": used / gib}
        lat = rdkbench("latency", "-b", c.bootstrap, "-t", "e2e", "-r", str(LAT_RATE), "-d", str(LAT_SECS), "-w", str(LAT_WARMUP),
                       "-s", str(RECORD), "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=0")
        res.update({"e2e_mean_ms": lat["mean_ms"], "e2e_p50_ms": lat["p50_ms"], "e2e_p99_ms": lat["p99_ms"],
                    "e2e_p999_ms": lat["p999_ms"], "e2e_max_ms": lat["max_ms"]})
        res["rss_mib"] = [rss_mib(p) for p in pids]
        return res
    finally:
        c.close()


KEYS = [("rps", "records/s", "%.0f"), ("mibps", "MiB/s", "%.1f"), ("cpu_s_per_gib", "broker CPU s/GiB", "%.1f"),
        ("e2e_mean_ms", "e2e mean ms", "%.2f"), ("e2e_p50_ms", "e2e p50 ms", "%.2f"), ("e2e_p99_ms", "e2e p99 ms", "%.2f"),
        ("e2e_p999_ms", "e2e p99.9 ms", "%.2f"), ("rss_mib_max", "largest node RSS MiB", "%.0f")]


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
                                          "latency_rate": LAT_RATE, "latency_secs": LAT_SECS, "results": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()

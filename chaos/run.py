#!/usr/bin/env python3
"""A Jepsen-style run: writers, readers and a nemesis against a real 3-node cluster.

    chaos/run.py [--target sluice|kafka] [--duration S] [--acks all|1] [--unclean] [--seed N]
                 [--faults kill,pause,strand-leader,partition,cut-link] [--summary FILE]
                 [--expect-loss]

- The cluster: three combined nodes as real processes, sluice (each started from a Kafka-style
  server.properties, tests/clients/conftest.py's SluiceCluster) or Apache Kafka (KafkaCluster,
  compat/kafka/kafka-ref.sh), each in a network namespace of its own with an address of its own
  (chaos/net.py; needs root), or all on 127.0.0.1 without the partition faults. One topic,
  replication factor 3, min.insync.replicas=2.
- Writers: librdkafka producers (confluent-kafka), idempotent with acks=all (or plain acks=1),
  each writing unique values "<producer>-<seq>" round-robin over the partitions at a steady
  rate. The delivery and request timeouts (120 s, 45 s) are far above any fault: a librdkafka
  idempotent producer whose send times out re-sends under new sequence numbers, a duplicate no
  broker can see.
- Readers: consumers with assign (no group), reading from the start and now and then seeking
  back to an earlier offset; every record they poll is recorded in order.
- Nemesis: every few seconds one fault, leaders preferred as targets: kill -9 and a restart a
  few seconds later; SIGSTOP and SIGCONT a few seconds later; a node cut off from the other two
  (clients still reach it) or one link between two nodes cut, for up to twelve seconds (longer
  than the session timeout, so the cut-off node is fenced and its leaderships move); or a leader
  stranded (its two followers paused, then the leader killed and the followers resumed; see
  `nemesis`).
- At the end every fault is healed, the run waits for every ISR to be whole, the writers flush,
  and one read of every partition from its start to its high watermark is the final read.
  chaos/checker.py says what the history shows wrong; the summary (JSON) is written to
  --summary. Exit status 1 when any anomaly is found (with --expect-loss: when none is lost).
"""
import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "clients"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from checker import Write, check  # noqa: E402
from conftest import KafkaCluster, SluiceCluster  # noqa: E402
from net import Mesh  # noqa: E402

TOPIC = "chaos"
PARTITIONS = 6
# Short enough that a paused or killed follower leaves the ISR within one fault.
# Each node in a rack of its own with Kafka's rack-aware replica selector: readers in another
# rack than a partition's leader read from a follower (KIP-392), under the same faults.
CLUSTER_CONFIG = {"replica.lag.time.max.ms": "5000", "offsets.topic.replication.factor": "3",
                  "broker.rack": "rack-{node}", "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Cluster:
    """The same faults on either kind of cluster: kill -9 / start, SIGSTOP / SIGCONT, and with a
    mesh of namespaces, links cut and healed."""

    def __init__(self, target, workdir, mesh):
        self.target, self.mesh = target, mesh
        net = {"hosts": {i: mesh.host(i) for i in mesh.nodes}, "wrap": mesh.wrap} if mesh else {}
        cls = SluiceCluster if target == "sluice" else KafkaCluster
        self.c = cls(workdir, 3, CLUSTER_CONFIG, **net)
        self.c.start()
        self.down, self.paused = set(), set()

    @property
    def bootstrap(self):
        return self.c.bootstrap

    def pid(self, node):
        return self.c.pid(node)

    def kill9(self, node):
        if self.target == "sluice":
            self.c.kill9(node)
        else:
            self.c.kill9(node)
        self.down.add(node)

    def start(self, node):
        if self.target == "sluice":
            self.c.start(node, wait=False)
        else:
            self.c.start(node)
        self.down.discard(node)

    def pause(self, node):
        os.kill(self.pid(node), signal.SIGSTOP)
        self.paused.add(node)

    def resume(self, node):
        os.kill(self.pid(node), signal.SIGCONT)
        self.paused.discard(node)

    def heal(self):
        if self.mesh:
            self.mesh.heal()
        for n in list(self.paused):
            self.resume(n)
        for n in list(self.down):
            self.start(n)

    def close(self):
        for n in list(self.paused):
            try:
                self.resume(n)
            except (OSError, KeyError, ValueError):
                pass
        self.c.close()


def topic_state(admin):
    """partition -> (leader, replicas, isr), or None when the metadata is not to be had."""
    try:
        md = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
        if md.error is not None:
            return None
        return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.partitions.items()}
    except KafkaException:
        return None


class Writer(threading.Thread):
    def __init__(self, ident, bootstrap, acks, rate, writes, lock, stop):
        super().__init__(daemon=True)
        self.num, self.rate, self.writes, self.lock, self.stop = ident, rate, writes, lock, stop
        # Both timeouts are far above the longest fault (12 s): when a produce request times out
        # in the client, librdkafka's idempotent producer may bump its epoch and send what was
        # in flight again under new sequence numbers, a duplicate no broker can detect (seen
        # against Kafka 4.4 with a 10 s request timeout and 12 s partitions: the same 729
        # records at producer epoch 1 and again at epoch 2, sequence 0).
        conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "delivery.timeout.ms": 120000,
                "request.timeout.ms": 45000, "enable.idempotence": acks == "all", "log_level": 2}
        self.p = Producer(conf)
        self.sent = 0
        self.flush_left = None

    def on_delivery(self, err, msg):
        v = msg.value().decode()
        with self.lock:
            w = self.writes[v]
            if err is None:
                w.status, w.offset = "ok", msg.offset()
            else:
                w.status, w.error = "fail", str(err)

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due and not self.stop.is_set():
                v = "%d-%d" % (self.num, self.sent)
                part = self.sent % PARTITIONS
                with self.lock:
                    self.writes[v] = Write(self.num, self.sent, part)
                try:
                    self.p.produce(TOPIC, value=v.encode(), partition=part, on_delivery=self.on_delivery)
                except BufferError:
                    with self.lock:
                        del self.writes[v]
                    break
                self.sent += 1
            self.p.poll(0.01)
        self.flush_left = self.p.flush(180)


class Reader(threading.Thread):
    def __init__(self, ident, bootstrap, seed, events, stop):
        super().__init__(daemon=True)
        self.num, self.events, self.stop = ident, events, stop
        self.rng = random.Random(seed)
        # Reader i sits in rack i % 3 + 1: some of its partitions are read from a follower.
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader-%d" % ident,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "enable.partition.eof": False, "log_level": 2, "client.rack": "rack-%d" % (ident % 3 + 1),
                           "statistics.interval.ms": 1000, "stats_cb": self._stats})
        self.errors = 0
        # Once a second, each partition this reader fetched from a follower rather than its leader.
        self.follower_fetch_samples = 0

    def _stats(self, raw):
        parts = json.loads(raw).get("topics", {}).get(TOPIC, {}).get("partitions", {})
        self.follower_fetch_samples += sum(1 for p in parts.values() if 0 <= p.get("leader", -1) != p.get("broker", -1) >= 0)

    def run(self):
        self.c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            self.events.append(("seek", p))
        last = {}
        next_seek = time.monotonic() + self.rng.uniform(5, 15)
        while not self.stop.is_set():
            for m in self.c.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    self.errors += 1
                    continue
                self.events.append(("read", m.partition(), m.offset(), m.value().decode()))
                last[m.partition()] = m.offset()
            if time.monotonic() > next_seek and last:
                p = self.rng.choice(sorted(last))
                to = self.rng.randint(0, last[p])
                self.events.append(("seek", p))
                self.c.seek(TopicPartition(TOPIC, p, to))
                next_seek = time.monotonic() + self.rng.uniform(5, 15)
        self.c.close()


def final_read(bootstrap, timeout=120):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    pos = {p: 0 for p in range(PARTITIONS)}
    deadline = time.time() + timeout
    while any(pos[p] < ends[p] for p in ends) and time.time() < deadline:
        for m in c.consume(num_messages=1000, timeout=0.5):
            if m.error() is None:
                got[m.partition()].append((m.offset(), m.value().decode()))
                pos[m.partition()] = m.offset() + 1
    c.close()
    short = {p: (pos[p], ends[p]) for p in ends if pos[p] < ends[p]}
    return got, ends, short


FAULTS = ("kill", "pause", "strand-leader", "partition", "cut-link")
NET_FAULTS = ("partition", "cut-link")


def nemesis(cluster, admin, rng, stop, interval, kinds, faults):
    """One fault at a time. kill: kill -9 a node, start it again after a few seconds. pause:
    SIGSTOP a node, SIGCONT it after a few seconds. strand-leader: SIGSTOP both other nodes
    (the leader's followers, and a quorum majority) for less than replica.lag.time.max.ms, so
    the leader is alone with an ISR that still names them; kill -9 the leader; SIGCONT the
    others, which elect one of themselves once the leader is fenced; start the old leader again. What the leader
    acknowledged alone is what acks=1 loses; acks=all acknowledges none of it. partition: cut a
    node off from the other two (not from the clients) for a few seconds, or longer than the
    session timeout. cut-link: cut the link between two nodes only (each still reaches the
    third)."""
    while not stop.wait(rng.uniform(interval / 2, interval)):
        state = topic_state(admin) or {}
        leaders = [l for l, _, _ in state.values() if l and l > 0]
        kind = rng.choice(kinds)
        if kind == "strand-leader" and not leaders:
            kind = "kill"
        node = rng.choice(leaders) if leaders and (kind == "strand-leader" or rng.random() < 0.7) else rng.randint(1, 3)
        hold = {"strand-leader": rng.uniform(2, 4), "partition": rng.uniform(3, 12),
                "cut-link": rng.uniform(3, 12)}.get(kind) or rng.uniform(2, 6)
        if kind == "cut-link":
            other = rng.choice([n for n in (1, 2, 3) if n != node])
            faults.append({"at": time.time(), "fault": kind, "nodes": [node, other], "seconds": round(hold, 1)})
            log("nemesis: cut the link %d-%d for %.1f s" % (node, other, hold))
            cluster.mesh.cut_link(node, other)
            stop.wait(hold)
            cluster.mesh.heal()
            continue
        faults.append({"at": time.time(), "fault": kind, "node": node, "seconds": round(hold, 1)})
        log("nemesis: %s node %d for %.1f s" % (kind, node, hold))
        if kind == "kill":
            cluster.kill9(node)
            stop.wait(hold)
            cluster.start(node)
        elif kind == "pause":
            cluster.pause(node)
            stop.wait(hold)
            cluster.resume(node)
        elif kind == "partition":
            cluster.mesh.isolate(node)
            stop.wait(hold)
            cluster.mesh.heal()
        else:
            others = [n for n in (1, 2, 3) if n != node]
            for n in others:
                cluster.pause(n)
            stop.wait(hold)
            cluster.kill9(node)
            for n in others:
                cluster.resume(n)
            # A quick restart would find the killed leader's log intact in the page cache and its
            # leadership not yet moved; keep it down until the controller has fenced it and
            # elected new leaders (broker.session.timeout.ms), as a lost machine would be.
            deadline = time.time() + 30
            while not stop.wait(0.5) and time.time() < deadline:
                s = topic_state(admin)
                if s and all(l != node and l > 0 for l, _, _ in s.values()):
                    break
            cluster.start(node)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["sluice", "kafka"], default="sluice")
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--interval", type=float, default=8, help="at most this many seconds between faults")
    ap.add_argument("--acks", choices=["all", "1"], default="all")
    ap.add_argument("--faults", help="which of %s the nemesis uses (default: all; without the "
                    "partitions when not root)" % ", ".join(FAULTS))
    ap.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true on the topic")
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=300, help="records per second per writer")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--net", type=int, default=0, help="the network mesh's number, 0-9 (two runs at once need two)")
    ap.add_argument("--workdir")
    ap.add_argument("--summary")
    ap.add_argument("--expect-loss", action="store_true", help="succeed only if writes were lost (a self-check)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = os.geteuid() == 0
    kinds = args.faults.split(",") if args.faults else [k for k in FAULTS if root or k not in NET_FAULTS]
    if not kinds or any(k not in FAULTS for k in kinds):
        ap.error("--faults: each of %s, comma-separated (got %r)" % (", ".join(FAULTS), args.faults))
    if not root and any(k in NET_FAULTS for k in kinds):
        ap.error("--faults %s: network partitions need root (network namespaces)" % args.faults)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sluice-chaos-"))
    log("chaos: target=%s duration=%ss acks=%s unclean=%s faults=%s seed=%d workdir=%s" % (
        args.target, args.duration, args.acks, args.unclean, ",".join(kinds), args.seed, workdir))

    mesh = Mesh(3, args.net).setup() if root else None
    cluster = None
    try:
        cluster = Cluster(args.target, workdir, mesh)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        config = {"min.insync.replicas": "2", "unclean.leader.election.enable": str(args.unclean).lower()}
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config=config)])[TOPIC].result(60)
        wait_isr(admin, 60)

        writes, lock = {}, threading.Lock()
        stop_writers, stop_readers, stop_nemesis = threading.Event(), threading.Event(), threading.Event()
        writers = [Writer(i, cluster.bootstrap, args.acks, args.rate, writes, lock, stop_writers)
                   for i in range(args.writers)]
        polls = {"r%d" % i: [] for i in range(args.readers)}
        readers = [Reader(i, cluster.bootstrap, args.seed + i, polls["r%d" % i], stop_readers)
                   for i in range(args.readers)]
        faults = []
        nem = threading.Thread(target=nemesis, args=(cluster, admin, rng, stop_nemesis, args.interval, kinds, faults),
                               daemon=True)
        for t in writers + readers:
            t.start()
        nem.start()
        time.sleep(args.duration)

        stop_nemesis.set()
        nem.join(60)
        cluster.heal()
        log("healed; waiting for every ISR to be whole")
        healed = wait_isr(admin, 180)
        stop_writers.set()
        for w in writers:
            w.join(240)
        time.sleep(3)
        stop_readers.set()
        for r in readers:
            r.join(60)
        final, ends, short = final_read(cluster.bootstrap)

        result = check(writes, polls, final)
        statuses = {}
        for w in writes.values():
            statuses[w.status] = statuses.get(w.status, 0) + 1
        summary = {
            "target": args.target, "seed": args.seed, "duration_s": args.duration, "acks": args.acks,
            "unclean": args.unclean, "fault_mix": kinds, "partitions": PARTITIONS, "replication_factor": 3, "min_insync_replicas": 2,
            "cluster_config": CLUSTER_CONFIG,
            "faults": len(faults), "fault_kinds": {k: sum(1 for f in faults if f["fault"] == k) for k in kinds},
            "isr_whole_after_heal": healed,
            "writes": len(writes), "write_outcomes": statuses,
            "acknowledged_without_offset": sum(1 for w in writes.values() if w.status == "ok" and w.offset is None),
            "unflushed": [w.flush_left for w in writers],
            "reads": sum(1 for ev in polls.values() for e in ev if e[0] == "read"),
            "reader_errors": sum(r.errors for r in readers),
            "follower_fetch_samples": sum(r.follower_fetch_samples for r in readers),
            "final_read": {"records": sum(len(v) for v in final.values()), "high_watermarks": ends,
                           "short": short},
            "anomalies": result["counts"], "examples": result["examples"],
        }
    finally:
        if cluster:
            cluster.close()
        if mesh:
            mesh.teardown()

    text = json.dumps(summary, indent=2, sort_keys=True)
    if args.summary:
        Path(args.summary).write_text(text + "\n")
    print(text)
    bad = {k: v for k, v in summary["anomalies"].items() if v}
    incomplete = bool(summary["final_read"]["short"]) or statuses.get("unknown", 0) > 0
    if args.expect_loss:
        ok = summary["anomalies"]["lost"] > 0
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        log("self-check: %s" % ("the checker found lost writes, as expected" if ok else "NO LOSS FOUND"))
        return 0 if ok else 1
    if bad or incomplete:
        log("FAILED: anomalies %s%s; the nodes' data and logs are kept in %s" % (
            bad, ", final read or writes incomplete" if incomplete else "", workdir))
        return 1
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    log("OK: %d writes, %d acknowledged, no anomaly" % (len(writes), statuses.get("ok", 0)))
    return 0


def wait_isr(admin, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = topic_state(admin)
        if s and len(s) == PARTITIONS and all(l > 0 and sorted(i) == sorted(r) for l, r, i in s.values()):
            return True
        time.sleep(0.5)
    return False


if __name__ == "__main__":
    sys.exit(main())

"""Client-side helpers shared by the tests (confluent-kafka / librdkafka, Kafka's own tools)."""
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


KAFKA_LIBS = Path(__file__).resolve().parents[2] / ".cache" / "kafka-4.4.0" / "libs"


def kafka_tool(cls, *args, check=True):
    """Runs one of Kafka's tools (org.apache.kafka.tools.<cls>) from the fetched jars; with
    `check`, fails the test on a non-zero exit. Returns the CompletedProcess."""
    r = subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-cp", str(KAFKA_LIBS / "*"), "org.apache.kafka.tools." + cls, *args],
                       capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, "%s %s failed:\n%s\n%s" % (cls, args, r.stdout, r.stderr)
    return r


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, name, partitions=1, config=None, timeout=30):
    a = admin(bootstrap)  # keep a reference: the futures fail if the handle is destroyed
    fs = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout, request_timeout=timeout)
    fs[name].result(timeout)
    wait_for_topic(bootstrap, name, partitions)
    return name


def wait_for_topic(bootstrap, name, partitions, timeout=30):
    a = admin(bootstrap)
    deadline = time.time() + timeout
    while True:
        md = a.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return md
        if time.time() > deadline:
            raise AssertionError("topic %s not ready: %r" % (name, t and (t.error, t.partitions)))
        time.sleep(0.2)


class Delivery:
    """Collects delivery reports keyed by record key."""

    def __init__(self):
        self.ok = {}      # key -> (partition, offset)
        self.failed = {}  # key -> KafkaError
        self.count = 0

    def __call__(self, err, msg):
        self.count += 1
        k = msg.key()
        if err is not None:
            self.failed[k] = err
        else:
            self.ok[k] = (msg.partition(), msg.offset())


def producer(bootstrap, **conf):
    c = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    c.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(c)


def make_records(n, partitions, prefix="k", base_ts=None, value_size=None):
    """Deterministic records: dicts with key, value, headers, partition, timestamp."""
    base_ts = base_ts if base_ts is not None else int(time.time() * 1000) - 60_000
    recs = []
    for i in range(n):
        size = value_size if value_size is not None else (i * 37) % 700
        value = (("v%06d:" % i) + ("abcdefghij" * (size // 10 + 1))[:size]).encode()
        headers = [("h-idx", str(i).encode()), ("h-dup", b"first"), ("h-dup", b"second-%d" % i)]
        if i % 10 == 0:
            headers.append(("h-empty", b""))
        recs.append({"key": ("%s-%06d" % (prefix, i)).encode(), "value": value, "headers": headers,
                     "partition": i % partitions, "timestamp": base_ts + i})
    return recs


def produce_all(p, topic, recs, delivery=None, flush_timeout=60):
    delivery = delivery or Delivery()
    for r in recs:
        while True:
            try:
                p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"],
                          partition=r["partition"], timestamp=r["timestamp"], on_delivery=delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(flush_timeout)
    assert left == 0, "%d records not delivered within %ss" % (left, flush_timeout)
    return delivery


def consumer(bootstrap, **conf):
    c = {"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
         "auto.offset.reset": "earliest", "enable.partition.eof": True}
    c.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(c)


def norm_headers(h):
    return [(k, v if v is not None else b"") for k, v in (h or [])]


def consume_partitions(bootstrap, topic, partitions, start=0, timeout=60, expect=None):
    """assign() every partition at `start`, read until EOF on all (and `expect` total records).

    Returns {partition: [record dicts in offset order]}."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        eof = set()
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    total = sum(len(v) for v in out.values())
                    if len(eof) == partitions and (expect is None or total >= expect):
                        break
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            ts_type, ts = m.timestamp()
            out[m.partition()].append({"key": m.key(), "value": m.value(), "headers": norm_headers(m.headers()),
                                       "partition": m.partition(), "offset": m.offset(),
                                       "timestamp": ts, "timestamp_type": ts_type})
        else:
            total = sum(len(v) for v in out.values())
            raise AssertionError("timed out reading %s: got %d records, eof on %s" % (topic, total, sorted(eof)))
        return out
    finally:
        c.close()


def watermarks(bootstrap, topic, partitions):
    c = consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
                for p in range(partitions)}
    finally:
        c.close()


def offsets_for_times(bootstrap, topic, partition_ts):
    """partition_ts: {partition: timestamp_ms} -> {partition: offset}"""
    c = consumer(bootstrap)
    try:
        res = c.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in partition_ts.items()], timeout=15)
        for tp in res:
            assert tp.error is None, tp.error
        return {tp.partition: tp.offset for tp in res}
    finally:
        c.close()


def assert_same_records(expected, got_by_partition, check_contiguous_from=0):
    """expected: list of record dicts (from make_records) in produce order.
    Checks per-partition order, offsets contiguous from `check_contiguous_from`, and all fields."""
    exp_by_p = {}
    for r in expected:
        exp_by_p.setdefault(r["partition"], []).append(r)
    for p, exp in exp_by_p.items():
        got = got_by_partition.get(p, [])
        assert len(got) == len(exp), "partition %d: expected %d records, got %d" % (p, len(exp), len(got))
        offsets = [g["offset"] for g in got]
        assert offsets == list(range(check_contiguous_from, check_contiguous_from + len(exp))), \
            "partition %d offsets not contiguous: %s..." % (p, offsets[:20])
        for e, g in zip(exp, got):
            assert g["key"] == e["key"], (p, g["offset"], g["key"], e["key"])
            assert g["value"] == e["value"], (p, g["offset"], e["key"])
            assert g["headers"] == e["headers"], (p, g["offset"], g["headers"], e["headers"])
            assert g["timestamp"] == e["timestamp"], (p, g["offset"], g["timestamp"], e["timestamp"])
            assert g["timestamp_type"] == 1, "expected CreateTime (1), got %r" % g["timestamp_type"]
            assert g["partition"] == p

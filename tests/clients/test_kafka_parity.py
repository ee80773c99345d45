"""Behaviours where sluice must answer as Apache Kafka does, each run against both brokers in the
same test run (sluice, and real Kafka 4.x through compat/kafka/kafka-ref.sh), whatever TARGET is:

- a KIP-848 consumer whose regex matches an internal topic's name is assigned its partitions
  (Kafka resolves subscription regexes against every topic, internal ones included);
- a record without a key produced to a compacted topic fails with INVALID_RECORD while a keyed
  one is appended (the KIP-467 record error itself is compared field by field with Kafka's in
  protocol-tests/edge_cases.py).
"""
import time

import pytest

from kafkautil import Consumer, KafkaError, TopicPartition, create_topic, producer, unique

# The same number of __consumer_offsets partitions on both brokers (kafka-ref.sh uses 5).
OVERRIDES = {"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0"}
OFFSETS_PARTITIONS = 5


@pytest.fixture(scope="module", params=["sluice", "kafka"])
def each_broker(request, tmp_path_factory):
    from conftest import Broker
    b = Broker(tmp_path_factory.mktemp("parity-" + request.param), target=request.param, overrides=OVERRIDES)
    b.start()
    yield b
    b.close()


def test_a_kip848_regex_matching_an_internal_topic_is_assigned_its_partitions(each_broker):
    b = each_broker.bootstrap
    # A committed offset makes both brokers create __consumer_offsets before the regex is resolved.
    t = create_topic(b, unique("parity-regex"), 1)
    classic = Consumer({"bootstrap.servers": b, "group.id": unique("g-classic"), "enable.auto.commit": False})
    try:
        classic.commit(offsets=[TopicPartition(t, 0, 0)], asynchronous=False)
    finally:
        classic.close()
    c = Consumer({"bootstrap.servers": b, "group.id": unique("g-regex"), "group.protocol": "consumer",
                  "auto.offset.reset": "latest", "enable.auto.commit": False})
    try:
        c.subscribe(["^__consumer_offs.*"])
        deadline = time.time() + 60
        assigned = set()
        while time.time() < deadline and len(assigned) < OFFSETS_PARTITIONS:
            c.poll(0.2)
            assigned = {(tp.topic, tp.partition) for tp in c.assignment()}
        assert assigned == {("__consumer_offsets", p) for p in range(OFFSETS_PARTITIONS)}, \
            "%s assigned %r" % (each_broker.target, sorted(assigned))
    finally:
        c.close()


def test_a_keyless_record_to_a_compacted_topic_fails_with_invalid_record_and_a_keyed_one_is_appended(each_broker):
    b = each_broker.bootstrap
    t = create_topic(b, unique("parity-compact"), 1, config={"cleanup.policy": "compact"})
    reports = []
    p = producer(b, **{"linger.ms": 0})

    def delivered(err, msg):
        reports.append((err, msg.key(), msg.offset()))

    # One at a time: a batch mixing both would be refused whole.
    p.produce(t, value=b"no key", partition=0, on_delivery=delivered)
    assert p.flush(30) == 0
    p.produce(t, key=b"k", value=b"keyed", partition=0, on_delivery=delivered)
    assert p.flush(30) == 0
    (err0, key0, _), (err1, key1, off1) = reports
    assert key0 is None and err0 is not None and err0.code() == KafkaError.INVALID_RECORD, \
        "%s: keyless record: %r" % (each_broker.target, err0)
    assert key1 == b"k" and err1 is None and off1 == 0, "%s: keyed record: %r at %r" % (each_broker.target, err1, off1)
    c = Consumer({"bootstrap.servers": b, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(t, 0, 0)])
        deadline, got = time.time() + 30, []
        while time.time() < deadline and not got:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.key(), m.value()))
        assert got == [(0, b"k", b"keyed")], "%s: %r" % (each_broker.target, got)
    finally:
        c.close()

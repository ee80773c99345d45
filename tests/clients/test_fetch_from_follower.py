"""Fetch from follower (KIP-392) on a three-node sluice cluster and, for comparison, on a
three-node Apache Kafka cluster, each node in a rack of its own (`broker.rack=rack-N`) with
Kafka's rack-aware replica selector: librdkafka consumers that say which rack they are in
(`client.rack`) read a partition led by broker 1 from broker 2 when they are in rack 2 (its
statistics name broker 2 as the one it fetches from), and from the leader when they are in rack
1 or say no rack; either way they read every acknowledged record, in order, at its offset, and
records produced while a consumer sits on the follower reach it too.
"""
import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafkautil import make_records, produce_all, producer, unique
from test_cluster import describe, tool, wait_until

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


class Reader:
    """A librdkafka consumer assigned partition 0 from offset 0, with statistics: which broker
    it fetches the partition from (`broker` in the partition's statistics)."""

    def __init__(self, bootstrap, topic, rack):
        self.topic = topic
        self.fetching_from = None
        conf = {"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
                "enable.partition.eof": True, "statistics.interval.ms": 200, "stats_cb": self._stats}
        if rack:
            conf["client.rack"] = rack
        self.c = Consumer(conf)
        self.c.assign([TopicPartition(topic, 0, 0)])
        self.got = []

    def _stats(self, raw):
        p = json.loads(raw).get("topics", {}).get(self.topic, {}).get("partitions", {}).get("0")
        if p and p.get("broker", -1) >= 0:
            self.fetching_from = p["broker"]

    def read(self, n, timeout=60):
        """Reads until `n` records in all; returns them as (key, offset)."""
        deadline = time.time() + timeout
        while len(self.got) < n:
            assert time.time() < deadline, "read %d of %d records" % (len(self.got), n)
            m = self.c.poll(0.2)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            if m.error():
                raise KafkaException(m.error())
            self.got.append((m.key(), m.offset()))
        return self.got

    def settle(self, seconds=1.5):
        """Polls a while longer, so the statistics catch up."""
        end = time.time() + seconds
        while time.time() < end:
            m = self.c.poll(0.1)
            assert m is None or m.error(), "an unexpected record: %r" % (m.key(),)

    def close(self):
        self.c.close()


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_consumer_reads_from_the_in_sync_follower_in_its_rack(kind, request):
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(3, overrides={"broker.rack": "rack-{node}", "replica.selector.class": SELECTOR})
    topic = unique("nearby")
    tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic, "--replica-assignment", "1:2:3")
    wait_until("broker 1 to lead with the whole ISR", lambda: (lambda r: r.get(0) and r[0][0] == 1 and sorted(r[0][2]) == [1, 2, 3])(
        describe(c.bootstrap, topic)))
    p = producer(c.bootstrap, acks="all", enable_idempotence=True)
    d = produce_all(p, topic, make_records(300, 1, prefix="first"))
    assert not d.failed and len(d.ok) == 300
    acked = sorted((k, o) for k, (_, o) in d.ok.items())

    readers = {rack: Reader(c.bootstrap, topic, rack) for rack in ("rack-2", "rack-1", None)}
    try:
        for rack, r in readers.items():
            assert sorted(r.read(300)) == acked, rack
            assert [o for _, o in r.got] == list(range(300)), "offsets out of order for %s" % rack
        # Written while the consumers sit where they are: the follower's high watermark moves
        # with the leader's and wakes the consumer waiting on it.
        d = produce_all(p, topic, make_records(100, 1, prefix="second"))
        assert not d.failed and len(d.ok) == 100
        acked = sorted(acked + [(k, o) for k, (_, o) in d.ok.items()])
        for rack, r in readers.items():
            assert sorted(r.read(400)) == acked, rack
            r.settle()
        assert readers["rack-2"].fetching_from == 2
        assert readers["rack-1"].fetching_from == 1
        assert readers[None].fetching_from == 1
    finally:
        for r in readers.values():
            r.close()

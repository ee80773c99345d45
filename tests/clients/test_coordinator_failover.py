"""A KIP-848 consumer group across a move of its coordinator, on a three-node sluice cluster and,
for comparison, a three-node Apache Kafka cluster: a librdkafka consumer (`group.protocol=
consumer`) reads and commits; the broker coordinating its group is killed with SIGKILL, so the
group's `__consumer_offsets` partition gets another leader, which loads the group from the
log, members with their epochs and assignments included. The consumer goes on without losing
its partitions (no revocation, no "partitions lost"), commits again, and reads everything
written meanwhile; its committed offsets are what it committed.
"""
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafkautil import admin, make_records, produce_all, producer, unique
from test_cluster import tool, wait_until


def coordinator_of(bootstrap, group):
    client = admin(bootstrap)
    try:
        d = client.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
        return d.coordinator.id if d.coordinator is not None else None
    except KafkaException:
        return None


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_kip_848_member_keeps_its_partitions_when_the_coordinator_moves(kind, request):
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    # Every node holds a copy of each __consumer_offsets partition (kafka-ref.sh's default is 1).
    c = make(3, overrides={"offsets.topic.replication.factor": "3"})
    topic, group = unique("moving-coordinator"), unique("g848")
    tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic, "--partitions", "2",
         "--replication-factor", "3")
    p = producer(c.bootstrap, acks="all", enable_idempotence=True)
    d = produce_all(p, topic, make_records(40, 2, prefix="first"))
    assert not d.failed

    events = []
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([topic],
                       on_assign=lambda _c, ps: events.append(("assign", sorted(x.partition for x in ps))),
                       on_revoke=lambda _c, ps: events.append(("revoke", sorted(x.partition for x in ps))),
                       on_lost=lambda _c, ps: events.append(("lost", sorted(x.partition for x in ps))))
    seen = {}

    def read(n, timeout=90):
        deadline = time.time() + timeout
        while len(seen) < n:
            assert time.time() < deadline, "read %d of %d records; events %r" % (len(seen), n, events)
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            seen[m.key()] = (m.partition(), m.offset())

    try:
        read(40)
        consumer.commit(asynchronous=False)
        assert events == [("assign", [0, 1])], events
        old = wait_until("the group's coordinator", lambda: coordinator_of(c.bootstrap, group))
        c.kill9(old)
        try:
            # The consumer keeps polling while the group's partition gets a new leader.
            moved = wait_until("another coordinator", lambda: (lambda n: n if n not in (None, old) else None)(
                coordinator_of(c.bootstrap, group)), timeout=90)
            d = produce_all(p, topic, make_records(40, 2, prefix="second"))
            assert not d.failed
            read(80)
            # A commit at the member's epoch, at the new coordinator.
            committed = consumer.commit(asynchronous=False)
            assert all(tp.error is None for tp in committed), committed
        finally:
            c.start(old)
        assert events == [("assign", [0, 1])], "the member lost or gave up its partitions: %r" % (events,)
        offsets = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert sorted((tp.partition, tp.offset) for tp in offsets) == [(0, 40), (1, 40)]
        assert moved != old
    finally:
        consumer.close()

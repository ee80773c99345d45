"""The ISR as Kafka's tools see it, on a three-node sluice cluster and, for comparison, on a
three-node Apache Kafka cluster: a paused follower leaves the ISR of every partition it
follows after `replica.lag.time.max.ms` and joins again once it runs and has caught up; while
a partition's ISR is below `min.insync.replicas`, acks=all writes to it are refused with
NOT_ENOUGH_REPLICAS and acks=1 writes are still taken; nothing acknowledged is lost. The
broker session timeout is set far above the lag time so that what moves the ISR is the lag, not
the broker being fenced (test_cluster.py covers fencing).
"""
import os
import signal

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkautil import admin, consume_partitions, make_records, produce_all, producer, unique
from test_cluster import describe, tool, wait_until


def isr(bootstrap, topic):
    """Partition 0's ISR, sorted, from librdkafka's metadata (a request to a paused broker times
    out in 5 s and the loop asks again); None while there is none."""
    try:
        md = admin(bootstrap).list_topics(topic, timeout=5).topics[topic]
        return sorted(md.partitions[0].isrs) if md.error is None else None
    except (KafkaException, KeyError):
        return None


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_paused_follower_leaves_the_isr_and_acks_all_below_min_isr_is_refused(kind, request):
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    # The session timeout is far above the lag time: broker 2 leaves the ISRs for lagging while
    # it is still a registered, unfenced broker.
    c = make(3, overrides={"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "60000"})
    node1 = "%s:%d" % (c.hosts[1], c.ports[1])
    wide, narrow = unique("isr-wide"), unique("isr-narrow")
    # Broker 1 leads both; broker 2 follows both; the narrow topic has no third replica.
    for topic, assignment in ((wide, "1:2:3"), (narrow, "1:2")):
        tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
             "--replica-assignment", assignment, "--config", "min.insync.replicas=2")
    for topic, whole in ((wide, [1, 2, 3]), (narrow, [1, 2])):
        wait_until("%s to have its whole ISR" % topic,
                   lambda: (lambda r: r if r.get(0) and r[0][0] == 1 and sorted(r[0][2]) == whole else None)(
                       describe(c.bootstrap, topic)))
    acked = {}
    for topic in (wide, narrow):
        d = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(20, 1, prefix="before"))
        assert not d.failed and len(d.ok) == 20
        acked[topic] = dict(d.ok)

    os.kill(c.pid(2), signal.SIGSTOP)
    try:
        # A follower with nothing to fetch is in sync however long it is silent (Kafka's rule:
        # caught up to the leader's log end); acks=1 writes, which only the leader takes, put
        # the paused follower behind.
        for topic in (wide, narrow):
            d = produce_all(producer(node1, acks="1"), topic, make_records(5, 1, prefix="leader-only"))
            assert not d.failed and len(d.ok) == 5
            acked[topic].update(d.ok)
        wait_until("broker 2 to leave both ISRs",
                   lambda: isr(node1, wide) == [1, 3] and isr(node1, narrow) == [1], timeout=60)
        assert 2 in admin(node1).list_topics(timeout=10).brokers, "broker 2 was fenced, not dropped for lagging"
        # kafka-topics --describe shows it (Kafka's tool may first send to the paused broker and
        # wait out its request timeout).
        assert describe(node1, wide)[0] == (1, [1, 2, 3], [1, 3])
        assert describe(node1, narrow)[0] == (1, [1, 2], [1])
        # Two of three in sync: acks=all is taken.
        d = produce_all(producer(node1, acks="all"), wide, make_records(20, 1, prefix="shrunk"))
        assert not d.failed and len(d.ok) == 20
        acked[wide].update(d.ok)
        # The leader alone, below min.insync.replicas=2: acks=all is refused before the append,
        # with NOT_ENOUGH_REPLICAS (librdkafka would retry it until its delivery timeout).
        d = produce_all(producer(node1, acks="all", retries=0), narrow, make_records(5, 1, prefix="refused"))
        assert not d.ok and len(d.failed) == 5
        assert {e.code() for e in d.failed.values()} == {KafkaError.NOT_ENOUGH_REPLICAS}, d.failed
    finally:
        os.kill(c.pid(2), signal.SIGCONT)

    wait_until("broker 2 to join both ISRs again",
               lambda: isr(c.bootstrap, wide) == [1, 2, 3] and isr(c.bootstrap, narrow) == [1, 2], timeout=60)
    assert sorted(describe(c.bootstrap, wide)[0][2]) == [1, 2, 3]
    assert sorted(describe(c.bootstrap, narrow)[0][2]) == [1, 2]
    d = produce_all(producer(c.bootstrap, acks="all"), narrow, make_records(5, 1, prefix="healed"))
    assert not d.failed and len(d.ok) == 5
    acked[narrow].update(d.ok)
    for topic in (wide, narrow):
        got = consume_partitions(c.bootstrap, topic, 1, expect=len(acked[topic]))
        at = {r["key"]: r["offset"] for r in got[0]}
        assert {k: at.get(k) for k in acked[topic]} == {k: o for k, (_, o) in acked[topic].items()}
        assert not any(k.startswith(b"refused") for k in at)

"""kafka-reassign-partitions on a three-node sluice cluster and, for comparison, on a three-node
Apache Kafka cluster: a partition on brokers 1 and 2 moves to brokers 2 and 3 while an
idempotent acks=all producer writes to it. With `--throttle` at a rate far below what the copy
needs, the reassignment is still in progress (ListPartitionReassignments shows replica 3 being
added and 1 being removed) and the throttle configs are set on the brokers and the topic; with
the throttle raised (`--additional`) it finishes, `--verify` says so and clears the throttles,
the partition's replicas and ISR are 2 and 3, broker 1 holds no copy of it any more, and every
acknowledged record is read back at the offset it was acknowledged at.
"""
import json
import re
import threading
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from kafkautil import admin, consume_partitions, make_records, produce_all, producer, unique
from test_cluster import describe, tool, wait_until

REASSIGN = "reassign.ReassignPartitionsCommand"


def configs(bootstrap, kind, name):
    """The dynamic (non-default) configs of a broker or topic, as a dict."""
    resource = ConfigResource(kind, name)
    client = admin(bootstrap)
    got = client.describe_configs([resource])[resource].result(timeout=30)
    return {k: e.value for k, e in got.items() if not e.is_default and e.value is not None}


def data_dir(c, kind, node):
    return c.data_dir(node) if kind == "kafka" else c.workdir / ("node%d" % node)


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_kafka_reassign_partitions_moves_a_throttled_partition_under_load_and_loses_nothing(kind, request, tmp_path):
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(3)
    topic = unique("moved")
    tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic, "--replica-assignment", "1:2")
    wait_until("the topic to have its ISR", lambda: (describe(c.bootstrap, topic).get(0) or (0, 0, []))[2] and
               sorted(describe(c.bootstrap, topic)[0][2]) == [1, 2])
    # Four MiB already there: at 100 kB/s the copy to broker 3 takes half a minute.
    acked = {}
    d = produce_all(producer(c.bootstrap, acks="all", enable_idempotence=True), topic,
                    make_records(4000, 1, prefix="before", value_size=1000))
    assert not d.failed and len(d.ok) == 4000
    acked.update(d.ok)

    # Load while the partition moves.
    stop = threading.Event()
    during = {}
    failed = {}

    def load():
        p = producer(c.bootstrap, acks="all", enable_idempotence=True, delivery_timeout_ms=120000)

        def report(err, msg):
            (failed if err else during)[msg.key()] = err or (msg.partition(), msg.offset())
        i = 0
        while not stop.is_set():
            p.produce(topic, key=b"during-%06d" % i, value=b"x" * 100, partition=0, on_delivery=report)
            p.poll(0.02)
            i += 1
        assert p.flush(120) == 0
    writer = threading.Thread(target=load)
    writer.start()
    try:
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 3]}]}))
        out = tool(REASSIGN, "--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan),
                   "--execute", "--throttle", "100000").stdout
        assert "Successfully started partition reassignment" in out, out
        # In progress, throttled: replica 3 being added, 1 being removed; still so seconds later
        # (unthrottled, the copy takes well under a second here; at 100 kB/s, half a minute).
        time.sleep(3)
        listed = tool(REASSIGN, "--bootstrap-server", c.bootstrap, "--list").stdout
        m = re.search(r"%s-0: replicas: ([\d,]+)\. adding: ([\d,]*)\. removing: ([\d,]*)\." % re.escape(topic), listed)
        assert m, listed
        assert (sorted(int(x) for x in m.group(1).split(",")), m.group(2), m.group(3)) == ([1, 2, 3], "3", "1"), listed
        for broker in ("1", "2", "3"):
            got = configs(c.bootstrap, ResourceType.BROKER, broker)
            assert got.get("leader.replication.throttled.rate") == "100000", (broker, got)
            assert got.get("follower.replication.throttled.rate") == "100000", (broker, got)
        throttled = configs(c.bootstrap, ResourceType.TOPIC, topic)
        assert set(throttled["leader.replication.throttled.replicas"].split(",")) == {"0:1", "0:2"}, throttled
        assert throttled["follower.replication.throttled.replicas"] == "0:3", throttled
        assert describe(c.bootstrap, topic)[0][1][:2] == [2, 3]

        # Raise the throttle: the copy finishes and --verify clears the throttles.
        tool(REASSIGN, "--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan),
             "--execute", "--additional", "--throttle", "100000000")
        verified = wait_until("kafka-reassign-partitions --verify to report the move completed", lambda: (lambda o: o if (
            "Reassignment of partition %s-0 is completed" % topic in o) else None)(
            tool(REASSIGN, "--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan), "--verify").stdout),
            timeout=120)
        assert "Clearing broker-level throttles" in verified, verified
        time.sleep(1)
    finally:
        stop.set()
        writer.join(180)
    assert not failed, failed
    assert len(during) > 10
    acked.update(during)

    leader, replicas, isr = describe(c.bootstrap, topic)[0]
    assert (replicas, sorted(isr)) == ([2, 3], [2, 3])
    assert leader in (2, 3)
    assert not tool(REASSIGN, "--bootstrap-server", c.bootstrap, "--list").stdout.count("%s-0:" % topic)
    for broker in ("1", "2", "3"):
        got = configs(c.bootstrap, ResourceType.BROKER, broker)
        assert "leader.replication.throttled.rate" not in got and "follower.replication.throttled.rate" not in got, got
    # Broker 1 no longer holds the partition (Kafka renames it for deletion; sluice removes it).
    wait_until("broker 1 to drop its copy", lambda: not (data_dir(c, kind, 1) / ("%s-0" % topic)).exists(), timeout=60)
    assert (data_dir(c, kind, 3) / ("%s-0" % topic)).exists()

    got = consume_partitions(c.bootstrap, topic, 1, expect=len(acked))
    at = {r["key"]: r["offset"] for r in got[0]}
    assert {k: at.get(k) for k in acked} == {k: o for k, (_, o) in acked.items()}
    assert len(at) == len(acked), "records that were never acknowledged were read"

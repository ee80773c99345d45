"""sluice reads a real Apache Kafka KRaft metadata log (`__cluster_metadata-0`), record by record:
that of a single node, and those of a three-node cluster that lost a broker.

Kafka 4.4 (compat/kafka/kafka-ref.sh, single node) creates, alters and deletes topics and hands
out a producer-id block, with a snapshot written after every commit; then it stops and
`sluice metadata-image` replays its log directory. The image must hold what Kafka's own admin
API reported (topic ids, partition counts, leaders, configs), nothing of the deleted topic, and
every record sluice decodes must encode back to Kafka's bytes exactly, which is what lets a later
sluice broker follow a Kafka cluster's metadata log.
"""
import json
import subprocess
import time

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from conftest import sluice_bin
from kafkautil import admin, create_topic, producer, unique


def sluice_metadata(*args):
    r = subprocess.run([str(sluice_bin()), "metadata-image", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_sluice_replays_kafkas_metadata_log_into_the_topics_ids_and_configs_kafka_reports(broker_factory):
    # A snapshot after every commit, so the snapshot file and the segments after it are both read.
    kafka = broker_factory(target="kafka", overrides={"metadata.log.max.record.bytes.between.snapshots": "1"})
    b = kafka.bootstrap
    a = admin(b)
    orders = create_topic(b, unique("md-orders"), 3, config={"retention.ms": "3600000"})
    table = create_topic(b, unique("md-table"), 1, config={"cleanup.policy": "compact"})
    gone = create_topic(b, unique("md-gone"), 2)
    res = ConfigResource(ConfigResource.Type.TOPIC, orders,
                         incremental_configs=[ConfigEntry("segment.bytes", "2000000",
                                                          incremental_operation=AlterConfigOpType.SET)])
    for f in a.incremental_alter_configs([res]).values():
        f.result(30)
    a.delete_topics([gone], operation_timeout=30)[gone].result(30)
    p = producer(b, **{"enable.idempotence": True})
    p.produce(orders, key=b"k", value=b"v", partition=0)
    assert p.flush(30) == 0
    described = a.describe_topics(TopicCollection([orders, table]))
    # confluent-kafka prints ids in standard base64; Kafka's Uuid.toString is the URL-safe alphabet.
    ids = {name: str(f.result(30).topic_id).replace("+", "-").replace("/", "_") for name, f in described.items()}
    kafka.stop()

    meta_dir = kafka.data_dir / "__cluster_metadata-0"
    assert list(meta_dir.glob("*.checkpoint")), "Kafka wrote no snapshot: %s" % sorted(meta_dir.iterdir())
    image = json.loads(sluice_metadata(str(meta_dir)))
    topics = {t["name"]: t for t in image["topics"]}
    assert gone not in topics
    assert {t: topics[t]["id"] for t in (orders, table)} == ids
    assert [p["partition"] for p in topics[orders]["partitions"]] == [0, 1, 2]
    # Kafka stopped cleanly: its controlled shutdown took the only replica out of every ISR, into
    # the eligible leader replicas (KIP-966), and left each partition without a leader.
    for part in topics[orders]["partitions"] + topics[table]["partitions"]:
        assert (part["replicas"], part["isr"], part["leader"], part["eligible_leader_replicas"]) == ([1], [], -1, [1]), part
        assert part["leader_epoch"] >= 1 and part["partition_epoch"] >= 1, part
    configs = {(c["resource_type"], c["resource_name"]): c["configs"] for c in image["configs"]}
    assert configs[(2, orders)] == {"retention.ms": "3600000", "segment.bytes": "2000000"}
    assert configs[(2, table)] == {"cleanup.policy": "compact"}
    [br] = image["brokers"]
    assert (br["id"], br["fenced"], br["in_controlled_shutdown"]) == (1, True, True), br
    assert [(e["name"], e["port"]) for e in br["endpoints"]] == [("PLAINTEXT", kafka.port)], br
    assert [c["id"] for c in image["controllers"]] == [1]
    assert image["features"]["metadata.version"] > 0
    assert image["next_producer_id"] >= 1000, "Kafka handed out a block of 1000 producer ids"

    records = [json.loads(line) for line in sluice_metadata("--records", str(meta_dir)).splitlines()]
    kinds = {r["kind"] for r in records}
    for kind in ("TopicRecord", "PartitionRecord", "ConfigRecord", "RegisterBrokerRecord", "FeatureLevelRecord",
                 "ProducerIdsRecord", "RemoveTopicRecord"):
        assert kind in kinds, "%s not read: %s" % (kind, sorted(kinds))
    different = [r for r in records if not r["same_bytes"]]
    assert not different, "sluice's encoding differs from Kafka's: %s" % different[:5]


def partition_view(a, topic):
    """{partition: (leader id, sorted ISR ids)} as Kafka's admin API describes the topic, or None
    when the request failed (a broker just went away)."""
    try:
        d = a.describe_topics(TopicCollection([topic]), request_timeout=5)[topic].result(10)
    except Exception:  # noqa: BLE001 - retried by the caller
        return None, None
    return {p.id: (p.leader.id if p.leader else -1, sorted(n.id for n in p.isr)) for p in d.partitions}, d


def test_sluice_replays_a_three_node_kafka_clusters_log_through_a_broker_failure(kafka_cluster):
    """A real 3-node Kafka cluster creates a replication-factor-3 topic, loses broker 3 to kill -9
    and fences it after its session times out (leaders and ISRs move to brokers 1 and 2). The
    metadata logs of the two survivors, replayed by sluice, hold exactly the leaders and ISRs
    Kafka's admin API reported, broker 3 fenced, and records that re-encode to Kafka's bytes."""
    c = kafka_cluster(3, overrides={"offsets.topic.replication.factor": "3"})
    a = admin(c.bootstrap)
    topic = unique("md-rf3")
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(60)
    deadline = time.time() + 60
    while True:
        # The description the loop ends with: describing again may fail (None) like any call.
        before, described = partition_view(a, topic)
        if before and len(before) == 3 and all(len(isr) == 3 for _, isr in before.values()):
            break
        assert time.time() < deadline, "the topic never had three in-sync replicas"
        time.sleep(0.5)
    topic_id = str(described.topic_id).replace("+", "-").replace("/", "_")
    c.kill9(3)
    # Fenced after broker.session.timeout.ms (9 s): out of every ISR, leading nothing. Asked of
    # broker 1 alone (Metadata), so the client never waits on the dead one.
    survivor = admin("127.0.0.1:%d" % c.ports[1])
    deadline = time.time() + 60
    while True:
        md = survivor.list_topics(topic=topic, timeout=10).topics[topic]
        after = {i: (p.leader, sorted(p.isrs)) for i, p in md.partitions.items()}
        if all(3 not in isr and leader in (1, 2) for leader, isr in after.values()):
            break
        assert time.time() < deadline, "Kafka never fenced broker 3: %r" % after
        time.sleep(0.5)
    c.kill9(1)
    c.kill9(2)

    for node in (1, 2):
        meta_dir = c.data_dir(node) / "__cluster_metadata-0"
        image = json.loads(sluice_metadata(str(meta_dir)))
        [t] = [t for t in image["topics"] if t["name"] == topic]
        assert t["id"] == topic_id
        got = {p["partition"]: (p["leader"], sorted(p["isr"])) for p in t["partitions"]}
        assert got == after, "node %d: sluice's image %r, Kafka's admin API %r" % (node, got, after)
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in t["partitions"])
        fenced = {b["id"]: b["fenced"] for b in image["brokers"]}
        assert fenced == {1: False, 2: False, 3: True}, "node %d: %r" % (node, fenced)
        assert [ctl["id"] for ctl in image["controllers"]] == [1, 2, 3]
        records = [json.loads(line) for line in sluice_metadata("--records", str(meta_dir)).splitlines()]
        assert "BrokerRegistrationChangeRecord" in {r["kind"] for r in records} or \
            "FenceBrokerRecord" in {r["kind"] for r in records}
        assert all(r["same_bytes"] for r in records), [r for r in records if not r["same_bytes"]][:5]

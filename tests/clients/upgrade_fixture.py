"""What an upgrade must keep: a workload that leaves a single node's data dir with topics (and
their ids and configs), a dynamic broker default, records from an idempotent producer, a
consumer group's committed offsets; and what the broker says about each, as a manifest.

`make_upgrade_fixture.py` runs `record` against a release's binary and stores its data dir
with the manifest under tests/fixtures/upgrade/; test_upgrade.py starts today's binary on
that data dir and compares what it says with the manifest (`observe`).
"""
import re

from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from kafkautil import (admin, consume_partitions, consumer, create_topic, kafka_tool, make_records, produce_all, producer,
                       watermarks)

TOPICS = {"orders": 3, "keyed": 1}
TOPIC_CONFIGS = {
    # Timestamps far ahead (see ORDERS_TS) are allowed.
    "orders": {"retention.ms": "604800000", "max.message.bytes": "2000000",
               "message.timestamp.after.max.ms": "9223372036854775807"},
    "keyed": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.9"},
}
BROKER_DEFAULT = {"log.retention.ms": "172800000"}
# The idempotent producers' records are stamped in 2096: a producer's state expires
# producer.id.expiration.ms (at most 24.8 days) after its last timestamp, and the fixture must
# still have it when the test runs years later.
ORDERS_TS = 4_000_000_000_000
GROUP = "upgrade-g"
COMMITTED = {0: 60, 1: 70, 2: 80}


def tool(cls, *args):
    return kafka_tool(cls, *args).stdout


def record(bootstrap):
    """Runs the workload; returns the manifest of what the broker then says."""
    for name, partitions in TOPICS.items():
        create_topic(bootstrap, name, partitions=partitions, config=TOPIC_CONFIGS[name])
    tool("ConfigCommand", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
         "--add-config", ",".join("%s=%s" % kv for kv in BROKER_DEFAULT.items()))
    d = produce_all(producer(bootstrap, acks="all", enable_idempotence=True), "orders",
                    make_records(300, 3, prefix="o", base_ts=ORDERS_TS))
    assert not d.failed
    d = produce_all(producer(bootstrap, acks="all", enable_idempotence=True), "keyed",
                    make_records(50, 1, prefix="kk", base_ts=1_760_000_000_000))
    assert not d.failed
    c = consumer(bootstrap, group_id=GROUP, enable_auto_commit=False)
    c.commit(offsets=[TopicPartition("orders", p, o) for p, o in COMMITTED.items()], asynchronous=False)
    c.close()
    return observe(bootstrap)


def observe(bootstrap):
    """What the broker at `bootstrap` says about everything `record` left."""
    a = admin(bootstrap)
    described = a.describe_topics(TopicCollection(list(TOPICS)))
    topic_ids = {name: str(f.result(30).topic_id) for name, f in described.items()}
    configs = {}
    for name in TOPICS:
        res = ConfigResource(ResourceType.TOPIC, name)
        entries = a.describe_configs([res])[res].result(30)
        configs[name] = {k: e.value for k, e in entries.items() if k in TOPIC_CONFIGS[name]}
    out = tool("ConfigCommand", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "brokers", "--entity-default")
    broker_default = dict(re.findall(r"^\s+([a-z.]+)=(\S+) sensitive=", out, re.M))
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(30)
    committed = {str(tp.partition): tp.offset for tp in offsets.topic_partitions if tp.topic == "orders"}
    records = {}
    marks = {}
    for name, partitions in TOPICS.items():
        w = watermarks(bootstrap, name, partitions)
        marks[name] = {str(p): list(w[p]) for p in range(partitions)}
        got = consume_partitions(bootstrap, name, partitions, expect=sum(hi - lo for lo, hi in w.values()))
        records[name] = {str(p): [[r["offset"], r["timestamp"], r["key"].decode(), r["value"].decode(),
                                   [[k, v.decode()] for k, v in r["headers"]]] for r in rs]
                         for p, rs in got.items()}
    producers = {}
    for p in range(TOPICS["orders"]):
        out = tool("TransactionsCommand", "--bootstrap-server", bootstrap, "describe-producers", "--topic", "orders",
                   "--partition", str(p))
        # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp ...
        rows = [line.split() for line in out.strip().splitlines()[1:]]
        producers[str(p)] = sorted([int(r[0]), int(r[1]), int(r[3]), int(r[4])] for r in rows)
    return {"topic_ids": topic_ids, "topic_configs": configs, "broker_default": broker_default,
            "committed": committed, "watermarks": marks, "records": records, "producers": producers}

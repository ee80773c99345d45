"""Compatibility scenarios for confluent-kafka-python (librdkafka).

    python confluent_scenarios.py list
    python confluent_scenarios.py BOOTSTRAP [SCENARIO...]
"""
import time
from collections import OrderedDict

from confluent_kafka import Consumer, KafkaError, KafkaException, OFFSET_BEGINNING, Producer, TopicPartition, TopicCollection
from confluent_kafka import TIMESTAMP_CREATE_TIME, ConsumerGroupTopicPartitions
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
                                   OffsetSpec, ResourceType)

import failover
from common import RUN, check, check_acked_offsets, main, make_records, verify

CLIENT = "confluent-python"
QUIET = {"log_level": 3}


def topic(s):
    return "compat-confluent-%s-%s" % (s, RUN)


def admin(bs):
    return AdminClient({"bootstrap.servers": bs, **QUIET})


def create_topic(a, name, partitions, config=None):
    fs = a.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=15)
    fs[name].result(20)
    deadline = time.time() + 15
    while True:
        md = a.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return
        check(time.time() < deadline, "topic %s not ready" % name)
        time.sleep(0.2)


def produce(bs, t, recs, extra=None):
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 20, **QUIET, **(extra or {})})
    errs = []

    def cb(i):
        def f(err, msg):
            if err is not None:
                errs.append("record %d: %s" % (i, err))
            else:
                recs[i]["offset"] = msg.offset()
                check(msg.partition() == recs[i]["partition"], "acked on partition %d" % msg.partition())
        return f

    for i, r in enumerate(recs):
        p.produce(t, value=r["value"], key=r["key"], partition=r["partition"], timestamp=r["ts"], headers=r["headers"] or None, on_delivery=cb(i))
        p.poll(0)
    left = p.flush(20)
    check(left == 0, "%d records not delivered" % left)
    check(not errs, "; ".join(errs[:3]))
    check_acked_offsets(recs)
    return recs


def consume_assign(bs, t, partitions, n, timeout=20):
    c = Consumer({"bootstrap.servers": bs, "group.id": "compat-confluent-assign-" + RUN, "enable.auto.commit": False,
                  "enable.partition.eof": False, **QUIET})
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = poll(c, n, timeout)
    c.close()
    return got


def poll(c, n, timeout):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        tstype, ts = m.timestamp()
        got.append(dict(partition=m.partition(), offset=m.offset(), key=m.key(), value=m.value(),
                        headers=m.headers() or [], ts=ts, ts_type="create" if tstype == TIMESTAMP_CREATE_TIME else tstype))
    return got


def produce_consume(bs):
    t = topic("pc")
    create_topic(admin(bs), t, 3)
    want = produce(bs, t, make_records(3, 60))
    verify(want, consume_assign(bs, t, 3, len(want)))
    return "%d records, 3 partitions, idempotent acks=all, keys/headers/timestamps/offsets verified" % len(want)


def compression(bs):
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    t = topic("comp")
    create_topic(admin(bs), t, len(codecs))
    want = []
    for i, codec in enumerate(codecs):
        recs = make_records(1, 40)
        for r in recs:
            r["partition"] = i
        want += produce(bs, t, recs, {"compression.codec": codec})
    verify(want, consume_assign(bs, t, len(codecs), len(want)))
    return "%s: %d records verified" % (",".join(codecs), len(want))


def subscribe_group(bs):
    t = topic("grp")
    g = "compat-confluent-group-" + RUN
    a = admin(bs)
    create_topic(a, t, 2)
    want = produce(bs, t, make_records(2, 30))
    c = Consumer({"bootstrap.servers": bs, "group.id": g, "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    c.subscribe([t])
    got = poll(c, len(want), 25)
    verify(want, got)
    c.commit(asynchronous=False)
    com = c.committed([TopicPartition(t, 0), TopicPartition(t, 1)], timeout=10)
    check([x.offset for x in com] == [15, 15], "committed %r" % com)
    c.close()
    res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(20)
    check(sorted(x.offset for x in res.topic_partitions) == [15, 15], "list_consumer_group_offsets %r" % res.topic_partitions)
    groups = a.list_consumer_groups().result(20)
    check(any(x.group_id == g for x in groups.valid), "group not listed")
    a.delete_consumer_groups([g])[g].result(20)
    return "subscribe + commit + committed + list_consumer_group_offsets + list/delete groups"


def consumer_protocol_group(bs):
    """KIP-848 (group.protocol=consumer): the broker assigns; two members split 4 partitions."""
    t = topic("k848")
    g = "compat-confluent-k848-" + RUN
    create_topic(admin(bs), t, 4)
    owned = [set(), set()]

    def on_assign(i):
        def f(consumer, partitions):
            owned[i].update(p.partition for p in partitions)
        return f

    def on_revoke(i):
        def f(consumer, partitions):
            owned[i].difference_update(p.partition for p in partitions)
        return f

    cs = []
    for i in range(2):
        c = Consumer({"bootstrap.servers": bs, "group.id": g, "group.protocol": "consumer", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", **QUIET})
        c.subscribe([t], on_assign=on_assign(i), on_revoke=on_revoke(i), on_lost=on_revoke(i))
        cs.append(c)
    # The records are produced once both members own two partitions each (the first may hold all
    # four for a moment while the second joins), so each is read by its final owner only.
    deadline = time.time() + 30
    while not (len(owned[0]) == 2 and len(owned[1]) == 2) and time.time() < deadline:
        for c in cs:
            m = c.poll(0.1)
            check(m is None or m.error() is not None, "a record before any was produced")
    check(len(owned[0]) == 2 and len(owned[1]) == 2 and not owned[0] & owned[1], "assignments %r" % owned)
    want = produce(bs, t, make_records(4, 40))
    got = []
    deadline = time.time() + 25
    while len(got) < len(want) and time.time() < deadline:
        for c in cs:
            got += poll(c, len(want) - len(got), 0.5)
    for c in cs:
        c.commit(asynchronous=False)
    com = cs[0].committed([TopicPartition(t, p) for p in range(4)], timeout=10)
    for c in cs:
        c.close()
    verify(want, got)
    check([x.offset for x in com] == [10, 10, 10, 10], "committed %r" % com)
    return "2 members, partitions split 2/2 by the broker, %d records read once, commits" % len(want)


def admin_ops(bs):
    t = topic("adm")
    a = admin(bs)
    create_topic(a, t, 2, {"retention.ms": "3600000"})
    try:
        a.create_topics([NewTopic(t, 1, 1)])[t].result(20)
        raise AssertionError("creating an existing topic succeeded")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, "create existing -> %s" % e)
    check(t in a.list_topics(timeout=10).topics, "list_topics lacks topic")
    d = a.describe_topics(TopicCollection([t]))[t].result(20)
    check(len(d.partitions) == 2 and d.topic_id is not None, "describe_topics %r" % d)
    res = ConfigResource(ResourceType.TOPIC, t)
    cfg = a.describe_configs([res])[res].result(20)
    check(cfg["retention.ms"].value == "3600000", "retention.ms %s" % cfg["retention.ms"].value)
    a.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])])[res].result(20)
    # Kafka applies the change through its metadata log: wait (bounded) for a describe to see it.
    deadline = time.time() + 15
    cfg = a.describe_configs([res])[res].result(20)
    while cfg["retention.ms"].value != "7200000" and time.time() < deadline:
        time.sleep(0.1)
        cfg = a.describe_configs([res])[res].result(20)
    check(cfg["retention.ms"].value == "7200000", "after alter retention.ms %s" % cfg["retention.ms"].value)
    cl = a.describe_cluster().result(20)
    # One broker per bootstrap address (the runner lists every node of a cluster).
    check(len(cl.nodes) == len(bs.split(",")) and cl.cluster_id, "describe_cluster %r" % cl)
    bres = ConfigResource(ResourceType.BROKER, str(cl.nodes[0].id))
    bcfg = a.describe_configs([bres])[bres].result(20)
    check("num.partitions" in bcfg, "broker config lacks num.partitions")
    a.create_partitions([NewPartitions(t, 3)])[t].result(20)
    deadline = time.time() + 15
    while len(a.list_topics(t, timeout=10).topics[t].partitions) != 3:
        check(time.time() < deadline, "partition count not 3")
        time.sleep(0.2)
    recs = make_records(1, 10)
    produce(bs, t, recs)
    tp = TopicPartition(t, 0)
    lo = a.list_offsets({tp: OffsetSpec.latest()})[tp].result(20)
    check(lo.offset == 10, "latest %d" % lo.offset)
    lo = a.list_offsets({tp: OffsetSpec.for_timestamp(recs[5]["ts"])})[tp].result(20)
    check(lo.offset == 5, "for_timestamp(#5) -> %d" % lo.offset)
    lo = a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(20)
    check(lo.offset == 9, "max_timestamp -> %d" % lo.offset)
    dr = a.delete_records([TopicPartition(t, 0, 4)])[TopicPartition(t, 0, 4)].result(20)
    check(dr.low_watermark == 4, "delete_records low watermark %r" % dr.low_watermark)
    lo = a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(20)
    check(lo.offset == 4, "earliest after delete_records %d" % lo.offset)
    a.delete_topics([t], operation_timeout=15)[t].result(20)
    deadline = time.time() + 15
    while t in a.list_topics(timeout=10).topics:
        check(time.time() < deadline, "topic still listed after delete")
        time.sleep(0.2)
    return "create_topics(+exists) list_topics describe_topics describe_configs(topic,broker) incremental_alter_configs describe_cluster create_partitions list_offsets delete_records delete_topics"


def leader_failover(bs):
    """failover.run with librdkafka: an idempotent producer rides through the leader's death."""
    t = topic("failover")
    a = admin(bs)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 5, **QUIET})

    def leader_and_isr():
        part = a.list_topics(t, timeout=5).topics[t].partitions[0]
        return part.leader, sorted(part.isrs)

    def produce_keys(ks):
        acked = {}

        def cb(err, msg):
            acked[msg.key().decode()] = err or msg.offset()
        for k in ks:
            p.produce(t, key=k.encode(), value=("v-" + k).encode(), partition=0, on_delivery=cb)
        check(p.flush(150) == 0, "records not delivered within 150 s")
        errs = [v for v in acked.values() if isinstance(v, KafkaError)]
        check(not errs, "delivery failed: %s" % errs[:3])
        return [acked[k] for k in ks]

    def consume(n):
        c = Consumer({"bootstrap.servers": bs, "group.id": "compat-confluent-failover-" + RUN, "enable.auto.commit": False, **QUIET})
        c.assign([TopicPartition(t, 0, 0)])
        got = [(r["offset"], r["key"].decode()) for r in poll(c, n, 60)]
        c.close()
        return got

    def create():
        a.create_topics([NewTopic(t, 1, 3, config=failover.TOPIC_CONFIG)])[t].result(30)
    return failover.run(create, leader_and_isr, produce_keys, consume)


def transactions(bs):
    """A transactional producer: commit 10 records over 2 partitions, abort 5, commit 1; a
    read_committed consumer (librdkafka's default) sees the 11 committed, a read_uncommitted
    one all 16."""
    t = topic("txn")
    create_topic(admin(bs), t, 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "compat-confluent-txn-" + RUN, "linger.ms": 5, **QUIET})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(10):
        p.produce(t, key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(t, key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    check(p.flush(20) == 0, "aborted records not delivered before the abort")
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(t, key=b"k-last", value=b"committed-last", partition=0)
    p.commit_transaction(20)

    def read(isolation, n):
        c = Consumer({"bootstrap.servers": bs, "group.id": "compat-confluent-txn-" + RUN, "enable.auto.commit": False,
                      "isolation.level": isolation, **QUIET})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in range(2)])
        got = poll(c, n, 20)
        # Anything past what is wanted would show up now.
        got += poll(c, 1, 2)
        c.close()
        return [r["value"].decode() for r in got]
    committed = read("read_committed", 11)
    check(len(committed) == 11 and all(v.startswith("committed-") for v in committed), "read_committed read %s" % committed)
    everything = read("read_uncommitted", 16)
    check(len(everything) == 16 and sum(v.startswith("aborted-") for v in everything) == 5, "read_uncommitted read %s" % everything)
    return "init_transactions, commit 10 + abort 5 + commit 1 on 2 partitions; read_committed sees the 11 committed, read_uncommitted all 16"


if __name__ == "__main__":
    main(CLIENT, OrderedDict([
        ("produce-consume-assign", produce_consume),
        ("compression", compression),
        ("subscribe-group", subscribe_group),
        ("consumer-protocol-group", consumer_protocol_group),
        ("admin", admin_ops),
        ("transactions", transactions),
        ("leader-failover", leader_failover),
    ]))

"""Compatibility scenarios for kafka-python.

    python kafka_python_scenarios.py list
    python kafka_python_scenarios.py BOOTSTRAP [SCENARIO...]
"""
import logging
import time
from collections import OrderedDict

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError

import failover
from common import RUN, check, check_acked_offsets, main, make_records, verify

CLIENT = "kafka-python"
logging.basicConfig(level=logging.CRITICAL)


def topic(s):
    return "compat-kpy-%s-%s" % (s, RUN)


def admin(bs):
    return KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=15000)


def create_topic(a, name, partitions, configs=None):
    a.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    deadline = time.time() + 15
    while True:
        d = a.describe_topics([name])
        if d and d[0]["error_code"] == 0 and len(d[0]["partitions"]) == partitions and all(p["leader_id"] >= 0 for p in d[0]["partitions"]):
            return
        check(time.time() < deadline, "topic %s not ready: %r" % (name, d))
        time.sleep(0.2)


def produce(bs, t, recs, **extra):
    p = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=20, request_timeout_ms=15000, **extra)
    futs = []
    for r in recs:
        hs = [(k, v) for k, v in r["headers"]]
        futs.append(p.send(t, value=r["value"], key=r["key"], partition=r["partition"], timestamp_ms=r["ts"], headers=hs))
    p.flush(20)
    for i, f in enumerate(futs):
        md = f.get(20)
        check(md.partition == recs[i]["partition"], "record %d acked on partition %d" % (i, md.partition))
        recs[i]["offset"] = md.offset
    p.close()
    check_acked_offsets(recs)
    return recs


def consume_assign(bs, t, partitions, n, timeout=20):
    c = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    tps = [TopicPartition(t, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = poll(c, n, timeout)
    c.close()
    return got


def poll(c, n, timeout):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        for _, msgs in c.poll(timeout_ms=500).items():
            for m in msgs:
                got.append(dict(partition=m.partition, offset=m.offset, key=m.key, value=m.value, headers=list(m.headers or []),
                                ts=m.timestamp, ts_type="create" if m.timestamp_type == 0 else m.timestamp_type))
    got.sort(key=lambda r: (r["partition"], r["offset"]))
    return got


def produce_consume(bs):
    t = topic("pc")
    create_topic(admin(bs), t, 3)
    want = produce(bs, t, make_records(3, 60))
    verify(want, consume_assign(bs, t, 3, len(want)))
    return "%d records, 3 partitions, acks=all, keys/headers/timestamps/offsets verified" % len(want)


def compression(bs):
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    t = topic("comp")
    create_topic(admin(bs), t, len(codecs))
    want = []
    for i, codec in enumerate(codecs):
        recs = make_records(1, 40)
        for r in recs:
            r["partition"] = i
        try:
            want += produce(bs, t, recs, compression_type=codec)
        except Exception as e:  # noqa: BLE001
            if "not available" in str(e) or "Libraries" in str(e):
                codecs[i] = codec + "(no lib)"
                continue
            raise
    verify(want, consume_assign(bs, t, len(codecs), len(want)))
    return "%s: %d records verified" % (",".join(codecs), len(want))


def subscribe_group(bs):
    t = topic("grp")
    g = "compat-kpy-group-" + RUN
    a = admin(bs)
    create_topic(a, t, 2)
    want = produce(bs, t, make_records(2, 30))
    c = KafkaConsumer(t, bootstrap_servers=bs, group_id=g, enable_auto_commit=False, auto_offset_reset="earliest")
    got = poll(c, len(want), 25)
    verify(want, got)
    c.commit()
    com = [c.committed(TopicPartition(t, p)) for p in range(2)]
    check(com == [15, 15], "committed %r" % com)
    c.close()
    offs = a.list_group_offsets(g)
    check(sorted(v.offset for v in offs.get(g, {}).values()) == [15, 15], "list_group_offsets %r" % offs)
    check(any(x["group_id"] == g for x in a.list_groups()), "group not listed")
    a.delete_groups([g])
    return "subscribe + commit + committed + list_group_offsets + list/delete groups"


def topic_configs(a, t):
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t)])
    return {k: v["value"] for k, v in res["topic"][t].items()}


def admin_ops(bs):
    t = topic("adm")
    a = admin(bs)
    create_topic(a, t, 2, {"retention.ms": "3600000"})
    try:
        a.create_topics([NewTopic(t, 1, 1)])
        raise AssertionError("creating an existing topic succeeded")
    except TopicAlreadyExistsError:
        pass
    check(t in a.list_topics(), "list_topics lacks topic")
    entries = topic_configs(a, t)
    check(entries.get("retention.ms") == "3600000", "retention.ms %r" % entries.get("retention.ms"))
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs={"retention.ms": "7200000"})])
    # Kafka applies the change through its metadata log, so a describe right after the alter may
    # still see the old value: wait (bounded) for the new one.
    deadline = time.time() + 15
    entries = topic_configs(a, t)
    while entries.get("retention.ms") != "7200000" and time.time() < deadline:
        time.sleep(0.1)
        entries = topic_configs(a, t)
    check(entries.get("retention.ms") == "7200000", "after alter retention.ms %r" % entries.get("retention.ms"))
    cl = a.describe_cluster()
    # One broker per bootstrap address (the runner lists every node of a cluster).
    check(len(cl["brokers"]) == len(bs.split(",")) and cl["cluster_id"], "describe_cluster %r" % cl)
    a.create_partitions({t: NewPartitions(3)})
    deadline = time.time() + 15
    while len(a.describe_topics([t])[0]["partitions"]) != 3:
        check(time.time() < deadline, "partition count not 3")
        time.sleep(0.2)
    recs = make_records(1, 10)
    produce(bs, t, recs)
    c = KafkaConsumer(bootstrap_servers=bs, group_id=None)
    tp = TopicPartition(t, 0)
    check(c.end_offsets([tp])[tp] == 10, "end offset")
    o = c.offsets_for_times({tp: recs[5]["ts"]})[tp]
    check(o is not None and o.offset == 5, "offsets_for_times(#5) -> %r" % (o,))
    if hasattr(a, "delete_records"):
        a.delete_records({tp: 4})
        check(c.beginning_offsets([tp])[tp] == 4, "beginning offset after delete_records %r" % c.beginning_offsets([tp]))
    c.close()
    a.delete_topics([t])
    deadline = time.time() + 15
    while t in a.list_topics():
        check(time.time() < deadline, "topic still listed after delete")
        time.sleep(0.2)
    return "create_topics(+exists) list_topics describe_topics describe_configs alter_configs describe_cluster create_partitions offsets_for_times delete_records delete_topics"


def leader_failover(bs):
    """failover.run with kafka-python's idempotent producer."""
    t = topic("failover")
    a = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=5000)
    p = KafkaProducer(bootstrap_servers=bs, acks="all", enable_idempotence=True, linger_ms=5, request_timeout_ms=10000,
                      delivery_timeout_ms=150000, retries=2**31 - 1)

    def leader_and_isr():
        d = a.describe_topics([t])
        part = [x for x in d[0]["partitions"] if x["partition_index"] == 0][0]
        return part["leader_id"], sorted(part["isr_nodes"])

    def produce_keys(ks):
        futs = [p.send(t, key=k.encode(), value=("v-" + k).encode(), partition=0) for k in ks]
        p.flush(150)
        return [f.get(150).offset for f in futs]

    def consume(n):
        c = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
        tp = TopicPartition(t, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = [(r["offset"], r["key"].decode()) for r in poll(c, n, 60)]
        c.close()
        return got

    def create():
        a.create_topics([NewTopic(t, 1, 3, topic_configs=failover.TOPIC_CONFIG)])
    try:
        return failover.run(create, leader_and_isr, produce_keys, consume)
    finally:
        p.close(5)
        a.close()


if __name__ == "__main__":
    main(CLIENT, OrderedDict([
        ("produce-consume-assign", produce_consume),
        ("compression", compression),
        ("subscribe-group", subscribe_group),
        ("admin", admin_ops),
        ("leader-failover", leader_failover),
    ]))

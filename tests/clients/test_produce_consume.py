"""Produce with librdkafka, read back with assign(), compare every field."""
import time

import pytest
from confluent_kafka import KafkaError

from kafkautil import (Delivery, admin, assert_same_records, consume_partitions, create_topic, make_records,
                       produce_all, producer, unique, wait_for_topic, watermarks)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(module_broker, codec):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("pc-" + codec), partitions=3)
    recs = make_records(1000, 3, prefix=codec)
    p = producer(b, compression_type=codec, acks="all", linger_ms=20)
    d = produce_all(p, topic, recs)
    assert not d.failed, d.failed
    assert len(d.ok) == 1000
    got = consume_partitions(b, topic, 3, expect=1000)
    assert_same_records(recs, got)
    # delivery reports name the offset each record landed at
    for part in got.values():
        for g in part:
            assert d.ok[g["key"]] == (g["partition"], g["offset"])
    assert watermarks(b, topic, 3) == {p_: (0, len(got[p_])) for p_ in range(3)}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(module_broker, acks):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("acks" + acks), partitions=1)
    recs = make_records(300, 1, prefix="a" + acks)
    p = producer(b, acks=acks, linger_ms=2)
    d = produce_all(p, topic, recs)
    assert not d.failed, d.failed
    assert d.count == 300
    got = consume_partitions(b, topic, 1, expect=300 if acks != "0" else None, timeout=30)[0]
    # whatever arrived must be correct and in order
    by_key = {r["key"]: r for r in recs}
    order = [by_key[g["key"]]["timestamp"] for g in got]
    assert order == sorted(order)
    for g in got:
        e = by_key[g["key"]]
        assert (g["value"], g["headers"], g["timestamp"]) == (e["value"], e["headers"], e["timestamp"])
    assert [g["offset"] for g in got] == list(range(len(got)))
    # flushed with no errors on a local broker: everything is there, for acks=0 too
    if acks == "0":
        deadline = time.time() + 10
        while len(got) < 300 and time.time() < deadline:
            time.sleep(0.5)
            got = consume_partitions(b, topic, 1, timeout=30)[0]
        # acks=0 delivery reports carry no offset
        assert all(off is None or off < 0 for _, off in d.ok.values())
    else:
        for g in got:
            assert d.ok[g["key"]] == (0, g["offset"])
    assert_same_records(recs, {0: got})


def test_idempotent_producer(module_broker):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("idem"), partitions=2)
    recs = make_records(500, 2, prefix="idem")
    p = producer(b, enable_idempotence=True, compression_type="lz4")
    d = produce_all(p, topic, recs)
    assert not d.failed, d.failed
    assert_same_records(recs, consume_partitions(b, topic, 2, expect=500))


def test_auto_create_topic_on_produce(module_broker):
    b = module_broker.bootstrap
    topic = unique("auto")
    assert topic not in admin(b).list_topics(timeout=10).topics
    recs = make_records(20, 1, prefix="auto")
    p = producer(b, acks="all")
    # partition unset: let the producer pick after metadata shows the new topic
    d = Delivery()
    for r in recs:
        p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"], timestamp=r["timestamp"],
                  on_delivery=d)
    assert p.flush(60) == 0
    assert not d.failed, d.failed
    md = wait_for_topic(b, topic, 1)  # num.partitions default 1
    assert len(md.topics[topic].partitions) == 1
    got = consume_partitions(b, topic, 1, expect=20)
    assert_same_records(recs, got)


def test_record_larger_than_message_max_bytes(module_broker):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("big"), partitions=1)
    # client limit raised so the broker (message.max.bytes default 1048588) is the one refusing
    p = producer(b, acks="all", message_max_bytes=10_000_000, compression_type="none",
                 message_send_max_retries=0)
    d = Delivery()
    p.produce(topic, key=b"big", value=b"x" * 2_000_000, on_delivery=d)
    assert p.flush(30) == 0
    assert b"big" in d.failed, d.ok
    assert d.failed[b"big"].code() == KafkaError.MSG_SIZE_TOO_LARGE, d.failed[b"big"]
    # the broker keeps serving, on the same connection and on new ones
    recs = make_records(5, 1, prefix="after-big")
    d2 = produce_all(p, topic, recs)
    assert not d2.failed
    got = consume_partitions(b, topic, 1, expect=5)
    assert_same_records(recs, got)

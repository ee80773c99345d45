"""Time- and size-based retention delete whole old segments; the retained tail stays contiguous."""
import os
import time

import pytest
from confluent_kafka import KafkaException

from kafkautil import (assert_same_records, consume_partitions, create_topic, make_records, produce_all, producer,
                       unique, watermarks)

# Kafka runs its first retention check 30s after startup (LogManager InitialTaskDelayMs),
# then every log.retention.check.interval.ms; waits below are bounded at 60s for that.
BROKER_OVERRIDES = {"log.retention.check.interval.ms": "500"}
SEGMENT = 1048576  # Kafka 4.x refuses segment.bytes below 1 MiB (INVALID_CONFIG)


def segment_files(broker, topic):
    d = broker.data_dir / ("%s-0" % topic)
    return sorted(f for f in os.listdir(d) if f.endswith(".log"))


def wait_for(pred, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def test_segment_bytes_below_minimum_rejected(module_broker):
    with pytest.raises(KafkaException) as ei:
        create_topic(module_broker.bootstrap, unique("tiny"), 1, {"segment.bytes": "16384"})
    err = ei.value.args[0]
    assert err.code() == 40, err  # INVALID_CONFIG


def test_retention_ms(module_broker):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("ret-ms"), 1, {"segment.bytes": str(SEGMENT), "retention.ms": "600000"})
    now = int(time.time() * 1000)
    old = make_records(6000, 1, prefix="old", base_ts=now - 3_600_000, value_size=1000)  # ~6 MiB, 1h old
    new = make_records(500, 1, prefix="new", base_ts=now, value_size=1000)
    p = producer(b, acks="all", batch_size=65536)
    produce_all(p, topic, old)
    time.sleep(0.5)
    produce_all(p, topic, new)
    total = len(old) + len(new)
    # retention may already be running (the check interval is 500 ms): only the end is fixed here
    assert watermarks(b, topic, 1)[0][1] == total
    before = segment_files(module_broker, topic)

    lo = wait_for(lambda: (watermarks(b, topic, 1)[0][0] or None), what="log start offset to advance")
    # ~6 MiB of old records in 1 MiB segments: at least 5 segments existed and must be gone
    wait_for(lambda: int(segment_files(module_broker, topic)[0][:20]) > 0, what="old segment files to be deleted")
    assert len(segment_files(module_broker, topic)) <= len(before)
    lo, hi = watermarks(b, topic, 1)[0]
    assert 0 < lo <= len(old), (lo, hi)
    assert hi == total
    got = consume_partitions(b, topic, 1, start=-2, expect=hi - lo)  # -2 = OFFSET_BEGINNING
    assert [g["offset"] for g in got[0]] == list(range(lo, hi))
    assert_same_records((old + new)[lo:], got, check_contiguous_from=lo)
    # remaining segments start exactly at segment base offsets
    assert segment_files(module_broker, topic)[0] == "%020d.log" % lo


def test_retention_bytes(module_broker):
    b = module_broker.bootstrap
    topic = create_topic(b, unique("ret-bytes"), 1,
                         {"segment.bytes": str(SEGMENT), "retention.bytes": str(2 * SEGMENT)})
    recs = make_records(8000, 1, prefix="rb", value_size=1000)  # ~8 MiB
    produce_all(producer(b, acks="all", batch_size=65536), topic, recs)
    assert watermarks(b, topic, 1)[0][1] == 8000  # retention may already have started
    wait_for(lambda: watermarks(b, topic, 1)[0][0] > 0, what="log start offset to advance")

    def size():
        d = module_broker.data_dir / ("%s-0" % topic)
        return sum(os.path.getsize(d / f) for f in segment_files(module_broker, topic))

    wait_for(lambda: size() <= 3 * SEGMENT, what="log to shrink to retention.bytes + one segment")
    lo, hi = watermarks(b, topic, 1)[0]
    assert hi == 8000 and lo > 0
    assert segment_files(module_broker, topic)[0] == "%020d.log" % lo
    got = consume_partitions(b, topic, 1, start=-2, expect=hi - lo)
    assert_same_records(recs[lo:], got, check_contiguous_from=lo)

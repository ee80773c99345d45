"""Log compaction: after the cleaner runs, a compacted topic holds the latest value per key (read
back with a real consumer), offsets are unchanged, and Kafka's kafka-dump-log reads the cleaned
segments."""
import re
import subprocess
import time

from kafkautil import create_topic, consume_partitions, producer, unique
from conftest import REPO

DUMP = REPO / "compat" / "kafka" / "bin" / "kafka-dump-log.sh"
BAD = re.compile(r"Exception|ERROR|corrupt|isvalid: false|Mismatches|Non-consecutive|not a valid|failed", re.I)
BROKER_OVERRIDES = {"log.cleaner.backoff.ms": "200"}
KEYS = 10
ROUNDS = 6
SEGMENT_MS = 20  # roll by time: segment.bytes cannot go below 1 MiB (as in Kafka)


def test_compacted_topic_keeps_latest_value_per_key_and_dump_log_reads_it(broker):
    b = broker.bootstrap
    topic = create_topic(b, unique("compact"), 1, config={
        "cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01"})
    p = producer(b, linger_ms=0, acks="all")
    latest = {}
    offset = 0
    for r in range(ROUNDS):
        for k in range(KEYS):
            key, value = b"key-%02d" % k, b"value-%d-%d" % (r, k)
            p.produce(topic, key=key, value=value, partition=0)
            p.flush(10)
            time.sleep(SEGMENT_MS * 1.5 / 1000)  # so that most records start a new segment
            latest[key] = (offset, value)
            offset += 1
    p.produce(topic, key=b"key-00", value=None, partition=0)  # tombstone
    p.flush(10)
    latest[b"key-00"] = (offset, None)
    total = offset + 1

    deadline = time.time() + 30
    while True:
        got = consume_partitions(b, topic, 1)[0]
        if len(got) < total // 2 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert len(got) < total // 2, "the cleaner did not compact (%d of %d records left)" % (len(got), total)
    offsets = [r["offset"] for r in got]
    assert offsets == sorted(offsets) and offsets[-1] == total - 1, "offsets keep their order; the tail stays"
    seen = {}
    for r in got:
        seen[r["key"]] = (r["offset"], r["value"])
    assert seen == latest, "the last record per key survives with its original offset"

    broker.stop()
    pdir = broker.data_dir / ("%s-0" % topic)
    logs = sorted(pdir.glob("*.log"))
    r = subprocess.run([str(DUMP), "--deep-iteration", "--print-data-log", "--files", ",".join(map(str, logs))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
    assert not BAD.search(r.stdout), BAD.search(r.stdout).group(0)
    dumped = [int(m) for m in re.findall(r"^\| offset: (\d+)", r.stdout, re.M)]
    # The cleaner may have run once more before the stop: what is on disk is a subset of what
    # was read, and still holds the latest record of every key.
    assert dumped == sorted(dumped)
    assert set(dumped) <= set(offsets), "kafka-dump-log sees records the consumer never read"
    assert {o for o, _ in latest.values()} <= set(dumped), "a key's latest record is missing on disk"

"""Data and offsets survive a clean restart."""
from kafkautil import (assert_same_records, consume_partitions, create_topic, make_records, offsets_for_times,
                       produce_all, producer, unique, watermarks)


def test_clean_restart_keeps_data_and_offsets(broker):
    b = broker.bootstrap
    topic = create_topic(b, unique("restart"), partitions=2)
    recs = make_records(600, 2, prefix="r")
    d = produce_all(producer(b, acks="all", compression_type="zstd"), topic, recs)
    assert not d.failed
    before_wm = watermarks(b, topic, 2)
    assert before_wm == {0: (0, 300), 1: (0, 300)}
    # record i has timestamp base+i and sits on partition i%2 at offset i//2
    probe = {0: recs[200]["timestamp"], 1: recs[401]["timestamp"]}
    before_ts = offsets_for_times(b, topic, probe)
    assert before_ts == {0: 100, 1: 200}
    future = offsets_for_times(b, topic, {0: recs[-1]["timestamp"] + 10_000})
    assert future == {0: -1}  # no record at/after that time: OFFSET_END (-1)

    broker.restart()
    assert broker.bootstrap == b

    assert watermarks(b, topic, 2) == before_wm
    assert offsets_for_times(b, topic, probe) == before_ts
    assert_same_records(recs, consume_partitions(b, topic, 2, expect=600))
    # and the log keeps appending at the right offsets
    more = make_records(10, 2, prefix="r2", base_ts=recs[-1]["timestamp"] + 1)
    d2 = produce_all(producer(b, acks="all"), topic, more)
    assert sorted(d2.ok.values()) == sorted([(0, 300 + i) for i in range(5)] + [(1, 300 + i) for i in range(5)])

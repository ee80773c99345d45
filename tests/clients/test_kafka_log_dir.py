"""sluice opens a log directory written by real Apache Kafka and serves it unchanged."""
import pytest

from kafkautil import (assert_same_records, consume_partitions, create_topic, make_records, produce_all, producer,
                       unique, watermarks)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.sluice_only
def test_reads_kafka_written_log_dir(broker_factory):
    kafka = broker_factory(target="kafka")
    b = kafka.bootstrap
    topic = create_topic(b, unique("from-kafka"), partitions=3)
    recs = []
    for ci, codec in enumerate(CODECS):
        batch = make_records(300, 3, prefix="kk-" + codec, base_ts=1_700_000_000_000 + ci * 1000)
        d = produce_all(producer(b, acks="all", compression_type=codec, enable_idempotence=(ci % 2 == 0)),
                        topic, batch)
        assert not d.failed
        recs += batch
    wm = watermarks(b, topic, 3)
    kafka_view = consume_partitions(b, topic, 3, expect=len(recs))
    assert_same_records(recs, kafka_view)
    kafka.stop()

    assert (kafka.data_dir / "meta.properties").exists()
    assert (kafka.data_dir / "__cluster_metadata-0").is_dir()
    under_test = broker_factory(data_dir=kafka.data_dir)
    b2 = under_test.bootstrap
    assert watermarks(b2, topic, 3) == wm
    got = consume_partitions(b2, topic, 3, expect=len(recs))
    assert got == kafka_view
    assert_same_records(recs, got)

"""A data dir written by an earlier single-node release starts under today's binary with
everything intact: topics with their ids and configs, the dynamic broker default, every record
(offsets, timestamps, keys, values, headers), the group's committed offsets and the idempotent
producers' state. Each fixture in tests/fixtures/upgrade/ was made by
make_upgrade_fixture.py with that release's binary; its manifest is what that release said."""
import json
import tarfile
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from kafkautil import consume_partitions, consumer, make_records, produce_all, producer
from upgrade_fixture import GROUP, ORDERS_TS, observe, record, tool

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "upgrade").glob("*.tar.gz"))


@pytest.mark.sluice_only
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_a_data_dir_of_an_earlier_release_starts_with_everything_intact(fixture, broker_factory, tmp_path):
    with tarfile.open(fixture) as t:
        t.extractall(tmp_path, filter="data")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    # Committed offsets of an empty group expire offsets.retention.minutes after the commit; the
    # fixture's are older than that.
    b = broker_factory(data_dir=tmp_path / "data", overrides={"offsets.retention.minutes": "2147483647"})
    then = manifest["observed"]
    now = observe(b.bootstrap)
    for key in then:
        assert now[key] == then[key], "%s differs after the upgrade (fixture made by %s)" % (key, manifest["made_by"])

    # And it goes on: appends continue after the old records, a new idempotent producer gets an
    # id none of the old ones had, and the group commits on from its offsets.
    old_ids = {row[0] for rows in then["producers"].values() for row in rows}
    d = produce_all(producer(b.bootstrap, acks="all", enable_idempotence=True), "orders", make_records(30, 3, prefix="new", base_ts=ORDERS_TS))
    assert not d.failed and len(d.ok) == 30
    for p in range(3):
        assert sorted(o for (part, o) in d.ok.values() if part == p) == list(range(then["watermarks"]["orders"][str(p)][1],
                                                                                 then["watermarks"]["orders"][str(p)][1] + 10))
    after = observe(b.bootstrap)
    new_ids = {row[0] for rows in after["producers"].values() for row in rows} - old_ids
    assert len(new_ids) == 1, after["producers"]
    c = consumer(b.bootstrap, group_id=GROUP)
    c.commit(offsets=[TopicPartition("orders", p, 100) for p in range(3)], asynchronous=False)
    c.close()
    assert observe(b.bootstrap)["committed"] == {"0": 100, "1": 100, "2": 100}
    got = consume_partitions(b.bootstrap, "orders", 3, expect=330)
    assert sum(len(v) for v in got.values()) == 330


@pytest.mark.sluice_only
def test_a_kafka_single_node_log_dir_starts_with_everything_intact(broker_factory):
    """The same workload on a real single-node Apache Kafka 4.x; sluice started on its log dir
    says what Kafka said."""
    kafka = broker_factory(target="kafka")
    then = record(kafka.bootstrap)
    kafka.stop()
    b = broker_factory(data_dir=kafka.data_dir, overrides={"offsets.retention.minutes": "2147483647"})
    now = observe(b.bootstrap)
    for key in then:
        assert now[key] == then[key], "%s differs from what Kafka said" % key
    assert "took over Apache Kafka's topic configs" in "".join(b.stderr_lines)

    # Taken over once: what is changed through sluice afterwards outlives its restarts.
    tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", "orders",
         "--add-config", "retention.ms=1000000")
    b.restart()
    assert observe(b.bootstrap)["topic_configs"]["orders"]["retention.ms"] == "1000000"
    assert "took over" not in "".join(b.stderr_lines)

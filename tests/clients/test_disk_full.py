"""A follower whose disk fills up: on a three-node sluice cluster where node 3's log dir is a
small tmpfs (its metadata log elsewhere), acks=all writes to a partition on all three keep
being taken once node 3 can no longer append; node 3 logs the failed append with its path,
stops fetching that partition, leaves the ISR (2 of 3 is still min.insync.replicas), and keeps running and answering clients
(Kafka, with its only log dir failed, shuts the broker down). Nothing acknowledged is lost.
Needs root (mount).
"""
import os
import re
import subprocess

import pytest

from conftest import SluiceCluster, sluice_bin
from kafkautil import admin, consume_partitions, make_records, produce_all, producer, unique
from test_cluster import tool, wait_until
from test_replication import isr

pytestmark = [pytest.mark.sluice_only, pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")]


def test_a_follower_out_of_disk_space_leaves_the_isr_and_the_broker_keeps_serving(tmp_path):
    c = SluiceCluster(tmp_path / "cluster", 3, overrides={
        "replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "60000",
        "metadata.log.dir": str(tmp_path / "cluster" / "meta{node}")})
    full = c.workdir / "node3"
    full.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(full)], check=True)
    try:
        # Formatted here: `start` formats only a node whose log dir does not exist yet.
        subprocess.run([str(sluice_bin()), "format", "-t", c.cluster_id, "-c", str(c.properties(3))],
                       check=True, capture_output=True, timeout=30)
        c.start()
        topic = unique("fills")
        tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
             "--replica-assignment", "1:2:3", "--config", "min.insync.replicas=2", "--config", "segment.bytes=4194304")
        wait_until("the whole ISR", lambda: isr(c.bootstrap, topic) == [1, 2, 3])
        node1 = "%s:%d" % (c.hosts[1], c.ports[1])
        # 40 MiB through a follower with 24 MiB of disk.
        acked = {}
        for batch in range(8):
            d = produce_all(producer(node1, acks="all", enable_idempotence=True), topic,
                            make_records(1000, 1, prefix="b%d" % batch, value_size=5000))
            assert not d.failed, list(d.failed.values())[:3]
            acked.update(d.ok)
        wait_until("node 3 to leave the ISR", lambda: isr(node1, topic) == [1, 2], timeout=60)
        log = c.log(3)
        m = re.search(r".*(No space left on device|os error 28).*", log)
        assert m, log[-3000:]
        assert str(full) in m.group(0), m.group(0)
        # The poisoned partition is no longer fetched (not one failed append per fetch round).
        assert log.count("applying a fetch from the leader failed") <= 2, log[-3000:]
        # Node 3 runs and answers.
        assert c.procs[3].poll() is None
        md = admin("%s:%d" % (c.hosts[3], c.ports[3])).list_topics(topic, timeout=10)
        assert sorted(md.brokers) == [1, 2, 3] and md.topics[topic].error is None
        # Two of three in sync: acks=all still taken; everything acknowledged reads back.
        d = produce_all(producer(node1, acks="all", enable_idempotence=True), topic, make_records(50, 1, prefix="after"))
        assert not d.failed
        acked.update(d.ok)
        got = consume_partitions(c.bootstrap, topic, 1, expect=len(acked), timeout=120)
        at = {r["key"]: r["offset"] for r in got[0]}
        assert {k: at.get(k) for k in acked} == {k: o for k, (_, o) in acked.items()}
    finally:
        c.close()
        subprocess.run(["umount", "-l", str(full)], check=False)

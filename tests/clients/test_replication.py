"""The ISR as Kafka's tools see it, on a three-node sluice cluster and, for comparison, on a
three-node Apache Kafka cluster: a paused follower leaves the ISR of every partition it
follows after `replica.lag.time.max.ms` and joins again once it runs and has caught up; while
a partition's ISR is below `min.insync.replicas`, acks=all writes to it are refused with
NOT_ENOUGH_REPLICAS and acks=1 writes are still taken; nothing acknowledged is lost; on sluice
the leader's metrics (under-replicated, under-min-ISR, ISR shrinks and expands, follower lag)
say the same. The
broker session timeout is set far above the lag time so that what moves the ISR is the lag, not
the broker being fenced (test_cluster.py covers fencing). With the ISR below the minimum, the
members it lost stay eligible to lead (KIP-966), and one that stopped cleanly leads once the
ISR is empty (five nodes of each).
"""
import os
import re
import signal
import urllib.request

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkautil import admin, consume_partitions, make_records, produce_all, producer, unique
from test_cluster import describe, tool, wait_until


def isr(bootstrap, topic):
    """Partition 0's ISR, sorted, from librdkafka's metadata (a request to a paused broker times
    out in 5 s and the loop asks again); None while there is none."""
    try:
        md = admin(bootstrap).list_topics(topic, timeout=5).topics[topic]
        return sorted(md.partitions[0].isrs) if md.error is None else None
    except (KafkaException, KeyError):
        return None


def describe_quick(config, bootstrap, topic):
    """kafka-topics --describe with short admin timeouts (`config`): partition 0's (leader,
    replicas, sorted ISR), or None when the tool fails. With a broker paused but not fenced,
    Kafka's tool may send its ListPartitionReassignments to that broker and time out; the next
    try picks another."""
    r = tool("TopicCommand", "--bootstrap-server", bootstrap, "--command-config", str(config), "--describe",
             "--topic", topic, check=False)
    m = re.search(r"Partition: 0\s+Leader: (-?\d+|none)\s+Replicas: ([\d,]*)\s+Isr: ([\d,]*)", r.stdout)
    if r.returncode != 0 or not m:
        return None
    ints = lambda v: [int(x) for x in v.split(",") if x]
    return (-1 if m.group(1) == "none" else int(m.group(1)), ints(m.group(2)), sorted(ints(m.group(3))))


def metric(c, node, name, **labels):
    """The value of one series on a sluice node's /metrics (0 when absent)."""
    with urllib.request.urlopen("http://%s:%d/metrics" % (c.hosts[node], c.health_ports[node]), timeout=10) as r:
        text = r.read().decode()
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for m in re.finditer(r"^%s(?:\{([^}]*)\})? (\S+)$" % re.escape(name), text, re.M):
        if ",".join(sorted((m.group(1) or "").split(","))) == want or not labels and not m.group(1):
            return float(m.group(2))
    return 0.0


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_paused_follower_leaves_the_isr_and_acks_all_below_min_isr_is_refused(kind, request):
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    # The session timeout is far above the lag time: broker 2 leaves the ISRs for lagging while
    # it is still a registered, unfenced broker.
    c = make(3, overrides={"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "60000"})
    # "Broker 1" leads, "broker 2" is paused: the two that are not the active controller (see
    # the unclean-election test below for why).
    status = tool("MetadataQuorumCommand", "--bootstrap-server", c.bootstrap, "describe", "--status").stdout
    keeper = int(re.search(r"LeaderId:\s+(\d+)", status).group(1))
    one, two = [n for n in (1, 2, 3) if n != keeper]
    node1 = "%s:%d" % (c.hosts[one], c.ports[one])
    wide, narrow = unique("isr-wide"), unique("isr-narrow")
    # Broker 1 leads both; broker 2 follows both; the narrow topic has no third replica.
    for topic, assignment in ((wide, "%d:%d:%d" % (one, two, keeper)), (narrow, "%d:%d" % (one, two))):
        tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
             "--replica-assignment", assignment, "--config", "min.insync.replicas=2")
    for topic, whole in ((wide, [1, 2, 3]), (narrow, sorted([one, two]))):
        wait_until("%s to have its whole ISR" % topic,
                   lambda: (lambda r: r if r.get(0) and r[0][0] == one and sorted(r[0][2]) == whole else None)(
                       describe(c.bootstrap, topic)))
    acked = {}
    for topic in (wide, narrow):
        d = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(20, 1, prefix="before"))
        assert not d.failed and len(d.ok) == 20
        acked[topic] = dict(d.ok)

    os.kill(c.pid(two), signal.SIGSTOP)
    try:
        # A follower with nothing to fetch is in sync however long it is silent (Kafka's rule:
        # caught up to the leader's log end); acks=1 writes, which only the leader takes, put
        # the paused follower behind.
        for topic in (wide, narrow):
            d = produce_all(producer(node1, acks="1"), topic, make_records(5, 1, prefix="leader-only"))
            assert not d.failed and len(d.ok) == 5
            acked[topic].update(d.ok)
        wait_until("broker 2 to leave both ISRs",
                   lambda: isr(node1, wide) == sorted([one, keeper]) and isr(node1, narrow) == [one], timeout=60)
        assert two in admin(node1).list_topics(timeout=10).brokers, "broker 2 was fenced, not dropped for lagging"
        # kafka-topics --describe shows it.
        quick = request.getfixturevalue("tmp_path") / "admin.properties"
        quick.write_text("request.timeout.ms=5000\ndefault.api.timeout.ms=10000\n")
        wait_until("kafka-topics --describe to show both ISRs shrunk",
                   lambda: describe_quick(quick, node1, wide) == (one, [one, two, keeper], sorted([one, keeper]))
                   and describe_quick(quick, node1, narrow) == (one, [one, two], [one]), timeout=120)
        if kind == "sluice":
            # The leader's metrics say the same: two partitions under-replicated, one under its
            # min ISR, both ISRs shrunk, broker 2 behind by the acks=1 records; none offline.
            assert metric(c, one, "sluice_under_replicated_partitions") == 2
            assert metric(c, one, "sluice_under_min_isr_partitions") == 1
            assert metric(c, one, "sluice_isr_shrinks_total") >= 2
            assert metric(c, one, "sluice_partition_isr_size", topic=narrow, partition="0") == 1
            assert metric(c, one, "sluice_partition_replica_lag_offsets", topic=narrow, partition="0", replica=str(two)) == 5
            assert metric(c, one, "sluice_offline_partitions") == 0
            # Only the leader reports a partition's ISR.
            assert metric(c, keeper, "sluice_partition_isr_size", topic=wide, partition="0") == 0
        # Two of three in sync: acks=all is taken.
        d = produce_all(producer(node1, acks="all"), wide, make_records(20, 1, prefix="shrunk"))
        assert not d.failed and len(d.ok) == 20
        acked[wide].update(d.ok)
        # The leader alone, below min.insync.replicas=2: acks=all is refused before the append,
        # with NOT_ENOUGH_REPLICAS (librdkafka would retry it until its delivery timeout).
        d = produce_all(producer(node1, acks="all", retries=0), narrow, make_records(5, 1, prefix="refused"))
        assert not d.ok and len(d.failed) == 5
        assert {e.code() for e in d.failed.values()} == {KafkaError.NOT_ENOUGH_REPLICAS}, d.failed
    finally:
        os.kill(c.pid(two), signal.SIGCONT)

    wait_until("broker 2 to join both ISRs again",
               lambda: isr(c.bootstrap, wide) == [1, 2, 3] and isr(c.bootstrap, narrow) == sorted([one, two]), timeout=60)
    assert sorted(describe(c.bootstrap, wide)[0][2]) == [1, 2, 3]
    assert sorted(describe(c.bootstrap, narrow)[0][2]) == sorted([one, two])
    if kind == "sluice":
        assert metric(c, one, "sluice_under_replicated_partitions") == 0
        assert metric(c, one, "sluice_isr_expands_total") >= 2
    d = produce_all(producer(c.bootstrap, acks="all"), narrow, make_records(5, 1, prefix="healed"))
    assert not d.failed and len(d.ok) == 5
    acked[narrow].update(d.ok)
    for topic in (wide, narrow):
        got = consume_partitions(c.bootstrap, topic, 1, expect=len(acked[topic]))
        at = {r["key"]: r["offset"] for r in got[0]}
        assert {k: at.get(k) for k in acked[topic]} == {k: o for k, (_, o) in acked[topic].items()}
        assert not any(k.startswith(b"refused") for k in at)


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_replica_outside_the_isr_leads_only_where_unclean_election_is_enabled(kind, request):
    """Broker 2 falls out of the ISR of two partitions led by broker 1, which takes records
    alone and is then killed. Where `unclean.leader.election.enable` is true, broker 2 leads
    and the records only broker 1 had are gone (the trade the config makes); where it is false
    (the default) the partition stays offline until kafka-leader-election --election-type
    UNCLEAN asks for the same. Broker 1, back, follows broker 2 and drops what it had alone.

    "Broker 1" and "broker 2" are the two that are not the active controller, so that what
    moves is the ISR and not the controller as well (test_cluster.py pauses the controller)."""
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(3, overrides={"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "6000",
                           "broker.heartbeat.interval.ms": "500"})
    status = tool("MetadataQuorumCommand", "--bootstrap-server", c.bootstrap, "describe", "--status").stdout
    keeper = int(re.search(r"LeaderId:\s+(\d+)", status).group(1))
    one, two = [n for n in (1, 2, 3) if n != keeper]
    node1 = "%s:%d" % (c.hosts[one], c.ports[one])
    node3 = "%s:%d" % (c.hosts[keeper], c.ports[keeper])
    quick = request.getfixturevalue("tmp_path") / "admin.properties"
    quick.write_text("request.timeout.ms=5000\ndefault.api.timeout.ms=10000\n")
    leader = lambda topic: (describe_quick(quick, node3, topic) or (None,))[0]
    clean, unclean = unique("clean"), unique("unclean")
    for topic, on in ((clean, "false"), (unclean, "true")):
        tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic, "--replica-assignment", "%d:%d" % (one, two),
             "--config", "min.insync.replicas=1", "--config", "unclean.leader.election.enable=" + on)
        wait_until("%s to have its whole ISR" % topic, lambda: isr(c.bootstrap, topic) == sorted([one, two]))
    for topic in (clean, unclean):
        d = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(10, 1, prefix="both"))
        assert not d.failed and len(d.ok) == 10

    os.kill(c.pid(two), signal.SIGSTOP)
    try:
        for topic in (clean, unclean):
            d = produce_all(producer(node1, acks="1"), topic, make_records(5, 1, prefix="lagging"))
            assert not d.failed
        wait_until("broker 2 to leave both ISRs", lambda: isr(node1, clean) == [one] and isr(node1, unclean) == [one], timeout=60)
        # acks=all with min.insync.replicas=1: broker 1 alone acknowledges these.
        for topic in (clean, unclean):
            d = produce_all(producer(node1, acks="all"), topic, make_records(5, 1, prefix="alone"))
            assert not d.failed and len(d.ok) == 5
        c.kill9(one)
    finally:
        os.kill(c.pid(two), signal.SIGCONT)

    row = wait_until("broker 2 to lead the unclean topic",
                     lambda: (lambda r: r if r and r[0] == two else None)(describe_quick(quick, node3, unclean)), timeout=90)
    assert row[2] == [two]
    assert wait_until("the clean topic to be described", lambda: describe_quick(quick, node3, clean))[0] == -1, \
        "the clean topic must stay offline"
    d = produce_all(producer(node3, acks="all"), unclean, make_records(5, 1, prefix="after"))
    assert not d.failed and len(d.ok) == 5
    got = consume_partitions(node3, unclean, 1, expect=15)
    keys = [r["key"] for r in got[0]]
    kinds = [k.split(b"-")[0] for k in keys]
    # A fetch answer already on its way when broker 2 stopped may have brought it some of the
    # acks=1 records; none of those acknowledged while broker 1 was alone reached it.
    lagging = len(keys) - 15
    assert 0 <= lagging <= 5 and kinds == [b"both"] * 10 + [b"lagging"] * lagging + [b"after"] * 5, keys
    assert [r["offset"] for r in got[0]] == list(range(len(keys)))

    # The same election on request, for the topic that does not allow it by config.
    tool("LeaderElectionCommand", "--bootstrap-server", node3, "--election-type", "UNCLEAN", "--topic", clean, "--partition", "0")
    wait_until("broker 2 to lead the clean topic", lambda: leader(clean) == two, timeout=60)

    # Broker 1 comes back as a follower and truncates to broker 2's log.
    c.start(one)
    wait_until("broker 1 to rejoin the unclean topic's ISR", lambda: isr(c.bootstrap, unclean) == sorted([one, two]), timeout=90)
    c.kill9(two)
    wait_until("broker 1 to lead again", lambda: leader(unclean) == one, timeout=60)
    got = consume_partitions(node3, unclean, 1, expect=len(keys))
    assert [r["key"] for r in got[0]] == keys


def describe_elr(config, bootstrap, topic):
    """kafka-topics --describe of partition 0 with the eligible leader replica columns (KIP-966):
    (leader, sorted ISR, sorted ELR, sorted last known ELR), or None when the tool fails."""
    r = tool("TopicCommand", "--bootstrap-server", bootstrap, "--command-config", str(config), "--describe", "--topic", topic,
             check=False)
    m = re.search(r"Partition: 0\s+Leader: (-?\d+|none)\s+Replicas: [\d,]*\s+Isr: ([\d,]*)\s+Elr: ([\d,]*)\s+LastKnownElr: ([\d,]*)",
                  r.stdout)
    if r.returncode != 0 or not m:
        return None
    ints = lambda s: sorted(int(x) for x in s.split(",") if x)
    return (-1 if m.group(1) == "none" else int(m.group(1)), ints(m.group(2)), ints(m.group(3)), ints(m.group(4)))


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_replica_stopped_cleanly_below_min_isr_leads_once_the_isr_is_empty(kind, request):
    """Eligible leader replicas (KIP-966, on in a new cluster of either): five nodes, so that two
    can be down with the quorum up. A topic on brokers Y and X, min.insync.replicas=2. X stops
    cleanly: the ISR falls below the minimum and X becomes an eligible leader replica. Y is
    killed: once fenced, the ISR is empty, X and Y are eligible, Y is the last known leader,
    nothing leads. X starts again and, eligible and clean, leads at once (before KIP-966 the
    partition waited for Y). Y, back from a crash, is no longer eligible and rejoins the ISR as
    a follower; every acknowledged record is there."""
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(5, overrides={"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "500"})
    status = tool("MetadataQuorumCommand", "--bootstrap-server", c.bootstrap, "describe", "--status").stdout
    keeper = int(re.search(r"LeaderId:\s+(\d+)", status).group(1))
    y, x = [n for n in (1, 2, 3, 4, 5) if n != keeper][:2]
    up = "%s:%d" % (c.hosts[keeper], c.ports[keeper])
    quick = request.getfixturevalue("tmp_path") / "admin.properties"
    quick.write_text("request.timeout.ms=5000\ndefault.api.timeout.ms=10000\n")
    topic = unique("elr")
    tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic, "--replica-assignment", "%d:%d" % (y, x),
         "--config", "min.insync.replicas=2")
    wait_until("the whole ISR", lambda: describe_elr(quick, up, topic) == (y, sorted([x, y]), [], []))
    d = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(20, 1, prefix="acked"))
    assert not d.failed and len(d.ok) == 20

    if kind == "sluice":
        assert c.sigterm(x) == 0
    else:
        c.stop(x)
    wait_until("X to be eligible", lambda: describe_elr(quick, up, topic) == (y, [y], [x], []))

    c.kill9(y)
    row = wait_until("Y to be fenced, leaving the ISR empty",
                     lambda: (lambda r: r if r and r[1] == [] else None)(describe_elr(quick, up, topic)), timeout=60)
    assert row == (-1, [], sorted([x, y]), [y])

    c.start(x)
    wait_until("X to lead from the ELR", lambda: describe_elr(quick, up, topic) == (x, [x], [y], []), timeout=90)

    c.start(y)
    wait_until("Y, back from a crash, to rejoin the ISR as a follower",
               lambda: describe_elr(quick, up, topic) == (x, sorted([x, y]), [], []), timeout=90)
    got = consume_partitions(c.bootstrap, topic, 1, expect=20)
    assert [r["key"] for r in got[0]] == [r["key"] for r in make_records(20, 1, prefix="acked")]
    assert [r["offset"] for r in got[0]] == list(range(20))

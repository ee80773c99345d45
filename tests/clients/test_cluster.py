"""Three sluice processes, each broker and controller, started from Kafka-style server.properties
(a static three-voter KRaft quorum), are one cluster to Kafka's own tools and to librdkafka:
every broker is listed everywhere, topics are created through the active controller and placed
across the brokers with their replication factor, each partition is served by its leader, a
broker killed with SIGKILL is fenced out of the metadata and comes back after a restart,
SIGTERM moves a broker's leaderships away before it exits, and a paused active controller is
replaced without fencing the live brokers (on Apache Kafka too). Followers copy their leaders, so a
rolling restart under acks=all load loses no acknowledged record, and leadership goes back to
the preferred replicas (automatically, or with kafka-leader-election). A group's new coordinator
replays the group from its copy of __consumer_offsets. A voter paused and resumed does not
move the active controller (pre-vote).
"""
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import free_port, sluice_bin
from kafkautil import admin, consume_partitions, consumer, kafka_tool, make_records, produce_all, producer, unique, watermarks

tool = kafka_tool


def describe(bootstrap, topic):
    """kafka-topics --describe: {partition: (leader, replicas, isr)}."""
    out = tool("TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic).stdout
    rows = {}
    for m in re.finditer(r"Partition: (\d+)\s+Leader: (-?\d+|none)\s+Replicas: ([\d,]*)\s+Isr: ([\d,]*)", out):
        leader = -1 if m.group(2) == "none" else int(m.group(2))
        ints = lambda s: [int(x) for x in s.split(",") if x]
        rows[int(m.group(1))] = (leader, ints(m.group(3)), ints(m.group(4)))
    return rows


def brokers_seen(bootstrap):
    md = admin(bootstrap).list_topics(timeout=10)
    return sorted(md.brokers), md


def wait_until(what, check, timeout=30):
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.time() < deadline, "%s did not happen within %ds" % (what, timeout)
        time.sleep(0.3)


def test_three_nodes_are_one_cluster_to_kafka_tools_and_librdkafka(sluice_cluster):
    c = sluice_cluster(3)
    # Every broker lists all three, with their own addresses.
    for node, port in c.ports.items():
        ids, md = brokers_seen("127.0.0.1:%d" % port)
        assert ids == [1, 2, 3], (node, ids)
        assert {b.id: b.port for b in md.brokers.values()} == c.ports

    # kafka-topics creates through one broker; another describes three replicas per partition,
    # each partition led by a different broker (Kafka's round-robin placement).
    topic = unique("rf3")
    tool("TopicCommand", "--bootstrap-server", "127.0.0.1:%d" % c.ports[1], "--create", "--topic", topic,
         "--partitions", "3", "--replication-factor", "3")
    rows = describe("127.0.0.1:%d" % c.ports[2], topic)
    assert sorted(rows) == [0, 1, 2]
    for p, (leader, replicas, isr) in rows.items():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0], rows
    assert sorted(r[0] for r in rows.values()) == [1, 2, 3], rows
    # librdkafka sees the same leaders and replicas.
    _, md = brokers_seen("127.0.0.1:%d" % c.ports[3])
    for p, meta in md.topics[topic].partitions.items():
        assert (meta.leader, list(meta.replicas)) == (rows[p][0], rows[p][1]), (p, meta)

    # More replicas than brokers: INVALID_REPLICATION_FACTOR, with Kafka's message.
    r = tool("TopicCommand", "--bootstrap-server", c.bootstrap, "--create", "--topic", unique("rf4"),
             "--partitions", "1", "--replication-factor", "4", check=False)
    assert r.returncode != 0 and "InvalidReplicationFactorException" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "only 3 broker(s) are registered" in r.stdout + r.stderr

    # Records produced with acks=all through the bootstrap list reach each partition's leader
    # and come back, in order, to a consumer group.
    recs = make_records(300, 3)
    delivery = produce_all(producer(c.bootstrap, acks="all"), topic, recs)
    assert not delivery.failed and len(delivery.ok) == 300
    cons = consumer(c.bootstrap, group_id=unique("cluster-g"), enable_partition_eof=False)
    cons.subscribe([topic])
    got = {0: [], 1: [], 2: []}
    deadline = time.time() + 60
    while sum(map(len, got.values())) < 300 and time.time() < deadline:
        m = cons.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.key(), m.value()))
    cons.commit(asynchronous=False)
    committed = cons.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    cons.close()
    for p in range(3):
        want = [(i, r["key"], r["value"]) for i, r in enumerate(x for x in recs if x["partition"] == p)]
        assert got[p] == want, "partition %d" % p
    assert [t.offset for t in committed] == [100, 100, 100]

    # The quorum, through a broker and through the controllers.
    out = tool("MetadataQuorumCommand", "--bootstrap-server", "127.0.0.1:%d" % c.ports[1], "describe", "--status").stdout
    assert "CurrentVoters:" in out and re.search(r"LeaderId:\s+[123]\b", out), out
    out = tool("MetadataQuorumCommand", "--bootstrap-controller", c.bootstrap_controllers, "describe", "--replication").stdout
    assert sorted(int(line.split()[0]) for line in out.strip().splitlines()[1:]) == [1, 2, 3], out

    # Partitions and configs change through the controller too, seen from every broker.
    tool("TopicCommand", "--bootstrap-server", "127.0.0.1:%d" % c.ports[3], "--alter", "--topic", topic, "--partitions", "5")
    rows = wait_until("the new partitions everywhere",
                      lambda: (lambda r: r if sorted(r) == [0, 1, 2, 3, 4] else None)(describe("127.0.0.1:%d" % c.ports[1], topic)))
    assert all(sorted(r[1]) == [1, 2, 3] for r in rows.values()), rows
    tool("ConfigCommand", "--bootstrap-server", "127.0.0.1:%d" % c.ports[2], "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--add-config", "retention.ms=3600000,cleanup.policy=compact")
    for port in c.ports.values():
        out = tool("ConfigCommand", "--bootstrap-server", "127.0.0.1:%d" % port, "--describe", "--entity-type", "topics",
                   "--entity-name", topic).stdout
        assert "retention.ms=3600000" in out and "cleanup.policy=compact" in out, out
    tool("ConfigCommand", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--delete-config", "cleanup.policy")
    out = tool("ConfigCommand", "--bootstrap-server", c.bootstrap, "--describe", "--entity-type", "topics", "--entity-name", topic).stdout
    assert "retention.ms=3600000" in out and "cleanup.policy" not in out, out
    bad = tool("ConfigCommand", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", topic, "--add-config", "retention.ms=soon", check=False)
    assert bad.returncode != 0 and "InvalidConfigurationException" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    # A cluster-wide dynamic broker default, set through one broker, reaches every broker.
    tool("ConfigCommand", "--bootstrap-server", "127.0.0.1:%d" % c.ports[1], "--alter", "--entity-type", "brokers",
         "--entity-default", "--add-config", "log.retention.ms=7200000")
    for node, port in c.ports.items():
        wait_until("the broker default on broker %d" % node, lambda: "log.retention.ms=7200000" in tool(
            "ConfigCommand", "--bootstrap-server", "127.0.0.1:%d" % port, "--describe", "--entity-type", "brokers",
            "--entity-name", str(node), "--all").stdout)

    # Deleting goes through the controller too, and leaves every broker's metadata.
    a = admin(c.bootstrap)  # kept: the futures fail once the handle is destroyed
    a.delete_topics([topic], operation_timeout=30)[topic].result(30)
    for port in c.ports.values():
        wait_until("the deletion to reach every broker",
                   lambda: topic not in admin("127.0.0.1:%d" % port).list_topics(timeout=10).topics)


def test_a_fenced_broker_leaves_the_metadata_and_returns_after_a_restart(sluice_cluster):
    c = sluice_cluster(3, overrides={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})
    topic = unique("fence")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    led_by_3 = wait_until("the topic to be described",
                          lambda: [p for p, r in describe(c.bootstrap, topic).items() if r[0] == 3])
    c.kill9(3)
    survivors = "127.0.0.1:%d,127.0.0.1:%d" % (c.ports[1], c.ports[2])
    wait_until("broker 3 to leave the metadata", lambda: brokers_seen(survivors)[0] == [1, 2])
    rows = wait_until("the partitions broker 3 led to get another leader",
                      lambda: (lambda r: r if all(r[p][0] in (1, 2) for p in led_by_3) else None)(describe(survivors, topic)))
    for p, (leader, replicas, isr) in rows.items():
        assert 3 not in isr and leader in isr, rows
    c.start(3)
    wait_until("broker 3 to come back", lambda: brokers_seen(c.bootstrap)[0] == [1, 2, 3])
    assert "registered with the active controller" in c.log(3)


def test_sigterm_moves_every_leadership_away_before_the_broker_exits(sluice_cluster):
    c = sluice_cluster(3)
    topic = unique("ctrl-shutdown")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)])[topic].result(30)
    assert wait_until("leaders on broker 2", lambda: [p for p, r in describe(c.bootstrap, topic).items() if r[0] == 2])
    assert c.sigterm(2) == 0
    assert "the controller moved every leadership away" in c.log(2)
    rows = describe("127.0.0.1:%d" % c.ports[1], topic)
    assert all(leader in (1, 3) and 2 not in isr for leader, _, isr in rows.values()), rows
    # The other brokers keep serving: a producer to every partition succeeds.
    p = producer("127.0.0.1:%d" % c.ports[1], acks="all")
    delivery = produce_all(p, topic, make_records(60, 6))
    assert not delivery.failed and len(delivery.ok) == 60

    # The whole cluster stops (the last broker standing keeps leading until it exits, leaving
    # its partitions leaderless with it in their ISR) and starts again: each broker, unfenced,
    # leads again what it was the last in-sync replica of.
    for node in (1, 3):
        assert c.sigterm(node) == 0
    c.start()
    rows = wait_until("every partition to have a leader again",
                      lambda: (lambda r: r if len(r) == 6 and all(v[0] > 0 for v in r.values()) else None)(describe(c.bootstrap, topic)))
    delivery = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(60, 6))
    assert not delivery.failed and len(delivery.ok) == 60, rows


BROKER_ONLY = """process.roles=broker
node.id={node}
{quorum}
listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
offsets.topic.replication.factor=2
metrics.listener=127.0.0.1:{health}
"""


def test_broker_only_nodes_serve_a_cluster_kept_by_dedicated_controllers(sluice_controllers, tmp_path):
    """Kafka's split roles: three `process.roles=controller` nodes keep the quorum, two
    `process.roles=broker` nodes (Kafka's broker.properties settings) serve the clients: one
    lists the voters (controller.quorum.voters), the other learns them from the controllers
    (controller.quorum.bootstrap.servers, as Kafka 4's stock broker.properties has it)."""
    q = sluice_controllers(3)
    ports = {4: free_port(), 5: free_port()}
    procs = {}
    try:
        for node, port in ports.items():
            props = tmp_path / ("broker%d.properties" % node)
            quorum = ("controller.quorum.voters=" + q.voters if node == 4
                      else "controller.quorum.bootstrap.servers=" + q.bootstrap_controllers)
            props.write_text(BROKER_ONLY.format(node=node, quorum=quorum, port=port, data=tmp_path / ("broker%d" % node),
                                                health=free_port()))
            subprocess.run([str(sluice_bin()), "format", "-t", q.cluster_id, "-c", str(props)], check=True,
                           capture_output=True, timeout=30)
            log = open(tmp_path / ("broker%d.log" % node), "ab")
            procs[node] = subprocess.Popen([str(sluice_bin()), "serve", "-c", str(props)], stdout=log, stderr=log,
                                           env=dict(os.environ, SLUICE_LOG="info"))
        for node in ports:
            wait_until("broker %d to be unfenced" % node,
                       lambda: "this broker is unfenced" in (tmp_path / ("broker%d.log" % node)).read_text(errors="replace"))
        bootstrap = ",".join("127.0.0.1:%d" % p for p in ports.values())
        wait_until("both brokers to be listed", lambda: brokers_seen(bootstrap)[0] == [4, 5])

        topic = unique("split-roles")
        tool("TopicCommand", "--bootstrap-server", "127.0.0.1:%d" % ports[4], "--create", "--topic", topic,
             "--partitions", "2", "--replication-factor", "2")
        rows = wait_until("the topic on broker 5",
                          lambda: (lambda r: r if sorted(r) == [0, 1] else None)(describe("127.0.0.1:%d" % ports[5], topic)))
        assert all(sorted(replicas) == [4, 5] and leader in (4, 5) for leader, replicas, _ in rows.values()), rows

        recs = make_records(100, 2)
        delivery = produce_all(producer(bootstrap, acks="all"), topic, recs)
        assert not delivery.failed and len(delivery.ok) == 100
        cons = consumer(bootstrap, group_id=unique("split-g"), enable_partition_eof=False)
        cons.subscribe([topic])
        got = {0: [], 1: []}
        deadline = time.time() + 60
        while sum(map(len, got.values())) < 100 and time.time() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                got[m.partition()].append((m.key(), m.value()))
        cons.close()
        for p in (0, 1):
            assert got[p] == [(r["key"], r["value"]) for r in recs if r["partition"] == p], "partition %d" % p

        # The quorum through a broker-only node: DescribeQuorum is forwarded to the controllers.
        out = tool("MetadataQuorumCommand", "--bootstrap-server", "127.0.0.1:%d" % ports[5], "describe", "--status").stdout
        assert re.search(r"LeaderId:\s+[123]\b", out), out
    finally:
        for p in procs.values():
            p.kill()
            p.wait(10)


def full_isr(bootstrap, topic, partitions):
    """The topic's rows once every partition has a leader and all its replicas in the ISR."""
    rows = describe(bootstrap, topic)
    ok = len(rows) == partitions and all(leader > 0 and sorted(isr) == sorted(replicas) for leader, replicas, isr in rows.values())
    return rows if ok else None


def test_a_rolling_restart_under_acks_all_load_loses_no_acknowledged_record(sluice_cluster):
    """Each broker in turn is stopped with SIGTERM and started again while an idempotent
    librdkafka producer writes with acks=all to a topic with three replicas and
    min.insync.replicas=2, and a group consumer reads it. Followers copy their leaders, so each
    restarted broker catches up and rejoins every ISR before the next one goes; the producer sees
    no failed delivery and the consumer no fatal error; afterwards every acknowledged record is at
    the offset it was acknowledged at, each partition holds each value once and in order, the
    consumer has read every acknowledged record, and the automatic rebalance gives every
    partition back to its preferred leader."""
    c = sluice_cluster(3, overrides={"leader.imbalance.check.interval.seconds": "2"})
    topic = unique("rolling")
    partitions = 6
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3,
                              config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until("every partition to have its full ISR", lambda: full_isr(c.bootstrap, topic, partitions))

    acked, failed, produced = {}, [], []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    def produce():
        p = producer(c.bootstrap, acks="all", enable_idempotence=True, linger_ms=2)
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=b"%08d" % i, partition=i % partitions, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.002)
        assert p.flush(60) == 0
        produced.append(i)

    read, read_errors = set(), []

    def consume():
        cons = consumer(c.bootstrap, group_id=unique("rolling"), enable_partition_eof=False,
                        enable_auto_commit=True, auto_commit_interval_ms=500)
        cons.subscribe([topic])
        # Until the producer has stopped and everything it had acknowledged is read.
        deadline = None
        while True:
            if stop.is_set():
                if produced and set(acked.values()) <= read:
                    break
                deadline = deadline or time.time() + 90
                if time.time() > deadline:
                    break
            for m in cons.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    read_errors.append(m.error())
                else:
                    read.add(m.value())
        cons.close()

    writer = threading.Thread(target=produce)
    reader = threading.Thread(target=consume)
    writer.start()
    reader.start()
    try:
        for node in (1, 2, 3):
            time.sleep(2)
            assert c.sigterm(node) == 0
            c.start(node)
            wait_until("broker %d to rejoin every ISR" % node, lambda: full_isr(c.bootstrap, topic, partitions), timeout=60)
        time.sleep(2)
    finally:
        stop.set()
        writer.join(120)
        reader.join(120)
    assert produced and not failed, (produced, failed[:5])
    assert len(acked) == produced[0] > 1000, (len(acked), produced)
    assert not [e for e in read_errors if e.fatal() or not e.retriable() and e.code() >= 0], read_errors[:5]
    unread = set(acked.values()) - read
    assert not unread, "the consumer never read %d acknowledged records, e.g. %s" % (len(unread), sorted(unread)[:3])

    got = consume_partitions(c.bootstrap, topic, partitions, expect=len(acked))
    assert not anomalies(acked, got)
    assert sum(len(r) for r in got.values()) == len(acked)

    # Leadership piled up on the brokers restarted last; the rebalance gives it back.
    wait_until("every partition to be led by its preferred replica",
               lambda: all(leader == replicas[0] for leader, replicas, _ in describe(c.bootstrap, topic).values()))

    # The check above is not vacuous: with the first five records of partition 0 deleted, it
    # finds them lost.
    spec = c.workdir / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 5}]}))
    tool("DeleteRecordsCommand", "--bootstrap-server", c.bootstrap, "--offset-json-file", str(spec))
    found = anomalies(acked, consume_partitions(c.bootstrap, topic, partitions, expect=len(acked) - 5))
    assert found == ["partition 0: 5 acknowledged records missing or changed, first %s" % sorted(
        (o, v) for (q, o), v in acked.items() if q == 0 and o < 5)[:3]], found
    # The followers moved their log start with the leader's: the records stay deleted when
    # another replica leads.
    leader = describe(c.bootstrap, topic)[0][0]
    assert c.sigterm(leader) == 0
    others = ",".join("127.0.0.1:%d" % port for node, port in c.ports.items() if node != leader)
    wait_until("partition 0 to have another leader", lambda: describe(others, topic)[0][0] not in (-1, leader))
    assert watermarks(others, topic, 1)[0][0] == 5


def anomalies(acked, got):
    """What a read of every partition (`got`, as consume_partitions returns it) shows wrong
    against what the producer had acknowledged (`acked`: (partition, offset) -> value): lost or
    changed records, and duplicated or reordered values (the producer wrote increasing values)."""
    found = []
    for p, records in sorted(got.items()):
        values = [int(r["value"]) for r in records]
        if values != sorted(set(values)):
            found.append("partition %d: duplicated or reordered values" % p)
        at = {r["offset"]: r["value"] for r in records}
        lost = sorted((o, v) for (q, o), v in acked.items() if q == p and at.get(o) != v)
        if lost:
            found.append("partition %d: %d acknowledged records missing or changed, first %s" % (p, len(lost), lost[:3]))
    return found


def test_kafka_leader_election_gives_partitions_back_to_their_preferred_replicas(sluice_cluster):
    """With automatic rebalancing off, a broker restarted after SIGTERM rejoins every ISR but
    leads nothing; kafka-leader-election --election-type PREFERRED hands its partitions back,
    and says there was nothing to do when asked again."""
    c = sluice_cluster(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = unique("elect")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)])[topic].result(30)
    wait_until("every partition to have its full ISR", lambda: full_isr(c.bootstrap, topic, 6))
    prefers_2 = [p for p, (_, replicas, _) in describe(c.bootstrap, topic).items() if replicas[0] == 2]
    assert prefers_2
    assert c.sigterm(2) == 0
    c.start(2)
    rows = wait_until("broker 2 to rejoin every ISR", lambda: full_isr(c.bootstrap, topic, 6), timeout=60)
    assert all(rows[p][0] != 2 for p in prefers_2), rows

    out = tool("LeaderElectionCommand", "--bootstrap-server", c.bootstrap, "--election-type", "PREFERRED",
               "--all-topic-partitions").stdout
    assert "Successfully completed leader election (PREFERRED)" in out, out
    for p in prefers_2:
        assert "%s-%d" % (topic, p) in out, out
    rows = wait_until("the preferred replicas to lead",
                      lambda: (lambda r: r if all(l == reps[0] for l, reps, _ in r.values()) else None)(describe(c.bootstrap, topic)))
    out = tool("LeaderElectionCommand", "--bootstrap-server", c.bootstrap, "--election-type", "PREFERRED",
               "--topic", topic, "--partition", "0", check=False)
    assert "Valid replica already elected for partitions" in out.stdout + out.stderr, out


def test_a_group_keeps_its_committed_offsets_when_its_coordinator_is_killed(sluice_cluster):
    """The coordinator of a group (the leader of its __consumer_offsets partition) is killed with
    SIGKILL after the group committed; the partition's new leader replays the group from its copy
    of the log, so the group's next consumer resumes at the committed offsets and reads each
    remaining record once."""
    c = sluice_cluster(3, overrides={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})
    topic, group = unique("resume"), unique("g")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    wait_until("every partition to have its full ISR", lambda: full_isr(c.bootstrap, topic, 3))
    delivery = produce_all(producer(c.bootstrap, acks="all"), topic, make_records(300, 3))
    assert not delivery.failed and len(delivery.ok) == 300

    first = consumer(c.bootstrap, group_id=group, enable_partition_eof=False)
    first.subscribe([topic])
    seen = []
    deadline = time.time() + 60
    while len(seen) < 150:
        assert time.time() < deadline, "consumed only %d records" % len(seen)
        for m in first.consume(num_messages=150 - len(seen), timeout=1):
            assert m.error() is None, m.error()
            seen.append((m.partition(), m.offset()))
    first.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in first.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)}
    first.close()
    assert sum(max(o, 0) for o in committed.values()) == 150, committed

    coordinator = a.describe_consumer_groups([group])[group].result(30).coordinator.id
    c.kill9(coordinator)
    survivors = ",".join("127.0.0.1:%d" % port for node, port in c.ports.items() if node != coordinator)
    wait_until("the group's offsets partition to get a new leader",
               lambda: all(leader not in (-1, coordinator) for leader, _, _ in describe(survivors, "__consumer_offsets").values()))

    second = consumer(survivors, group_id=group, enable_partition_eof=False)
    second.subscribe([topic])
    rest = []
    deadline = time.time() + 60
    while len(rest) < 150:
        assert time.time() < deadline, "the group's next consumer read only %d records: %s" % (len(rest), rest[:5])
        for m in second.consume(num_messages=150, timeout=1):
            assert m.error() is None, m.error()
            rest.append((m.partition(), m.offset()))
    extra = second.consume(num_messages=10, timeout=3)
    second.close()
    assert not extra, "read past the end"
    assert sorted(rest) == sorted((p, o) for p in range(3) for o in range(max(committed[p], 0), 100)), (committed, sorted(rest)[:5])


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_paused_active_controller_is_fenced_and_no_live_broker_with_it(kind, request):
    """The active controller's process is paused (SIGSTOP) for longer than a broker session
    (Kafka's defaults: 9 s sessions, 2 s heartbeats). The other two voters elect a new active
    controller, the brokers beside them send their heartbeats there, and only the paused node's
    broker is fenced: the survivors stay in the metadata all along, lead every partition, and
    take acks=all writes. Resumed, the paused node rejoins. (A heartbeat stuck on the paused
    controller would outlast the session the new controller counts, and fence the survivors.)"""
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(3)
    topic = unique("paused-controller")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)])[topic].result(30)
    wait_until("every partition to have its full ISR", lambda: full_isr(c.bootstrap, topic, 6), timeout=60)
    status = tool("MetadataQuorumCommand", "--bootstrap-server", c.bootstrap, "describe", "--status").stdout
    paused = int(re.search(r"LeaderId:\s+(\d+)", status).group(1))
    survivors = [n for n in (1, 2, 3) if n != paused]
    live = ",".join("127.0.0.1:%d" % c.ports[n] for n in survivors)

    seen = []
    os.kill(c.pid(paused), signal.SIGSTOP)
    try:
        deadline = time.time() + 25
        while time.time() < deadline:
            try:
                seen.append(sorted(admin(live).list_topics(timeout=5).brokers))
            except KafkaException:
                pass
            time.sleep(0.5)
        # Every answer listed both survivors; by the end the paused broker was fenced.
        assert seen and all(set(survivors) <= set(s) for s in seen), "brokers listed, every 0.5 s: %s" % seen
        assert seen[-1] == survivors, "brokers listed, every 0.5 s: %s" % seen
        rows = wait_until("the survivors to lead every partition",
                          lambda: (lambda r: r if len(r) == 6 and all(v[0] in survivors for v in r.values()) else None)(
                              describe(live, topic)))
        d = produce_all(producer(live, acks="all"), topic, make_records(60, 6))
        assert not d.failed and len(d.ok) == 60, (rows, d.failed)
    finally:
        os.kill(c.pid(paused), signal.SIGCONT)
    wait_until("the paused broker to come back", lambda: brokers_seen(c.bootstrap)[0] == [1, 2, 3], timeout=60)
    if kind == "sluice":
        for n in survivors:
            assert "broker session expired; fencing it broker=%d" % n not in "".join(c.log(m) for m in (1, 2, 3))


@pytest.mark.parametrize("kind", ["sluice", "kafka"])
def test_a_paused_voter_that_resumes_does_not_move_the_active_controller(kind, request):
    """A voter that is not the active controller is paused (SIGSTOP) for 8 s, four times the
    longest election timeout, and resumed. Its election timer has long expired, but it first
    asks for pre-votes (Kafka since KIP-996), which the other two refuse while they hear their
    leader: the active controller and its epoch stay as they were, and the metadata log goes on
    (a topic created afterwards is on every broker). Without pre-vote the resumed voter raises
    the epoch and the leader steps down."""
    make = request.getfixturevalue("sluice_cluster" if kind == "sluice" else "kafka_cluster")
    c = make(3)

    def quorum(bootstrap=c.bootstrap):
        status = tool("MetadataQuorumCommand", "--bootstrap-server", bootstrap, "describe", "--status").stdout
        return int(re.search(r"LeaderId:\s+(\d+)", status).group(1)), int(re.search(r"LeaderEpoch:\s+(\d+)", status).group(1))

    leader, epoch = quorum()
    paused = [n for n in (1, 2, 3) if n != leader][0]
    # While it is paused, the tool is pointed at the other two (a request to the paused broker
    # would wait out the tool's timeout).
    live = ",".join("127.0.0.1:%d" % c.ports[n] for n in (1, 2, 3) if n != paused)
    os.kill(c.pid(paused), signal.SIGSTOP)
    try:
        time.sleep(8)
        assert quorum(live) == (leader, epoch)
    finally:
        os.kill(c.pid(paused), signal.SIGCONT)
    time.sleep(5)
    assert quorum() == (leader, epoch)
    topic = unique("after-resume")
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    for n in (1, 2, 3):
        wait_until("broker %d to know %s" % (n, topic),
                   lambda: topic in admin("127.0.0.1:%d" % c.ports[n]).list_topics(timeout=5).topics)
    assert quorum() == (leader, epoch)

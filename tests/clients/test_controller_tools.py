"""Kafka's controller-facing tools against sluice's dedicated controllers, side by side with a
real three-node Kafka 4.4 cluster: `kafka-metadata-quorum --bootstrap-controller describe
--status / --replication` and `kafka-features --bootstrap-controller describe` (Kafka's own
classes from the jars compat/kafka/fetch.sh downloads). Both print the same fields; the values
that must agree (cluster id, voters and their endpoints, one leader, the finalized
metadata.version) are compared, and a sluice quorum that loses its leader to kill -9 is seen
electing another.
"""
import re
import time

from kafkautil import kafka_tool


def tool(cls, *args):
    return kafka_tool(cls, *args).stdout


def quorum_status(bootstrap):
    out = tool("MetadataQuorumCommand", "--bootstrap-controller", bootstrap, "describe", "--status")
    return {k: v.strip() for k, v in re.findall(r"^(\w+):\s+(.*)$", out, re.M)}


def quorum_replication(bootstrap):
    out = tool("MetadataQuorumCommand", "--bootstrap-controller", bootstrap, "describe", "--replication")
    lines = [[c.strip() for c in line.split("\t") if c.strip()] for line in out.strip().splitlines()]
    return lines[0], lines[1:]


def features(bootstrap):
    out = tool("FeatureCommand", "--bootstrap-controller", bootstrap, "describe")
    table = {}
    for line in out.strip().splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        table[fields["Feature"]] = fields
    return table


def voters_with_endpoints(cluster):
    return [{"id": i, "endpoints": ["CONTROLLER://127.0.0.1:%d" % p]} for i, p in sorted(cluster.controller_ports.items())]


def check_status(status, cluster):
    import json
    assert status["ClusterId"] == cluster.cluster_id
    voters = json.loads(status["CurrentVoters"])
    assert [{"id": v["id"], "endpoints": v["endpoints"]} for v in voters] == voters_with_endpoints(cluster), voters
    assert int(status["LeaderId"]) in cluster.controller_ports
    assert int(status["LeaderEpoch"]) >= 1
    assert int(status["HighWatermark"]) > 0
    assert int(status["MaxFollowerLag"]) >= 0
    assert json.loads(status["CurrentObservers"]) == []


def check_replication(header, rows, cluster, leader):
    assert header == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    assert sorted(int(r[0]) for r in rows) == sorted(cluster.controller_ports)
    assert [int(r[0]) for r in rows if r[6] == "Leader"] == [leader]
    assert all(r[6] in ("Leader", "Follower") for r in rows), rows
    now_ms = time.time() * 1000
    for r in rows:
        assert int(r[2]) > 0 and int(r[3]) >= 0, r
        assert abs(now_ms - int(r[4])) < 60_000, "last fetch %s is not recent" % r


def test_kafka_tools_describe_a_sluice_quorum_as_they_describe_kafkas(sluice_controllers, kafka_cluster):
    sluice = sluice_controllers(3)
    kafka = kafka_cluster(3)
    s_status, k_status = quorum_status(sluice.bootstrap_controllers), quorum_status(kafka.bootstrap_controllers)
    assert set(s_status) == set(k_status), (s_status, k_status)
    check_status(k_status, kafka)
    check_status(s_status, sluice)
    assert int(s_status["LeaderId"]) == sluice.leader()

    k_header, k_rows = quorum_replication(kafka.bootstrap_controllers)
    check_replication(k_header, k_rows, kafka, int(k_status["LeaderId"]))
    s_header, s_rows = quorum_replication(sluice.bootstrap_controllers)
    check_replication(s_header, s_rows, sluice, int(s_status["LeaderId"]))

    s_features, k_features = features(sluice.bootstrap_controllers), features(kafka.bootstrap_controllers)
    for name in ("metadata.version", "kraft.version"):
        assert s_features[name]["FinalizedVersionLevel"] == k_features[name]["FinalizedVersionLevel"], (name, s_features, k_features)
    assert s_features["metadata.version"]["SupportedMaxVersion"] == k_features["metadata.version"]["SupportedMaxVersion"]
    # A static quorum only: sluice does not offer kraft.version 1 (KIP-853's dynamic voters).
    assert s_features["kraft.version"]["SupportedMaxVersion"] == "0"


def test_kafka_metadata_quorum_sees_a_new_leader_after_kill_9_of_sluices(sluice_controllers):
    sluice = sluice_controllers(3)
    before = quorum_status(sluice.bootstrap_controllers)
    old = int(before["LeaderId"])
    sluice.kill9(old)
    survivors = ",".join("127.0.0.1:%d" % p for i, p in sluice.controller_ports.items() if i != old)
    deadline = time.time() + 30
    while True:
        try:
            after = quorum_status(survivors)
            if after.get("LeaderId") not in (None, str(old)):
                break
        except AssertionError:
            pass
        assert time.time() < deadline, "no new leader after kill -9 of %d" % old
        time.sleep(1)
    assert int(after["LeaderId"]) in sluice.controller_ports and int(after["LeaderId"]) != old
    assert int(after["LeaderEpoch"]) > int(before["LeaderEpoch"])
    header, rows = quorum_replication(survivors)
    dead = [r for r in rows if int(r[0]) == old]
    assert dead and dead[0][6] == "Follower", rows

#!/usr/bin/env python3
"""Hand-written edge-case requests for replay.py, as raw wire bytes.

Each step is a dict: conn (steps sharing a conn share a TCP connection), api_key, api_version,
correlation_id, wire (bytes sent, including the 4-byte length prefix), wait (expect an answer),
label, and expect(kind, decoded) -> True or a message: what Apache Kafka 4.x is known to do
(kind is 'response' / 'closed' / 'timeout'). The expectation is checked against Kafka only, so a
stale edge case is noticed; sluice is compared with Kafka field by field like every other step.

Requests are encoded with kafka-python's message classes where they can express the request,
then corrupted by hand where the case needs it.

    python3 protocol-tests/edge_cases.py    # print the steps as hex
"""
import re
import struct

from kafka.protocol.admin import (CreateAclsRequest, CreateTopicsRequest, DeleteAclsRequest, DeleteRecordsRequest,
                                  DescribeAclsRequest, DescribeProducersRequest, ElectLeadersRequest)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

TOPIC = "edge-t"
CLIENT_ID = "sluice-edge"


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def build(top, container, fields, d):
    """Turn nested dicts into kafka-python message objects, following the JSON schema."""
    by_name = {snake(f["name"]): f for f in fields}
    kw = {}
    for k, v in d.items():
        f = by_name[k]
        if "fields" in f:
            tname = f["type"].lstrip("[]")
            sub = getattr(container, tname, None) or getattr(top, tname)
            if f["type"].startswith("[]"):
                v = [build(top, sub, f["fields"], x) for x in v]
            else:
                v = build(top, sub, f["fields"], v)
        kw[k] = v
    return container(**kw)


def encode(cls, version, correlation_id, body):
    msg = build(cls, cls, cls._json["fields"], body)
    msg.API_VERSION = version
    msg.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
    return msg.encode(header=True, framed=True)


def header_v1(api_key, version, cid):
    c = CLIENT_ID.encode()
    return struct.pack(">hhih", api_key, version, cid, len(c)) + c


def header_v2(api_key, version, cid):
    return header_v1(api_key, version, cid) + b"\x00"


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


def batch(n=3, ts=1700000000000, producer_id=-1, producer_epoch=-1, base_sequence=-1, keys=None, compression=0):
    """n records keyed k0..k(n-1), or one record per entry of keys (None: no key)."""
    keys = keys if keys is not None else [b"k%d" % i for i in range(n)]
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 20)
    for i, key in enumerate(keys):
        b.append(i, timestamp=ts + i, key=key, value=b"v%d" % i, headers=[])
    return bytes(b.build())


def produce(cid, records, topic=TOPIC, version=9, acks=-1):
    return encode(ProduceRequest, version, cid, {
        "transactional_id": None, "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})


def create_topic(cid, name, rf=1, configs=(), partitions=1):
    return encode(CreateTopicsRequest, 7, cid, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs]}],
        "timeout_ms": 10000, "validate_only": False})


# ---------------------------------------------------------------- expectations on Kafka
def closed(kind, d):
    return True if kind == "closed" else "expected the connection to be closed, got %s" % kind


def err(path, code):
    def check(kind, d):
        if kind != "response":
            return "expected a response, got %s" % kind
        v = d
        for p in path:
            v = v[p]
        return True if v == code else "expected error %d at %s, got %s" % (code, path, v)
    return check


def record_errs(code, indexes):
    """A Produce partition error with KIP-467 record errors at these batch indexes."""
    def check(kind, d):
        first = err(("responses", 0, "partition_responses", 0, "error_code"), code)(kind, d)
        if first is not True:
            return first
        got = [e["batch_index"] for e in d["responses"][0]["partition_responses"][0]["record_errors"]]
        return True if got == indexes else "expected record errors at %s, got %s" % (indexes, got)
    return check


def topic_err(code, key="topics"):
    return err((key, 0, "error_code"), code)


def part_err(code, tkey, pkey):
    return err((tkey, 0, pkey, 0, "error_code"), code)


def steps():
    corrupt = bytearray(batch())
    corrupt[17] ^= 0xFF  # a byte inside the CRC-32C field (offset 17..20 of the batch header)
    s = []

    def add(conn, api_key, version, cid, wire, label, expect=None, wait=True, timeout=10.0):
        s.append({"conn": conn, "api_key": api_key, "api_version": version, "correlation_id": cid,
                  "wire": wire, "wait": wait, "label": label, "expect": expect, "golden": None,
                  "timeout": timeout})

    # setup (compared as well): the topic the other cases use, with 3 records at offsets 0..2
    add("setup", 19, 7, 1, create_topic(1, TOPIC), "create " + TOPIC, topic_err(0))
    add("setup", 0, 9, 2, produce(2, batch()), "produce 3 records", part_err(0, "responses", "partition_responses"))

    add("av99", 18, 99, 7, frame(header_v2(18, 99, 7) + b"\x0csluice-edge\x041.0\x00"),
        "ApiVersions v99", err(("error_code",), 35))
    add("av99", 18, 3, 8, frame(header_v2(18, 3, 8) + b"\x0csluice-edge\x041.0\x00"),
        "ApiVersions v3 after v99", err(("error_code",), 0))
    add("unknown-key", 9999, 0, 9, frame(header_v2(9999, 0, 9) + b"\x00" * 8), "unknown api key 9999", closed)
    add("meta99", 3, 99, 10, frame(header_v2(3, 99, 10) + b"\x00\x00"), "Metadata v99", closed)
    add("produce-v2", 0, 2, 11, frame(header_v1(0, 2, 11) + struct.pack(">hii", 1, 1000, 0)),
        "Produce v2 (below 4.x minimum)", closed)
    add("meta-unknown", 3, 12, 12, encode(MetadataRequest, 12, 12, {
        "topics": [{"topic_id": "00000000-0000-0000-0000-000000000000", "name": "edge-no-such-topic"}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
        "Metadata unknown topic, no auto-create", topic_err(3))
    add("ct-bad", 19, 7, 13, create_topic(13, "bad/name"), "CreateTopics bad name", topic_err(17))
    add("ct-bad", 19, 7, 14, create_topic(14, "edge-rf3", rf=3), "CreateTopics rf=3", topic_err(38))
    add("ct-bad", 19, 7, 15, create_topic(15, "edge-cfg", configs=[("segment.bytes", "16384")]),
        "CreateTopics segment.bytes=16384", topic_err(40))
    add("ct-bad", 19, 7, 16, create_topic(16, "edge-cfg2", configs=[("cleanup.policy", "bogus")]),
        "CreateTopics cleanup.policy=bogus", topic_err(40))
    add("ct-bad", 19, 7, 17, create_topic(17, "edge-p0", partitions=0), "CreateTopics partitions=0", topic_err(37))
    add("ct-bad", 19, 7, 18, create_topic(18, TOPIC), "CreateTopics existing topic", topic_err(36))
    add("produce-bad", 0, 9, 19, produce(19, bytes(corrupt)), "Produce corrupt CRC",
        part_err(2, "responses", "partition_responses"))
    add("produce-bad", 0, 9, 20, produce(20, b""), "Produce empty record set")
    add("produce-bad", 0, 9, 21, produce(21, batch(), topic="edge-no-such-topic"),
        "Produce unknown topic", part_err(3, "responses", "partition_responses"))
    add("lo", 2, 7, 22, encode(ListOffsetsRequest, 7, 22, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 5, "current_leader_epoch": -1, "timestamp": -1}]}]}),
        "ListOffsets unknown partition 5", part_err(3, "topics", "partitions"))
    add("lo", 2, 7, 23, encode(ListOffsetsRequest, 7, 23, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
                                                  ]}]}),
        "ListOffsets latest", part_err(0, "topics", "partitions"))
    def fetch_v12(cid, offset):
        return encode(FetchRequest, 12, cid, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})

    add("fetch", 1, 12, 24, fetch_v12(24, 100), "Fetch offset 100 (out of range)", part_err(1, "responses", "partitions"))
    add("fetch", 1, 12, 25, fetch_v12(25, 1), "Fetch offset 1", part_err(0, "responses", "partitions"))
    add("dr", 21, 2, 26, encode(DeleteRecordsRequest, 2, 26, {
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 100}]}], "timeout_ms": 5000}),
        "DeleteRecords offset 100 > HW", part_err(1, "topics", "partitions"))
    add("dr", 21, 2, 27, encode(DeleteRecordsRequest, 2, 27, {
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000}),
        "DeleteRecords offset 1", part_err(0, "topics", "partitions"))
    # InitProducerId v4 (flexible) with an empty, non-null transactional id: Kafka refuses it as a
    # malformed request before looking for a coordinator
    add("pid-empty", 22, 4, 28, frame(header_v2(22, 4, 28) + b"\x01" + struct.pack(">iqh", 60000, -1, -1) + b"\x00"),
        "InitProducerId empty transactional id", err(("error_code",), 42))
    # No authorizer: every ACL API fails with SECURITY_DISABLED (54), as in a Kafka without one
    acl = {"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}
    add("acls", 29, 3, 32, encode(DescribeAclsRequest, 3, 32, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}),
        "DescribeAcls without an authorizer", err(("error_code",), 54))
    add("acls", 30, 3, 33, encode(CreateAclsRequest, 3, 33, {"creations": [
        dict(acl, resource_type=2, resource_name=TOPIC, resource_pattern_type=3),
        dict(acl, resource_type=3, resource_name="g1", resource_pattern_type=3)]}),
        "CreateAcls without an authorizer", err(("results", 1, "error_code"), 54))
    add("acls", 31, 3, 34, encode(DeleteAclsRequest, 3, 34, {"filters": [
        {"resource_type_filter": 2, "resource_name_filter": TOPIC, "pattern_type_filter": 3, "principal_filter": None,
         "host_filter": None, "operation": 1, "permission_type": 1}]}),
        "DeleteAcls without an authorizer", err(("filter_results", 0, "error_code"), 54))
    # One broker leads every partition as its preferred replica: no election is needed (84)
    add("elect", 43, 2, 35, encode(ElectLeadersRequest, 2, 35, {
        "election_type": 0, "timeout_ms": 5000,
        "topic_partitions": [{"topic": TOPIC, "partitions": [0, 5]}, {"topic": "edge-no-such-topic", "partitions": [0]}]}),
        "ElectLeaders preferred, known and unknown partitions",
        err(("replica_election_results", 0, "partition_result", 0, "error_code"), 84))
    # An idempotent producer's state (producer ids are masked: the 1000 here is not allocated by
    # either broker, and neither checks that for a non-transactional producer starting at 0)
    add("producers", 19, 7, 36, create_topic(36, "edge-pid"), "create edge-pid", topic_err(0))
    add("producers", 0, 9, 37, produce(37, batch(producer_id=1000, producer_epoch=0, base_sequence=0), topic="edge-pid"),
        "idempotent produce of 3 records", part_err(0, "responses", "partition_responses"))
    add("producers", 61, 0, 38, encode(DescribeProducersRequest, 0, 38, {"topics": [
        {"name": "edge-pid", "partition_indexes": [0]}, {"name": TOPIC, "partition_indexes": [0, 5]},
        {"name": "edge-no-such-topic", "partition_indexes": [0]}]}),
        "DescribeProducers", err(("topics", 0, "partitions", 0, "active_producers", 0, "last_sequence"), 2))
    # A compacted topic refuses records without a key: INVALID_RECORD (87) with one record error
    # per keyless record (KIP-467), also inside a compressed batch; a keyed batch is appended
    add("compact", 19, 7, 40, create_topic(40, "edge-compact", configs=[("cleanup.policy", "compact")]),
        "create compacted edge-compact", topic_err(0))
    add("compact", 0, 9, 41, produce(41, batch(keys=[b"k0", None, b"k2", None]), topic="edge-compact"),
        "Produce keyless records to a compacted topic", record_errs(87, [1, 3]))
    add("compact", 0, 9, 42, produce(42, batch(keys=[None, b"k1"], compression=1), topic="edge-compact"),
        "Produce a gzip batch with a keyless record to a compacted topic", record_errs(87, [0]))
    add("compact", 0, 9, 43, produce(43, batch(keys=[b"k0", b"k1"]), topic="edge-compact"),
        "Produce keyed records to a compacted topic", part_err(0, "responses", "partition_responses"))
    # min.insync.replicas above the replication factor: Kafka 4.x caps it at the replication factor
    # (KIP-966's effective min ISR), so acks=all to a one-replica topic asking for 2 is appended
    add("min-isr", 19, 7, 44, create_topic(44, "edge-min-isr", configs=[("min.insync.replicas", "2")]),
        "create edge-min-isr with min.insync.replicas=2", topic_err(0))
    add("min-isr", 0, 9, 45, produce(45, batch(), topic="edge-min-isr"),
        "Produce acks=all, min.insync.replicas above the replication factor",
        part_err(0, "responses", "partition_responses"))
    add("frame-neg", None, None, None, struct.pack(">i", -5) + header_v2(18, 3, 30), "frame length -5", closed)
    add("frame-big", None, None, None, struct.pack(">i", 200 * 1024 * 1024) + header_v2(18, 3, 31),
        "frame length 200 MiB", closed)
    add("frame-zero", None, None, None, struct.pack(">i", 0), "frame length 0", closed)
    return s


if __name__ == "__main__":
    for st in steps():
        print(st["conn"], st["label"], st["wire"].hex())

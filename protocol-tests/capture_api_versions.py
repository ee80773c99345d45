#!/usr/bin/env python3
"""Capture what a Kafka-compatible broker advertises via ApiVersions, over a raw socket.

    python3 protocol-tests/capture_api_versions.py --bootstrap 127.0.0.1:9092 [--out FILE] [--json FILE]

Sends:
  * ApiVersions v3 (request header v2, flexible body) and decodes every
    (api key, min, max) plus the tagged supported_features / finalized_features;
  * ApiVersions at the highest version the broker advertises for ApiVersions
    itself (v4 also lists features whose min version is 0, which v3 omits);
  * ApiVersions v99 and decodes the v0-framed fallback (error code + the
    ApiVersions range the broker supports);
  * an unknown API key (9999) and an unsupported old version of Produce (v0)
    and reports whether the connection was closed.
Only the standard library is used so it runs anywhere python3 does.
"""
import argparse
import json
import socket
import struct
import sys

API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    55: "DescribeQuorum",
    56: "AlterPartition",
    57: "UpdateFeatures",
    58: "Envelope",
    59: "FetchSnapshot",
    60: "DescribeCluster",
    61: "DescribeProducers",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
    64: "UnregisterBroker",
    65: "DescribeTransactions",
    66: "ListTransactions",
    67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    73: "AssignReplicasToDirs",
    74: "ListConfigResources",
    75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
    80: "AddRaftVoter",
    81: "RemoveRaftVoter",
    82: "UpdateRaftVoter",
    83: "InitializeShareGroupState",
    84: "ReadShareGroupState",
    85: "WriteShareGroupState",
    86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
    93: "StreamsGroupTopologyDescriptionUpdate",
    94: "UnregisterController",
}

ERROR_NAMES = {0: "NONE", 35: "UNSUPPORTED_VERSION", 42: "INVALID_REQUEST", -1: "UNKNOWN_SERVER_ERROR"}


# ---------------------------------------------------------------- encoding
def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def compact_str(s):
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def request_header_v2(api_key, api_version, correlation_id, client_id="sluice-capture"):
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid + uvarint(0)


def request_header_v1(api_key, api_version, correlation_id, client_id="sluice-capture"):
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid


def api_versions_body(version):
    if version < 3:
        return b""
    body = compact_str("sluice-capture") + compact_str("1.0")
    if version >= 5:
        body += compact_str(None) + struct.pack(">i", -1)  # ClusterId null, NodeId -1
    return body + uvarint(0)


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


# ---------------------------------------------------------------- decoding
class Reader:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError("short buffer")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self):
        shift = 0
        n = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def compact_str(self):
        n = self.uvarint()
        if n == 0:
            return None
        return self.take(n - 1).decode()

    def tagged(self):
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            out[tag] = self.take(size)
        return out

    def done(self):
        return self.pos == len(self.buf)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def recv_frame(sock):
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def decode_api_versions(payload, version):
    """Decode an ApiVersions response. Response header is always v0 (correlation id only)."""
    r = Reader(payload)
    out = {"correlation_id": r.i32()}
    out["error_code"] = r.i16()
    keys = []
    if version >= 3:
        n = r.uvarint() - 1
        for _ in range(n):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            r.tagged()
            keys.append((k, lo, hi))
        out["throttle_time_ms"] = r.i32()
        tags = r.tagged()
        out["supported_features"] = []
        out["finalized_features"] = []
        out["finalized_features_epoch"] = -1
        out["zk_migration_ready"] = False
        out["unknown_tags"] = sorted(t for t in tags if t not in (0, 1, 2, 3))
        if 0 in tags:
            t = Reader(tags[0])
            for _ in range(t.uvarint() - 1):
                name, lo, hi = t.compact_str(), t.i16(), t.i16()
                t.tagged()
                out["supported_features"].append({"name": name, "min_version": lo, "max_version": hi})
        if 1 in tags:
            out["finalized_features_epoch"] = Reader(tags[1]).i64()
        if 2 in tags:
            t = Reader(tags[2])
            for _ in range(t.uvarint() - 1):
                name, hi, lo = t.compact_str(), t.i16(), t.i16()
                t.tagged()
                out["finalized_features"].append({"name": name, "max_version_level": hi, "min_version_level": lo})
        if 3 in tags:
            out["zk_migration_ready"] = bool(Reader(tags[3]).i8())
    else:
        n = r.i32()
        for _ in range(n):
            keys.append((r.i16(), r.i16(), r.i16()))
        if version >= 1:
            out["throttle_time_ms"] = r.i32()
    out["api_keys"] = keys
    out["trailing_bytes"] = len(payload) - r.pos
    return out


# ---------------------------------------------------------------- probes
def connect(host, port, timeout=10.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def api_versions(host, port, version, header_version=2):
    with connect(host, port) as s:
        hdr = request_header_v2(18, version, 7) if header_version == 2 else request_header_v1(18, version, 7)
        s.sendall(frame(hdr + api_versions_body(version)))
        payload = recv_frame(s)
    return payload


def closed_after(host, port, payload, timeout=5.0):
    """Send payload; return 'closed' if the broker closes the connection, else a description."""
    with connect(host, port, timeout) as s:
        s.sendall(payload)
        try:
            data = s.recv(65536)
        except socket.timeout:
            return "no response within %.0fs (connection left open)" % timeout
        except ConnectionResetError:
            return "closed (reset)"
        if data == b"":
            return "closed"
        return "answered %d bytes: %s" % (len(data), data[:64].hex())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--label", default="broker", help="name written in the header, e.g. 'Apache Kafka 4.4.0'")
    ap.add_argument("--out", help="text file to write (default: stdout)")
    ap.add_argument("--json", help="also write the raw decoded facts as JSON")
    args = ap.parse_args()
    host, port = args.bootstrap.rsplit(":", 1)
    port = int(port)

    v3 = decode_api_versions(api_versions(host, port, 3), 3)
    av_max = max(hi for k, lo, hi in v3["api_keys"] if k == 18)
    vmax = decode_api_versions(api_versions(host, port, av_max), av_max) if av_max >= 3 else None
    raw99 = api_versions(host, port, 99)
    v99 = decode_api_versions(raw99, 0)
    unknown_key = closed_after(host, port, frame(request_header_v2(9999, 0, 9) + b"\x00" * 8))
    old_produce = closed_after(host, port, frame(request_header_v1(0, 0, 11) + struct.pack(">hii", 1, 1000, 0)))

    lines = []
    w = lines.append
    w("# ApiVersions as advertised by %s at %s" % (args.label, args.bootstrap))
    w("# captured by protocol-tests/capture_api_versions.py (raw socket, ApiVersions v3 request, header v2)")
    w("# columns: api_name api_key min_version max_version")
    w("error_code %d" % v3["error_code"])
    w("throttle_time_ms %d" % v3["throttle_time_ms"])
    w("api_count %d" % len(v3["api_keys"]))
    w("")
    w("[api_keys]")
    for k, lo, hi in sorted(v3["api_keys"]):
        w("%s %d %d %d" % (API_NAMES.get(k, "Unknown%d" % k), k, lo, hi))
    for label, resp in (("v3", v3), ("v%d" % av_max, vmax)):
        if resp is None:
            continue
        w("")
        w("[supported_features %s]  # name min max" % label)
        for f in resp["supported_features"]:
            w("%s %d %d" % (f["name"], f["min_version"], f["max_version"]))
        w("[finalized_features %s]  # name min_level max_level; epoch %d" % (label, resp["finalized_features_epoch"]))
        for f in resp["finalized_features"]:
            w("%s %d %d" % (f["name"], f["min_version_level"], f["max_version_level"]))
        w("zk_migration_ready %s" % str(resp["zk_migration_ready"]).lower())
        if resp["unknown_tags"]:
            w("unknown_tagged_fields %s" % resp["unknown_tags"])
    w("")
    w("[api_versions_v99]  # request: ApiVersions v99, header v2, v3 body")
    w("response_frame_bytes %d" % len(raw99))
    w("response_hex %s" % raw99.hex())
    w("decoded_as v0: correlation_id %d error_code %d (%s) api_keys %s throttle_field_present %s"
      % (v99["correlation_id"], v99["error_code"], ERROR_NAMES.get(v99["error_code"], "?"),
         [(API_NAMES.get(k, k), lo, hi) for k, lo, hi in v99["api_keys"]],
         "no" if v99["trailing_bytes"] == 0 else "%d trailing bytes" % v99["trailing_bytes"]))
    w("")
    w("[other_probes]")
    w("unknown_api_key_9999: %s" % unknown_key)
    w("produce_v0_below_min_version: %s" % old_produce)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"v3": v3, "v%d" % av_max: vmax, "v99": v99, "v99_hex": raw99.hex(),
                       "unknown_api_key_9999": unknown_key, "produce_v0": old_produce},
                      f, indent=1, default=list)
    return 0


if __name__ == "__main__":
    sys.exit(main())

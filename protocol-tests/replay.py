#!/usr/bin/env python3
"""Replay golden client conversations and hand-written edge cases against Apache Kafka and
sluice, decode both responses and compare them field by field.

    replay.py [--kafka HOST:PORT] [--sluice HOST:PORT] [--sluice-bin PATH] [--only NAME] [-v]

Without --kafka a real Kafka is started with compat/kafka/kafka-ref.sh (jars must have been
fetched by compat/kafka/fetch.sh); without --sluice the sluice binary (--sluice-bin, $SLUICE_BIN
or target/release/sluice) is started on a fresh log dir. Both brokers must be fresh: the
conversations create their own topics (golden-<client>, edge-*).

Exit status: 0 when every compared response matches, 1 on any mismatch.
See protocol-tests/README.md for what is ignored and why.
"""
import argparse
import base64
import glob
import importlib
import json
import os
import pkgutil
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import kafka.protocol as _kp  # noqa: E402

for _m in pkgutil.walk_packages(_kp.__path__, "kafka.protocol."):
    try:
        importlib.import_module(_m.name)
    except Exception:
        pass
from kafka.protocol.api_header import ResponseClassRegistry  # noqa: E402

from capture_api_versions import API_NAMES, api_versions, decode_api_versions  # noqa: E402

REGISTRY = ResponseClassRegistry._response_class_registry


def _request_classes():
    from kafka.protocol.api_message import ApiMessage
    out, todo = {}, [ApiMessage]
    while todo:
        c = todo.pop()
        for sub in c.__subclasses__():
            todo.append(sub)
            try:
                if getattr(sub, "_class_version", None) is None and sub._json and sub.is_request():
                    out[sub.API_KEY] = sub
            except Exception:
                pass
    return out


REQUESTS = _request_classes()


def downgrade(wire, new_version):
    """Re-encode a captured request at a lower version (what the client would have negotiated
    with a broker that advertises less). -> wire bytes or None if kafka-python can't."""
    frame = wire[4:]
    try:
        k, v, cid, n = struct.unpack(">hhih", frame[:10])
        cls = REQUESTS[k]
        client_id = frame[10:10 + max(n, 0)].decode()
        pos = 10 + max(n, 0)
        if cls.flexible_version_q(v):
            ntags, pos = uvarint(frame, pos)
            for _ in range(ntags):
                _, pos = uvarint(frame, pos)
                ln, pos = uvarint(frame, pos)
                pos += ln
        if k == 18 and v > cls.max_version:
            # ApiVersions v5 (KIP-1242) only adds ClusterId/NodeId after the two v3+ strings
            r = frame[pos:]
            ln, p2 = uvarint(r, 0)
            name = r[p2:p2 + ln - 1].decode()
            p2 += ln - 1
            ln, p2 = uvarint(r, p2)
            ver = r[p2:p2 + ln - 1].decode()
            msg = cls(client_software_name=name, client_software_version=ver)
        else:
            msg = cls.decode(frame[pos:], version=v)
        msg.with_header(correlation_id=cid, client_id=client_id)
        msg.API_VERSION = new_version
        return bytes(msg.encode(header=True, framed=True))
    except Exception:
        return None

# ---------------------------------------------------------------- what is ignored
# Values that legitimately differ between two brokers (identity, clocks, broker-chosen ids).
MASK_KEYS = {
    "cluster_id", "controller_id", "node_id", "broker_id", "leader_id", "coordinator_id",
    "host", "port", "topic_id", "session_id", "throttle_time_ms", "error_message",
    "timestamp", "log_append_time_ms", "finalized_features_epoch", "producer_id",
    "cluster_authorized_operations", "topic_authorized_operations", "authorized_operations",
}
# Arrays of node ids: compare only their length.
NODE_LIST_KEYS = {"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas",
                  "last_known_elr", "replicas", "isr"}
# Keys used to sort arrays of structs (brokers may list topics/partitions in any order).
SORT_KEYS = ("name", "topic", "topic_name", "partition_index", "partition", "index", "api_key",
             "resource_name", "config_name")
MASK = "<ignored>"


# Arrays of structs are compared as maps keyed by the first of these fields that identifies
# every element uniquely (brokers may list topics/partitions/configs in any order, and a missing
# element then shows up as one '<absent>' instead of shifting every later element).
ID_KEYS = ("name", "topic", "topic_name", "api_key", "partition_index", "partition", "index",
           "resource_name", "config_name", "key")


def mask(v, key=None):
    if key in MASK_KEYS:
        return MASK
    if key in NODE_LIST_KEYS and isinstance(v, list):
        return "<%d node ids>" % len(v)
    if isinstance(v, dict):
        return {k: mask(x, k) for k, x in v.items()}
    if isinstance(v, list):
        out = [mask(x) for x in v]
        if out and all(isinstance(x, dict) for x in out):
            for idk in ID_KEYS:
                ids = [x.get(idk) for x in out]
                if all(i is not None for i in ids) and len(set(map(str, ids))) == len(ids):
                    return {"[%s=%s]" % (idk, i): x for i, x in zip(ids, out)}
        return out
    return v


def diff(a, b, path=""):
    """Yield (path, a, b) for every differing leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                yield (path + "." + k, a.get(k, "<absent>"), b.get(k, "<absent>"))
            else:
                yield from diff(a[k], b[k], path + "." + k)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield (path + "[len]", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, "%s[%d]" % (path, i))
    elif a != b:
        yield (path or ".", a, b)


# ---------------------------------------------------------------- decoding
def decode_response(api_key, version, frame):
    """-> (how, dict). how: 'kafka-python' or 'fallback: ...'."""
    cls = REGISTRY.get(api_key)
    if api_key == 18:
        try:
            if cls is not None and 0 <= version <= cls.max_version:
                return "kafka-python", cls.decode(frame[4:], version=version).to_dict()
        except Exception:
            pass
        # unsupported ApiVersions version: Kafka answers with a v0 body
        ec = struct.unpack(">h", frame[4:6])[0] if len(frame) >= 6 else None
        try:
            return "kafka-python v0", cls.decode(frame[4:], version=0).to_dict()
        except Exception:
            return "fallback: error code", {"error_code": ec, "raw_len": len(frame)}
    if cls is None or not 0 <= version <= cls.max_version:
        return "fallback: raw length", {"raw_len": len(frame)}
    pos = 4
    if cls.flexible_version_q(version):
        ntags, pos = uvarint(frame, pos)
        for _ in range(ntags):
            _, pos = uvarint(frame, pos)
            n, pos = uvarint(frame, pos)
            pos += n
    try:
        return "kafka-python", cls.decode(frame[pos:], version=version).to_dict()
    except Exception as e:
        return "fallback: undecodable (%s)" % type(e).__name__, {"raw_len": len(frame)}


def uvarint(b, pos):
    shift = n = 0
    while True:
        x = b[pos]
        pos += 1
        n |= (x & 0x7F) << shift
        if not x & 0x80:
            return n, pos
        shift += 7


# ---------------------------------------------------------------- talking to a broker
class Target:
    def __init__(self, name, bootstrap):
        self.name = name
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.conns = {}
        self.subst = {}  # captured bytes -> this broker's bytes (topic ids, fetch session ids)
        self.cluster_id = metadata_cluster_id(self.host, self.port)
        keys = decode_api_versions(api_versions(self.host, self.port, 3), 3)["api_keys"]
        self.advertised = {k: (lo, hi) for k, lo, hi in keys}

    def unadvertised(self, api_key, version):
        if api_key is None:
            return None
        r = self.advertised.get(api_key)
        if r is None:
            return "%s not advertised by %s" % (API_NAMES.get(api_key, api_key), self.name)
        if not r[0] <= version <= r[1]:
            return "%s advertises %s v%d..v%d" % (self.name, API_NAMES.get(api_key, api_key), r[0], r[1])
        return None

    def sock(self, conn):
        s = self.conns.get(conn)
        if s is None:
            s = socket.create_connection((self.host, self.port), timeout=10)
            self.conns[conn] = s
        return s

    def close_all(self):
        for s in self.conns.values():
            try:
                s.close()
            except OSError:
                pass
        self.conns = {}

    def lookup_topic_ids(self, wire, golden_ids):
        """Map captured topic ids found in wire to this broker's ids (Metadata v12 by name)."""
        for gid, name in golden_ids.items():
            if gid in wire and gid not in self.subst:
                tid = metadata_topic_id(self.host, self.port, name)
                if tid is not None:
                    self.subst[gid] = tid

    def rewrite(self, wire):
        body = wire[4:]
        for a, b in self.subst.items():
            body = body.replace(a, b)
        if body == wire[4:]:
            return wire  # untouched (also keeps deliberately malformed length prefixes)
        return struct.pack(">i", len(body)) + body

    def learn_cluster_id(self, golden_cluster_ids):
        """The captured cluster id (sent back by clients, e.g. ApiVersions v5) -> this broker's."""
        for g in golden_cluster_ids:
            if self.cluster_id and g != self.cluster_id:
                for enc in (lambda x: uvarint_bytes(len(x) + 1) + x.encode(),
                            lambda x: struct.pack(">h", len(x)) + x.encode()):
                    self.subst[enc(g)] = enc(self.cluster_id)

    def exchange(self, conn, wire, correlation_id, wait, timeout=10.0):
        """Send wire bytes; -> ('response', frame) | ('closed', None) | ('timeout', None) | ('sent', None)."""
        try:
            s = self.sock(conn)
            s.sendall(self.rewrite(wire))
        except OSError:
            self.conns.pop(conn, None)
            return "closed", None
        if not wait:
            return "sent", None
        s.settimeout(timeout)
        try:
            while True:
                head = recv_exact(s, 4)
                (n,) = struct.unpack(">i", head)
                frame = recv_exact(s, n)
                if correlation_id is None or struct.unpack(">i", frame[:4])[0] == correlation_id:
                    return "response", frame
                # a late answer to a request whose response the capture did not wait for
        except socket.timeout:
            return "timeout", None
        except (ConnectionError, OSError):
            self.conns.pop(conn, None)
            return "closed", None


def uvarint_bytes(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def request_once(host, port, req, api_key, version):
    req.API_VERSION = version
    req.with_header(correlation_id=424242, client_id="sluice-replay")
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(req.encode(header=True, framed=True))
            (n,) = struct.unpack(">i", recv_exact(s, 4))
            frame = recv_exact(s, n)
    except OSError:
        return {}
    return decode_response(api_key, version, frame)[1]


def metadata_cluster_id(host, port):
    from kafka.protocol.metadata import MetadataRequest
    req = MetadataRequest(topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return request_once(host, port, req, 3, 12).get("cluster_id")


def warm_up(t, deadline_s=30):
    """Wait until the broker's transaction coordinator answers InitProducerId (a fresh Kafka
    answers COORDINATOR_LOAD_IN_PROGRESS for a few seconds; clients just retry)."""
    from kafka.protocol.producer import InitProducerIdRequest
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                    producer_id=-1, producer_epoch=-1)
        if request_once(t.host, t.port, req, 22, 4).get("error_code") == 0:
            return
        time.sleep(0.5)
    print("warning: %s InitProducerId still failing after %ds" % (t.name, deadline_s))


def metadata_topic_id(host, port, name):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    for t in request_once(host, port, req, 3, 12).get("topics", []):
        if t.get("name") == name and t.get("topic_id"):
            u = uuid.UUID(t["topic_id"]).bytes
            return None if u == bytes(16) else u
    return None


def golden_ids(steps):
    """({captured topic id bytes: topic name}, {captured cluster ids}) from the captured responses."""
    out, cids = {}, set()

    def walk(v):
        if isinstance(v, dict):
            name = v.get("name", v.get("topic"))
            tid = v.get("topic_id")
            if isinstance(name, str) and name and isinstance(tid, str):
                u = uuid.UUID(tid).bytes
                if u != bytes(16):
                    out[u] = name
            if isinstance(v.get("cluster_id"), str):
                cids.add(v["cluster_id"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    for st in steps:
        if st.get("golden"):
            walk(decode_response(st["api_key"], st["api_version"], st["golden"])[1])
    return out, cids


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        c = s.recv(n - len(buf))
        if not c:
            raise ConnectionError("closed")
        buf += c
    return buf


def learn_substitutions(target, golden_dict, live_dict):
    """Captured topic ids / fetch session ids -> the ones this broker chose."""
    if isinstance(golden_dict, dict) and isinstance(live_dict, dict):
        for k in golden_dict:
            if k not in live_dict:
                continue
            g, l = golden_dict[k], live_dict[k]
            if k == "topic_id" and isinstance(g, str) and isinstance(l, str) and g != l:
                try:
                    target.subst[uuid.UUID(g).bytes] = uuid.UUID(l).bytes
                except ValueError:
                    pass
            elif k == "session_id" and isinstance(g, int) and isinstance(l, int) and g != l and g != 0:
                target.subst[struct.pack(">i", g)] = struct.pack(">i", l)
            else:
                learn_substitutions(target, g, l)
    elif isinstance(golden_dict, list) and isinstance(live_dict, list):
        for g, l in zip(golden_dict, live_dict):
            learn_substitutions(target, g, l)


# ---------------------------------------------------------------- conversations
def load_golden(path):
    steps = []
    for line in open(path):
        r = json.loads(line)
        req = base64.b64decode(r["request"])
        steps.append({
            "conn": r["conn"], "api_key": r["api_key"], "api_version": r["api_version"],
            "correlation_id": r["correlation_id"], "wire": struct.pack(">i", len(req)) + req,
            "golden": base64.b64decode(r["response"]) if r["response"] else None,
            "wait": r["response"] is not None, "label": "",
        })
    return steps


def load_edge_cases():
    import edge_cases
    return edge_cases.steps()


def api_label(step):
    k, v = step["api_key"], step["api_version"]
    if k is None:
        return "(raw)"
    return "%s v%d" % (API_NAMES.get(k, "api%d" % k), v)


def run_conversation(name, steps, targets, verbose, settle):
    rows, failures = [], 0
    gids, cids = golden_ids(steps)
    seen = {}
    for t in targets:
        t.close_all()
        t.learn_cluster_id(cids)
    for i, st in enumerate(steps):
        results = {}
        gap = None
        if st["api_key"] is not None and st.get("downgrade", True):
            why = targets[1].unadvertised(st["api_key"], st["api_version"])
            hi = targets[1].advertised.get(st["api_key"], (0, -1))[1]
            if why and not targets[0].unadvertised(st["api_key"], st["api_version"]) and 0 <= hi < st["api_version"]:
                w = downgrade(st["wire"], hi)
                if w is not None:
                    gap = "version gap: %s; both compared at v%d" % (why, hi)
                    st = dict(st, wire=w, api_version=hi, golden=None, label="(captured v%d)" % st["api_version"])
        for t in targets:
            t.lookup_topic_ids(st["wire"], gids)
            kind, frame = t.exchange((name, st["conn"]), st["wire"], st["correlation_id"], st["wait"],
                                     timeout=st.get("timeout", 10.0))
            how, dec = None, None
            if kind == "response":
                how, dec = decode_response(st["api_key"], st["api_version"], frame)
                if st.get("golden") is not None:
                    ghow, gdec = decode_response(st["api_key"], st["api_version"], st["golden"])
                    learn_substitutions(t, gdec, dec)
            results[t.name] = (kind, how, dec)
        if st["api_key"] in (19, 20) and settle:
            time.sleep(settle)  # let topic creation/deletion finish on both brokers
        (ka, ha, da), (kb, hb, db) = results[targets[0].name], results[targets[1].name]
        label = api_label(st) + (" " + st["label"] if st["label"] else "")
        if not st["wait"]:
            status, note, diffs = "skip", "no response in capture (not compared)", []
        elif ka != kb:
            status, note, diffs = "FAIL", "kafka: %s, sluice: %s" % (ka, kb), []
            why = targets[1].unadvertised(st["api_key"], st["api_version"]) or \
                targets[0].unadvertised(st["api_key"], st["api_version"])
            if why:
                note += " (%s)" % why
        elif ka != "response":
            status, note, diffs = "ok", ka, []
        else:
            diffs = list(diff(mask(da), mask(db)))
            note = ha if ha == hb else "%s / %s" % (ha, hb)
            kept = [d for d in diffs if not deliberate(api_label(st).split()[0], d[0])]
            if len(kept) < len(diffs):
                note += "; %d deliberate difference(s) (deliberate-differences.txt)" % (len(diffs) - len(kept))
            diffs = kept
            status = "FAIL" if diffs else "ok"
        exp = st.get("expect")
        if exp is not None and ka is not None and status != "skip":
            got = exp(ka, da)
            if got is not True:
                status, note = "FAIL", "kafka did not behave as the edge case expects: %s" % got
        if gap and status == "ok" and deliberate(api_label(st).split()[0], "GAP"):
            note += "; " + gap + " (deliberate)"
        elif gap and status == "ok":
            status, note = "GAP", gap
        elif gap:
            note += "; " + gap
        if status in ("FAIL", "GAP"):
            failures += 1
        rows.append((name, i, label, status, note))
        print("%-14s %3d  %-34s %-4s  %s" % (name, i, label[:34], status, note))
        sig = json.dumps([st["api_key"], st["api_version"], ka, kb, diffs], default=str)
        if status in ("FAIL", "GAP") and sig in seen and not verbose:
            print("        same difference as %s #%d" % seen[sig])
            continue
        seen.setdefault(sig, (name, i))
        if diffs or (status == "FAIL" and (verbose or ka != kb)) or verbose:
            for p, a, b in (diffs if verbose else diffs[:40]):
                print("        %s: kafka=%s sluice=%s" % (p, short(a), short(b)))
            if status == "FAIL":
                print("        request: %s" % st["wire"].hex()[:400])
                print("        kafka : %s" % short(da, 600))
                print("        sluice: %s" % short(db, 600))
    for t in targets:
        t.close_all()
    return rows, failures


def short(v, n=160):
    s = json.dumps(v, default=str) if not isinstance(v, str) else repr(v)
    return s if len(s) <= n else s[:n] + "..."


# ---------------------------------------------------------------- brokers
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_sluice(binary, workdir):
    logdir = os.path.join(workdir, "sluice-data")
    os.makedirs(logdir)
    err = open(os.path.join(workdir, "sluice.log"), "w+")
    p = subprocess.Popen([binary, "serve", "--override", "log.dirs=" + logdir,
                          "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                          "--override", "metrics.listener=none",
                          "--override", "auto.create.topics.enable=false"],
                         stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 30
    while time.time() < deadline:
        err.seek(0)
        m = re.search(r"sluice listening on PLAINTEXT://([\d.]+:\d+)", err.read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.1)
    err.seek(0)
    raise SystemExit("sluice did not start:\n" + err.read()[-2000:])


def start_kafka(workdir):
    port = free_port()
    d = os.path.join(workdir, "kafka-data")
    subprocess.run([os.path.join(ROOT, "compat", "kafka", "kafka-ref.sh"), "start", "--port", str(port),
                    "--dir", d, "--override", "auto.create.topics.enable=false"],
                   check=True, stdout=subprocess.DEVNULL)
    return d, "127.0.0.1:%d" % port


def stop_kafka(d):
    subprocess.run([os.path.join(ROOT, "compat", "kafka", "kafka-ref.sh"), "stop", "--dir", d],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


DELIBERATE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deliberate-differences.txt")


def load_deliberate():
    """(api name, compiled path regex) pairs from deliberate-differences.txt; the path "GAP"
    accepts a version gap for that API."""
    out = []
    if os.path.exists(DELIBERATE_FILE):
        for line in open(DELIBERATE_FILE):
            line = line.split("#", 1)[0].strip()
            if line:
                api, pattern = line.split(None, 1)
                out.append((api, re.compile(pattern.split()[0])))
    return out


DELIBERATE = load_deliberate()


def deliberate(api_name, path):
    return any((api == api_name or api == "*") and rx.search(path) for api, rx in DELIBERATE)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kafka")
    ap.add_argument("--sluice")
    ap.add_argument("--sluice-bin", default=os.environ.get("SLUICE_BIN", os.path.join(ROOT, "target", "release", "sluice")))
    ap.add_argument("--only", help="run only this conversation (golden file stem or 'edge')")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds to wait after CreateTopics/DeleteTopics")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="sluice-protocol-tests-")
    sluice_proc = kafka_dir = None
    try:
        if not args.sluice:
            sluice_proc, args.sluice = start_sluice(args.sluice_bin, workdir)
        if not args.kafka:
            kafka_dir, args.kafka = start_kafka(workdir)
        targets = [Target("kafka", args.kafka), Target("sluice", args.sluice)]
        for t in targets:
            warm_up(t)
        print("kafka %s, sluice %s" % (args.kafka, args.sluice))
        convs = [(os.path.splitext(os.path.basename(p))[0], load_golden(p))
                 for p in sorted(glob.glob(os.path.join(HERE, "golden", "*.jsonl")))]
        convs.append(("edge", load_edge_cases()))
        if args.only:
            convs = [c for c in convs if c[0] == args.only]
        print("%-14s %3s  %-34s %-4s  %s" % ("conversation", "#", "request", "", "decoded with / difference"))
        total = fails = 0
        allrows = []
        for name, steps in convs:
            rows, f = run_conversation(name, steps, targets, args.verbose, args.settle)
            allrows += rows
            total += sum(1 for r in rows if r[3] != "skip")
            fails += f
        gaps = sum(1 for r in allrows if r[3] == "GAP")
        print("\n%d requests compared, %d mismatches (%d of them only a version gap: the request was "
              "downgraded to the highest version sluice advertises and then matched)" % (total, fails, gaps))
        return 1 if fails else 0
    finally:
        if sluice_proc is not None:
            sluice_proc.terminate()
            try:
                sluice_proc.wait(10)
            except subprocess.TimeoutExpired:
                sluice_proc.kill()
        if kafka_dir is not None:
            stop_kafka(kafka_dir)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Malformed frames: the offending connection is closed, everyone else is unaffected."""
import random
import socket
import struct
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, TopicPartition

from conftest import REPO
from kafkautil import consumer, create_topic, make_records, produce_all, producer, unique

sys.path.insert(0, str(REPO / "protocol-tests"))
import capture_api_versions as cav  # noqa: E402


def host_port(bootstrap):
    h, p = bootstrap.rsplit(":", 1)
    return h, int(p)


def closed_within(sock, timeout=10.0):
    """True if the peer closes the connection (recv -> b'' or reset) within timeout."""
    sock.settimeout(timeout)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            data = sock.recv(65536)
            if data == b"":
                return True
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


@pytest.fixture(scope="module")
def canary(module_broker):
    """A producer and a consumer on their own topic that must keep working throughout."""
    b = module_broker.bootstrap
    topic = create_topic(b, unique("canary"), 1)
    state = {"topic": topic, "p": producer(b, acks="all"), "n": 0}

    def roundtrip(count=20):
        start = state["n"]
        recs = make_records(count, 1, prefix="canary-%d" % start)
        d = produce_all(state["p"], topic, recs)
        assert not d.failed
        assert sorted(off for _, off in d.ok.values()) == list(range(start, start + count))
        c = consumer(b)
        try:
            c.assign([TopicPartition(topic, 0, start)])
            got = []
            deadline = time.time() + 20
            while len(got) < count and time.time() < deadline:
                m = c.poll(0.5)
                if m is None or m.error():
                    continue
                got.append((m.offset(), m.key(), m.value()))
            assert got == [(start + i, r["key"], r["value"]) for i, r in enumerate(recs)]
        finally:
            c.close()
        state["n"] += count

    state["roundtrip"] = roundtrip
    roundtrip()
    return state


def test_negative_frame_length_closes_connection(module_broker, canary):
    with socket.create_connection(host_port(module_broker.bootstrap)) as s:
        s.sendall(struct.pack(">i", -5) + b"\x00" * 16)
        assert closed_within(s)
    canary["roundtrip"]()


def test_frame_above_socket_request_max_bytes_closes_connection(module_broker, canary):
    with socket.create_connection(host_port(module_broker.bootstrap)) as s:
        s.sendall(struct.pack(">i", 104857600 + 1) + b"\x00" * 64)  # socket.request.max.bytes default 100 MiB
        assert closed_within(s)
    canary["roundtrip"]()


def test_random_garbage_does_not_disturb_a_concurrent_consumer(module_broker, canary):
    b = module_broker.bootstrap
    topic = canary["topic"]
    start = canary["n"]
    recs = make_records(200, 1, prefix="during-garbage")
    got = []
    ready = threading.Event()
    done = threading.Event()

    def consume():
        c = consumer(b)
        try:
            c.assign([TopicPartition(topic, 0, start)])
            ready.set()
            deadline = time.time() + 40
            while len(got) < len(recs) and time.time() < deadline:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got.append((m.offset(), m.key(), m.value()))
        finally:
            c.close()
            done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    ready.wait(10)
    rng = random.Random(20240229)
    socks = []
    for i in range(5):
        s = socket.create_connection(host_port(b))
        try:
            s.sendall(bytes(rng.getrandbits(8) for _ in range(10_000)))
        except (BrokenPipeError, ConnectionResetError):
            pass
        socks.append(s)
    produce_all(canary["p"], topic, recs)
    t.join(60)
    for s in socks:
        s.close()
    assert got == [(start + i, r["key"], r["value"]) for i, r in enumerate(recs)]
    canary["n"] += len(recs)
    canary["roundtrip"]()


def test_api_versions_v99_answers_unsupported_version_in_v0_framing(module_broker, canary):
    h, p = host_port(module_broker.bootstrap)
    with socket.create_connection((h, p), timeout=10) as s:
        s.sendall(cav.frame(cav.request_header_v2(18, 99, 4242) + cav.api_versions_body(3)))
        payload = cav.recv_frame(s)
        r = cav.decode_api_versions(payload, 0)
        assert r["correlation_id"] == 4242
        assert r["error_code"] == 35  # UNSUPPORTED_VERSION
        assert r["trailing_bytes"] == 0, payload.hex()
        assert len(r["api_keys"]) == 1 and r["api_keys"][0][0] == 18, r["api_keys"]
        _, lo, hi = r["api_keys"][0]
        assert lo == 0 and hi >= 3
        # the connection stays usable: the client retries with a version the broker supports
        s.sendall(cav.frame(cav.request_header_v2(18, 3, 4243) + cav.api_versions_body(3)))
        r3 = cav.decode_api_versions(cav.recv_frame(s), 3)
        assert r3["correlation_id"] == 4243 and r3["error_code"] == 0
        keys = {k: (lo_, hi_) for k, lo_, hi_ in r3["api_keys"]}
        assert keys[18] == (lo, hi)
        for k in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 19):
            assert k in keys, "api key %d not advertised" % k
    canary["roundtrip"]()


def test_unknown_api_key_closes_connection(module_broker, canary):
    with socket.create_connection(host_port(module_broker.bootstrap)) as s:
        s.sendall(cav.frame(cav.request_header_v2(9999, 0, 1) + b"\x00" * 8))
        assert closed_within(s)
    canary["roundtrip"]()


@pytest.mark.parametrize("api_key,version", [(3, 99), (0, 0)], ids=["metadata-v99", "produce-v0"])
def test_unsupported_version_of_other_api_closes_connection(module_broker, canary, api_key, version):
    # Produce v0 is advertised by Kafka 4.x (min 0, for old librdkafka) yet refused.
    with socket.create_connection(host_port(module_broker.bootstrap)) as s:
        s.sendall(cav.frame(cav.request_header_v1(api_key, version, 1) + b"\x00" * 16))
        assert closed_within(s)
    canary["roundtrip"]()

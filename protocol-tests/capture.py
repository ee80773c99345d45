#!/usr/bin/env python3
"""Record Kafka request/response frames between real clients and a real broker.

Two modes:

  capture.py proxy --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092 --out FILE.jsonl
      A tiny asyncio TCP proxy. Every request frame a client sends (and the response
      frame with the same correlation id, if any) is written to FILE.jsonl on exit
      (Ctrl-C / SIGTERM), one JSON object per request, in the order requests were sent:
        {"seq": n, "conn": c, "api_key": k, "api_version": v, "correlation_id": id,
         "request": base64(frame without the 4-byte length),
         "response": base64(frame without length) | null (no response, e.g. acks=0)}
      The upstream broker must advertise the proxy's address (advertised.listeners),
      otherwise clients bypass the proxy after their first Metadata request.

  capture.py record [--client librdkafka|java|kafka-python|all]
      Starts Apache Kafka (compat/kafka/kafka-ref.sh) advertising the proxy, runs the
      proxy in-process and one fixed scenario per client, and writes
      protocol-tests/golden/<client>.jsonl. Each client uses its own fixed topic name
      (golden-<client>) so the conversations can be replayed one after another on one
      broker. This is how the committed golden files were made.
"""
import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GOLDEN = os.path.join(HERE, "golden")


class Recorder:
    def __init__(self):
        self.records = []
        self.pending = {}  # (conn, correlation id) -> record
        self.next_conn = 0
        self.lock = threading.Lock()

    def new_conn(self):
        with self.lock:
            self.next_conn += 1
            return self.next_conn

    def request(self, conn, frame):
        if len(frame) < 8:
            rec = {"api_key": None, "api_version": None, "correlation_id": None}
        else:
            k, v, cid = struct.unpack(">hhi", frame[:8])
            rec = {"api_key": k, "api_version": v, "correlation_id": cid}
        with self.lock:
            rec.update(seq=len(self.records), conn=conn, request=base64.b64encode(frame).decode(), response=None)
            self.records.append(rec)
            if rec["correlation_id"] is not None:
                self.pending[(conn, rec["correlation_id"])] = rec

    def response(self, conn, frame):
        if len(frame) < 4:
            return
        (cid,) = struct.unpack(">i", frame[:4])
        with self.lock:
            rec = self.pending.pop((conn, cid), None)
            if rec is not None:
                rec["response"] = base64.b64encode(frame).decode()

    def write(self, path):
        keys = ("seq", "conn", "api_key", "api_version", "correlation_id", "request", "response")
        with open(path, "w") as f:
            for r in self.records:
                f.write(json.dumps({k: r[k] for k in keys}) + "\n")


async def _pump(reader, writer, on_frame):
    buf = b""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
            buf += data
            while len(buf) >= 4:
                (n,) = struct.unpack(">i", buf[:4])
                if n < 0 or len(buf) < 4 + n:
                    break
                on_frame(buf[4:4 + n])
                buf = buf[4 + n:]
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def serve_proxy(listen_host, listen_port, up_host, up_port, rec, ready=None, stop=None):
    async def handle(cr, cw):
        conn = rec.new_conn()
        try:
            ur, uw = await asyncio.open_connection(up_host, up_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(
            _pump(cr, uw, lambda f: rec.request(conn, f)),
            _pump(ur, cw, lambda f: rec.response(conn, f)),
        )

    server = await asyncio.start_server(handle, listen_host, listen_port)
    if ready is not None:
        ready.set()
    async with server:
        if stop is None:
            await server.serve_forever()
        else:
            while not stop.is_set():
                await asyncio.sleep(0.1)


def hostport(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---------------------------------------------------------------- client scenarios
def scenario_librdkafka(bootstrap, topic):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    common = {"bootstrap.servers": bootstrap, "client.id": "golden-librdkafka",
              "broker.address.family": "v4", "topic.metadata.refresh.interval.ms": 600000}
    admin = AdminClient(dict(common))
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    time.sleep(1)
    p = Producer(dict(common, **{"linger.ms": 50, "acks": "all"}))
    for i in range(3):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, headers=[("h", b"%d" % i)],
                  timestamp=1700000000000 + i)
    assert p.flush(30) == 0
    c = Consumer(dict(common, **{"group.id": "golden-librdkafka-g", "enable.auto.commit": False,
                                 "fetch.wait.max.ms": 100, "enable.partition.eof": True}))
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < 3 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value(), m.offset()))
    c.close()
    assert [g[2] for g in got] == [0, 1, 2], got
    md = admin.list_topics(topic, timeout=10)
    assert topic in md.topics
    from confluent_kafka import TopicCollection
    admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    admin.delete_topics([topic])[topic].result(30)


def scenario_kafka_python(bootstrap, topic):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="golden-kafka-python")
    admin.create_topics([NewTopic(topic, 1, 1)])
    time.sleep(1)
    p = KafkaProducer(bootstrap_servers=bootstrap, client_id="golden-kafka-python", linger_ms=50)
    for i in range(3):
        p.send(topic, key=b"k%d" % i, value=b"value-%d" % i, timestamp_ms=1700000000000 + i)
    p.flush(30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="golden-kafka-python",
                      enable_auto_commit=False, fetch_max_wait_ms=100)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = []
    deadline = time.time() + 30
    while len(got) < 3 and time.time() < deadline:
        for recs in c.poll(500).values():
            got.extend(r.offset for r in recs)
    c.close()
    assert got == [0, 1, 2], got
    admin.describe_topics([topic])
    admin.delete_topics([topic])
    admin.close()


def scenario_java(bootstrap, topic):
    kbin = os.path.join(ROOT, "compat", "kafka", "bin")
    def run(args, stdin=None):
        subprocess.run([os.path.join(kbin, args[0])] + args[1:], input=stdin, check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
    run(["kafka-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
         "--partitions", "1", "--replication-factor", "1"])
    run(["kafka-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
         "--reader-property", "parse.key=true", "--reader-property", "key.separator=:"],
        stdin=b"k0:value-0\nk1:value-1\nk2:value-2\n")
    run(["kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", topic])
    run(["kafka-topics.sh", "--bootstrap-server", bootstrap, "--delete", "--topic", topic])


SCENARIOS = {"librdkafka": scenario_librdkafka, "java": scenario_java, "kafka-python": scenario_kafka_python}


def record(clients):
    os.makedirs(GOLDEN, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sluice-capture-")
    kport, pport = free_port(), free_port()
    ref = os.path.join(ROOT, "compat", "kafka", "kafka-ref.sh")
    subprocess.run([ref, "start", "--port", str(kport), "--dir", os.path.join(work, "data"),
                    "--override", "advertised.listeners=PLAINTEXT://127.0.0.1:%d" % pport], check=True)
    try:
        for client in clients:
            rec = Recorder()
            ready, stop = threading.Event(), threading.Event()
            t = threading.Thread(target=lambda: asyncio.run(
                serve_proxy("127.0.0.1", pport, "127.0.0.1", kport, rec, ready, stop)), daemon=True)
            t.start()
            ready.wait(10)
            SCENARIOS[client]("127.0.0.1:%d" % pport, "golden-" + client)
            time.sleep(1)
            stop.set()
            t.join(10)
            out = os.path.join(GOLDEN, client + ".jsonl")
            rec.write(out)
            print("%s: %d requests -> %s (%d bytes)" % (client, len(rec.records), out, os.path.getsize(out)))
    finally:
        subprocess.run([ref, "stop", "--dir", os.path.join(work, "data")])
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy")
    p.add_argument("--listen", default="127.0.0.1:19092")
    p.add_argument("--upstream", required=True)
    p.add_argument("--out", required=True)
    r = sub.add_parser("record")
    r.add_argument("--client", default="all", choices=["all"] + list(SCENARIOS))
    args = ap.parse_args()
    if args.cmd == "proxy":
        rec = Recorder()
        lh, lp = hostport(args.listen)
        uh, up = hostport(args.upstream)
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            asyncio.run(serve_proxy(lh, lp, uh, up, rec))
        except KeyboardInterrupt:
            pass
        rec.write(args.out)
        print("%d requests -> %s" % (len(rec.records), args.out), file=sys.stderr)
        return 0
    record(list(SCENARIOS) if args.client == "all" else [args.client])
    return 0


if __name__ == "__main__":
    sys.exit(main())

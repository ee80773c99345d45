#!/usr/bin/env python3
"""confluent-kafka-python producer, only to compare load generators with rdkbench (C).

   pyproduce.py BOOTSTRAP TOPIC N SIZE ACKS   -> one JSON line like rdkbench produce
"""
import json, os, sys, time
from confluent_kafka import Producer

boot, topic, n, size, acks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
conf = {"bootstrap.servers": boot, "acks": acks}
if acks == "all":
    conf["enable.idempotence"] = True
p = Producer(conf)
state = {"ok": 0, "failed": 0, "err": "", "last": 0.0}


def dr(err, msg):
    if err:
        state["failed"] += 1
        state["err"] = state["err"] or str(err)
    else:
        state["ok"] += 1
    state["last"] = time.monotonic()


buf = os.urandom(size + 4096)
t0 = time.monotonic()
for i in range(n):
    v = buf[(i * 61) % 4096:(i * 61) % 4096 + size]
    while True:
        try:
            p.produce(topic, v, on_delivery=dr)
            break
        except BufferError:
            p.poll(0.001)
    if i % 1000 == 0:
        p.poll(0)
p.flush(120)
secs = state["last"] - t0
print(json.dumps({"mode": "produce", "records": state["ok"], "failed": state["failed"], "secs": secs,
                  "rps": state["ok"] / secs, "mbps": state["ok"] * size / secs / 2**20, "first_error": state["err"]}))
sys.exit(3 if state["failed"] else 0)

#!/usr/bin/env python3
"""Admin steps for bench.py, in their own process (so a stuck client cannot hang the run).

   admin.py BOOT create NAME:PARTS[:K=V,K=V] [...]   -> {"secs": s}  (all partitions have leaders)
   admin.py BOOT create-many PREFIX TOPICS PARTS      -> same, topics PREFIX0..PREFIX{TOPICS-1}
   admin.py BOOT latest TOPIC PARTS                  -> {"sum": sum of latest offsets}
"""
import json, sys, time
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

boot, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
a = AdminClient({"bootstrap.servers": boot})
t0 = time.monotonic()
if cmd in ("create", "create-many"):
    if cmd == "create":
        specs = [(s.split(":")[0], int(s.split(":")[1])) for s in args]
        configs = {s.split(":")[0]: dict(kv.split("=", 1) for kv in s.split(":")[2].split(",")) for s in args
                   if len(s.split(":")) > 2}
    else:
        specs = [(f"{args[0]}{i}", int(args[2])) for i in range(int(args[1]))]
        configs = {}
    # At most 1,000 partitions per request: Kafka's controller refuses an operation that writes
    # more than 10,000 metadata records ("excessively large batch operation").
    step = max(1, 1000 // max(p for _, p in specs))
    for i in range(0, len(specs), step):
        fs = a.create_topics([NewTopic(n, p, 1, config=configs.get(n, {})) for n, p in specs[i:i + step]],
                             operation_timeout=600, request_timeout=600)
        for f in fs.values():
            f.result()
    want = dict(specs)
    while True:
        md = a.list_topics(timeout=60)
        if all(n in md.topics and md.topics[n].error is None and len(md.topics[n].partitions) == p and
               all(pm.leader >= 0 for pm in md.topics[n].partitions.values()) for n, p in want.items()):
            break
        time.sleep(0.05)
    print(json.dumps({"secs": time.monotonic() - t0}))
elif cmd == "latest":
    topic, parts = args[0], int(args[1])
    r = a.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(parts)}, request_timeout=60)
    print(json.dumps({"sum": sum(f.result().offset for f in r.values())}))

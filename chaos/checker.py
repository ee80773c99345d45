"""What a history of writes and reads shows wrong, in the terms of Jepsen's Kafka workload.

A history is what the workload saw, nothing the broker says about itself:
- `writes`: value -> Write (which producer, its sequence number, the partition it was sent to,
  and how the send ended: "ok" with the offset the broker acknowledged, "fail" with the error the
  client reported, or "unknown" when the client never said). An "ok" can come without an offset:
  librdkafka's idempotent producer acknowledges a batch whose own request timed out once a later
  batch's acknowledgement shows it was written, and has no offset to give for it;
- `polls`: per consumer, its events in order: ("seek", partition) when the consumer was assigned
  or moved its position, and ("read", partition, offset, value) for each record it polled;
- `final`: partition -> [(offset, value)], a read of every partition from its start to its high
  watermark after the faults were healed.

`check` returns a dict anomaly -> list of examples (empty lists where none). The anomalies:
- lost: acknowledged, but not in the final read at the offset it was acknowledged at (or, when
  the acknowledgement gave no offset, nowhere in its partition);
- duplicate: one value at two or more offsets;
- inconsistent-offsets: two different values seen at one partition offset (acks, polls, final);
- reorder: one producer's acknowledged values of one partition in the final read out of the
  order it sent them;
- poll-skip: a consumer reading on without a seek jumped over an offset that the final read
  holds a record at;
- nonmonotonic-poll: a consumer reading on without a seek went back to or below an offset it had
  already read;
- unacknowledged-read: a value the client was told had failed, read anyway.
"""
import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

ANOMALIES = ("lost", "duplicate", "inconsistent-offsets", "reorder", "poll-skip", "nonmonotonic-poll",
             "unacknowledged-read")
EXAMPLES = 5


@dataclass
class Write:
    producer: int
    seq: int
    partition: int
    status: str = "unknown"  # "ok" | "fail" | "unknown"
    offset: Optional[int] = None
    error: Optional[str] = None


def check(writes, polls, final):
    found = {a: [] for a in ANOMALIES}
    counts = {a: 0 for a in ANOMALIES}

    def report(kind, example):
        counts[kind] += 1
        if len(found[kind]) < EXAMPLES:
            found[kind].append(example)

    # Every (partition, offset) -> values observed there, and every value -> offsets.
    at = defaultdict(set)
    where = defaultdict(set)
    for value, w in writes.items():
        if w.status == "ok" and w.offset is not None:
            at[(w.partition, w.offset)].add(value)
    for events in polls.values():
        for e in events:
            if e[0] == "read":
                _, p, o, v = e
                at[(p, o)].add(v)
                where[v].add((p, o))
    final_at = {}
    for p, records in final.items():
        for o, v in records:
            at[(p, o)].add(v)
            where[v].add((p, o))
            final_at[(p, o)] = v

    for (p, o), values in sorted(at.items()):
        if len(values) > 1:
            report("inconsistent-offsets", {"partition": p, "offset": o, "values": sorted(values)})
    for v, places in sorted(where.items()):
        if len(places) > 1:
            report("duplicate", {"value": v, "at": sorted(places)})

    for v, w in sorted(writes.items(), key=lambda kv: (kv[1].partition, kv[1].offset or -1)):
        if w.status == "ok" and w.offset is None:
            if not any(p == w.partition and (p, o) in final_at for p, o in where.get(v, ())):
                report("lost", {"value": v, "partition": w.partition, "offset": None})
        elif w.status == "ok" and final_at.get((w.partition, w.offset)) != v:
            report("lost", {"value": v, "partition": w.partition, "offset": w.offset,
                            "final_has": final_at.get((w.partition, w.offset))})
        if w.status == "fail" and v in where:
            report("unacknowledged-read", {"value": v, "error": w.error, "at": sorted(where[v])})

    # Reorder: per (producer, partition), the final read's order of acknowledged values.
    for p, records in final.items():
        last = {}
        for o, v in records:
            w = writes.get(v)
            if w is None or w.status != "ok":
                continue
            prev = last.get(w.producer)
            if prev is not None and w.seq < prev[0]:
                report("reorder", {"partition": p, "producer": w.producer, "value": v, "offset": o,
                                   "after": prev[1]})
            last[w.producer] = (w.seq, v)

    # Polls: offsets the final read holds, per partition, for skip detection.
    held = {p: sorted(o for o, _ in records) for p, records in final.items()}
    for consumer, events in polls.items():
        pos = {}
        for e in events:
            if e[0] == "seek":
                pos.pop(e[1], None)
                continue
            _, p, o, v = e
            prev = pos.get(p)
            if prev is not None:
                if o <= prev:
                    report("nonmonotonic-poll", {"consumer": consumer, "partition": p, "offset": o, "after": prev})
                else:
                    offsets = held.get(p, [])
                    i = bisect.bisect_right(offsets, prev)
                    if i < len(offsets) and offsets[i] < o:
                        report("poll-skip", {"consumer": consumer, "partition": p, "from": prev, "to": o,
                                             "skipped": offsets[i]})
            pos[p] = o
    return {"counts": counts, "examples": found}

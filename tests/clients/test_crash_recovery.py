"""kill -9 mid-stream: every acknowledged record survives, at the offset it was acknowledged at."""
import threading
import time

from confluent_kafka import Producer

from kafkautil import consume_partitions, create_topic, unique, watermarks

BROKER_OVERRIDES = {"log.flush.interval.messages": "1"}


def value_for(i):
    return (("crash-%06d|" % i) * 8).encode()


def test_kill9_mid_stream(broker):
    b = broker.bootstrap
    topic = create_topic(b, unique("crash"), partitions=1)
    acked = {}      # key -> offset
    failed = {}
    sent = [0]
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked[msg.key()] = msg.offset()
        else:
            failed[msg.key()] = err

    p = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 2, "message.timeout.ms": 120000,
                  "retry.backoff.ms": 200, "reconnect.backoff.max.ms": 1000, "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1})

    def run():
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, key=b"c-%06d" % i, value=value_for(i), partition=0, on_delivery=on_delivery)
                i += 1
                sent[0] = i
            except BufferError:
                pass
            p.poll(0.001)
            if i % 50 == 0:
                time.sleep(0.005)
        p.flush(120)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.time() + 30
    while len(acked) < 2000 and time.time() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 2000, "producer made no progress: %d acked" % len(acked)
    acked_at_kill = len(acked)
    broker.kill9()              # SIGKILL, then start again on the same port and data dir
    time.sleep(1.0)             # keep producing into the restarted broker for a moment
    stop.set()
    t.join(150)
    assert not t.is_alive(), "producer flush did not finish"
    assert len(acked) > acked_at_kill, "no records acknowledged after the restart"

    lo, hi = watermarks(b, topic, 1)[0]
    got = consume_partitions(b, topic, 1, expect=hi, timeout=90)[0]
    offsets = [g["offset"] for g in got]
    assert offsets == list(range(len(got))), "gap or reordering in offsets after recovery"
    assert (lo, hi) == (0, len(got))
    at = {g["offset"]: g for g in got}
    # every acked record is at the offset its delivery report named, byte for byte
    for key, off in acked.items():
        g = at.get(off)
        assert g is not None and g["key"] == key, "acked %s@%d lost/overwritten: %r" % (key, off, g and g["key"])
        assert g["value"] == value_for(int(key[2:]))
    # nothing that was never produced; duplicates only from retries of unacked batches
    seen = {}
    for g in got:
        i = int(g["key"][2:])
        assert g["value"] == value_for(i)
        assert i < sent[0]
        seen.setdefault(g["key"], []).append(g["offset"])
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    assert len(dups) <= 1000, "too many duplicates: %d" % len(dups)
    for k, offs in dups.items():
        if k in acked:
            assert acked[k] in offs

"""The broker's on-disk segments are readable by Kafka's own kafka-dump-log tool."""
import re
import subprocess

from kafkautil import create_topic, produce_all, producer, unique, watermarks
from conftest import REPO

DUMP = REPO / "compat" / "kafka" / "bin" / "kafka-dump-log.sh"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 120
BAD = re.compile(r"Exception|ERROR|corrupt|isvalid: false|Mismatches|Found timestamp mismatch|"
                 r"Non-consecutive|not a valid|failed", re.I)
RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) .*?"
                    r"headerKeys: \[(.*?)\] key: (\S*) payload: (.*)$")
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* compresscodec: (\w+) .* isvalid: (\w+)")


def dump(*args):
    r = subprocess.run([str(DUMP)] + [str(a) for a in args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout, r.stderr


def test_dump_log_reads_every_record(broker):
    b = broker.bootstrap
    topic = create_topic(b, unique("dump"), 1)
    expected = {}
    base_ts = 1_700_000_000_000
    n = 0
    for codec in CODECS:
        recs = []
        for j in range(PER_CODEC):
            recs.append({"key": ("%s-%04d" % (codec, j)).encode(), "value": ("value-%d-%s" % (n, codec)).encode(),
                         "headers": [("codec", codec.encode()), ("n", str(n).encode())], "partition": 0,
                         "timestamp": base_ts + n})
            expected[n] = recs[-1]
            n += 1
        d = produce_all(producer(b, acks="all", compression_type=codec, linger_ms=20), topic, recs)
        assert not d.failed
    assert watermarks(b, topic, 1)[0] == (0, n)
    broker.stop()

    pdir = broker.data_dir / ("%s-0" % topic)
    log = pdir / ("%020d.log" % 0)
    assert log.exists(), sorted(p.name for p in pdir.iterdir())
    out, err = dump("--deep-iteration", "--print-data-log", "--files", log)
    assert not BAD.search(out), BAD.search(out).group(0)
    assert not BAD.search(err), err[-2000:]
    seen = {}
    codecs_seen = set()
    batches = 0
    for line in out.splitlines():
        m = BATCH.match(line)
        if m:
            batches += 1
            assert m.group(5) == "true", line
            codecs_seen.add(m.group(4))
            continue
        m = RECORD.match(line)
        if m:
            off = int(m.group(1))
            assert off not in seen, "offset %d listed twice" % off
            seen[off] = m
    assert sorted(seen) == list(range(n)), "missing offsets: %s" % sorted(set(range(n)) - set(seen))[:20]
    for off, m in seen.items():
        e = expected[off]
        assert int(m.group(2)) == e["timestamp"], (off, m.group(0))
        assert m.group(6) == e["key"].decode(), (off, m.group(0))
        assert m.group(7) == e["value"].decode(), (off, m.group(0))
        assert m.group(5) == "codec,n", (off, m.group(0))
        assert int(m.group(3)) == len(e["key"]) and int(m.group(4)) == len(e["value"])
    assert codecs_seen == set(CODECS), codecs_seen
    assert batches >= len(CODECS)

    idx = [pdir / ("%020d.index" % 0), pdir / ("%020d.timeindex" % 0)]
    for f in idx:
        assert f.exists(), f
    out, err = dump("--index-sanity-check", "--files", ",".join(str(f) for f in idx))
    for f in idx:
        assert "%s passed sanity check." % f in out, out
    assert not BAD.search(out + err), (out + err)[-2000:]
    # full index dump: every index entry must point at a real batch (the tool reports mismatches)
    out, err = dump("--files", ",".join(str(f) for f in idx + [log]))
    assert not BAD.search(out + err), (out + err)[-3000:]

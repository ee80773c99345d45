"""Shared helpers for the Python compatibility scenarios."""
import os
import random
import sys
import time
import traceback

from failover import Skip

RUN = format(int(time.time() * 1000) % 10**9, "x") + format(random.getrandbits(20), "x")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def make_records(partitions, n):
    """n records spread round-robin over partitions, with keys, headers and explicit timestamps."""
    base = int(time.time() * 1000) - 3_600_000
    recs = []
    for i in range(n):
        key = None if i % 7 == 3 else ("key-%d" % i).encode()
        value = None if (i % 11 == 5 and key is not None) else ("value-%d-%s-ünïcødé" % (i, "x" * (i % 13))).encode()
        headers = []
        if i % 4 != 0:
            headers = [("h-index", str(i).encode()), ("h-dup", b"a"), ("h-dup", b"b"), ("h-empty", b"")]
        recs.append(dict(partition=i % partitions, key=key, value=value, headers=headers, ts=base + i * 1000))
    return recs


def check_acked_offsets(recs):
    """recs carry 'offset' from the delivery reports, in send order: 0,1,2,... per partition."""
    nxt = {}
    for i, r in enumerate(recs):
        exp = nxt.get(r["partition"], 0)
        check(r["offset"] == exp, "partition %d: record %d acked at offset %s, expected %d" % (r["partition"], i, r["offset"], exp))
        nxt[r["partition"]] = exp + 1


def norm_headers(h):
    return [(k, bytes(v) if v is not None else None) for k, v in (h or [])]


def verify(want, got):
    """got: list of dicts partition/offset/key/value/headers/ts/ts_type(0=create)."""
    check(len(got) == len(want), "read back %d records, produced %d" % (len(got), len(want)))
    by_pos = {(w["partition"], w["offset"]): w for w in want}
    last = {}
    for w in want:
        last[w["partition"]] = min(last.get(w["partition"], w["offset"] - 1), w["offset"] - 1)
    for r in got:
        at = "at %d@%d" % (r["partition"], r["offset"])
        check(r["offset"] == last[r["partition"]] + 1, "partition %d: offset %d after %d" % (r["partition"], r["offset"], last[r["partition"]]))
        last[r["partition"]] = r["offset"]
        w = by_pos.get((r["partition"], r["offset"]))
        check(w is not None, "unexpected record " + at)
        check(r["key"] == w["key"], "key %r != %r %s" % (r["key"], w["key"], at))
        check(r["value"] == w["value"], "value %r != %r %s" % (r["value"], w["value"], at))
        check(r["ts"] == w["ts"], "timestamp %r != %r %s" % (r["ts"], w["ts"], at))
        check(r["ts_type"] == "create", "timestamp type %r %s" % (r["ts_type"], at))
        check(norm_headers(r["headers"]) == norm_headers(w["headers"]), "headers %r != %r %s" % (r["headers"], w["headers"], at))


def main(client, scenarios):
    """scenarios: ordered dict name -> fn(bootstrap) returning a detail string."""
    if len(sys.argv) < 2:
        print("usage: %s list | %s BOOTSTRAP [SCENARIO...]" % (sys.argv[0], sys.argv[0]), file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "list":
        for n in scenarios:
            print(n)
        return
    bootstrap = sys.argv[1]
    names = sys.argv[2:] or list(scenarios)
    failed = 0
    for n in names:
        fn = scenarios.get(n)
        try:
            if fn is None:
                raise AssertionError("unknown scenario")
            line = "PASS " + fn(bootstrap)
        except Skip as e:
            line = "SKIP %s" % e
        except Exception as e:  # noqa: BLE001
            failed += 1
            if os.environ.get("COMPAT_DEBUG"):
                traceback.print_exc()
            line = "FAIL %s: %s" % (type(e).__name__, str(e).replace("\n", " "))
        print("SCENARIO %s %s %s" % (client, n, line), flush=True)
    sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""Judge compat results against expected-failures.txt, print the matrix, optionally write MATRIX.md.

Used by run.sh; results are TSV lines: client, scenario, PASS|FAIL|SKIP, detail, seconds.
"""
import argparse
import datetime
import os
import sys

CLIENT_ORDER = ["java", "kafka-tools", "kcat", "confluent-python", "franz-go", "kafkajs", "kafka-python"]


def load(path):
    rows = []
    if path and os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            f = line.rstrip("\n").split("\t")
            if len(f) >= 3:
                rows.append(dict(client=f[0], scenario=f[1], status=f[2], detail=f[3] if len(f) > 3 else "", secs=f[4] if len(f) > 4 else ""))
    return rows


MUST_SAY = "must say:"


def load_expected(path):
    exp = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        exp[(parts[0], parts[1])] = parts[2] if len(parts) > 2 else ""
    return exp


def says_what_it_must(reason, detail):
    """An expected failure whose reason ends in `must say: TEXT` counts only if its detail
    contains TEXT: the scenario has to fail the way the broker means it to."""
    if MUST_SAY not in reason:
        return True
    return reason.split(MUST_SAY, 1)[1].strip() in detail


def key(r):
    c = r["client"]
    return (CLIENT_ORDER.index(c) if c in CLIENT_ORDER else 99, c)


def judge(rows, expected, target):
    """returns list of (row, verdict) with verdict in pass, FAIL, expected-fail, UNEXPECTED-PASS, skip"""
    out = []
    for r in rows:
        exp = target == "sluice" and (r["client"], r["scenario"]) in expected
        if r["status"] == "SKIP":
            v = "skip"
        elif r["status"] == "PASS":
            v = "UNEXPECTED-PASS" if exp else "pass"
        elif exp and says_what_it_must(expected[(r["client"], r["scenario"])], r["detail"]):
            v = "expected-fail"
        else:
            v = "FAIL"
        out.append((r, v))
    return out


def stable(rows):
    """keep the run's order within a client, clients in CLIENT_ORDER"""
    return sorted(rows, key=key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--expected", required=True)
    ap.add_argument("--expected-cluster", help="expected failures of cluster runs only, added to --expected's")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--wall", default="?")
    ap.add_argument("--write")
    ap.add_argument("--matrix")
    ap.add_argument("--err-dir", help="directory of <client>.<scenario>.err files, shown for unexpected results")
    a = ap.parse_args()
    rows = stable(load(a.results))
    single_expected = load_expected(a.expected)
    cluster_expected = dict(single_expected)
    if a.expected_cluster and os.path.exists(a.expected_cluster):
        cluster_expected.update(load_expected(a.expected_cluster))
    expected = cluster_expected if a.nodes > 1 else single_expected
    judged = judge(rows, expected, a.target)
    print()
    print("compat matrix: target=%s  (%d scenarios, wall %ss)" % (a.target, len(rows), a.wall))
    print("%-17s %-24s %-16s %5s  %s" % ("client", "scenario", "result", "secs", "detail"))
    for r, v in judged:
        d = r["detail"]
        if v == "expected-fail":
            d = "[%s] %s" % (expected[(r["client"], r["scenario"])], d)
        print("%-17s %-24s %-16s %5s  %s" % (r["client"], r["scenario"], v, r["secs"], d[:160]))
    bad = [(r, v) for r, v in judged if v in ("FAIL", "UNEXPECTED-PASS")]
    npass = sum(1 for _, v in judged if v == "pass")
    print("\n%d pass, %d expected-fail, %d skip, %d unexpected (FAIL or UNEXPECTED-PASS)" % (
        npass, sum(1 for _, v in judged if v == "expected-fail"), sum(1 for _, v in judged if v == "skip"), len(bad)))
    if a.write:
        os.makedirs(os.path.dirname(a.write), exist_ok=True)
        with open(a.write, "w", encoding="utf-8") as f:
            f.write("# compat results, target=%s, %s, wall %ss\n" % (a.target, datetime.date.today().isoformat(), a.wall))
            for r in rows:
                f.write("\t".join([r["client"], r["scenario"], r["status"], r["detail"], r["secs"]]) + "\n")
    if a.matrix:
        write_matrix(a.matrix, os.path.dirname(a.write or a.results), single_expected, cluster_expected)
    # CI logs are often read from the end: repeat each unexpected result last, with the end of
    # what the scenario printed to stderr.
    for r, v in bad:
        print("\nUNEXPECTED %s %s/%s on %s: %s" % (v, r["client"], r["scenario"], a.target, r["detail"][:500]))
        err = os.path.join(a.err_dir or "", "%s.%s.err" % (r["client"], r["scenario"]))
        if a.err_dir and os.path.exists(err):
            tail = open(err, encoding="utf-8", errors="replace").read().splitlines()[-25:]
            print("  stderr (last %d lines):" % len(tail))
            for line in tail:
                print("  | " + line[:300])
    print("%d unexpected results" % len(bad))
    sys.exit(1 if bad else 0)


def write_matrix(path, resdir, expected, cluster_expected):
    """MATRIX.md: the single-node runs (results/<target>.tsv) and, where recorded, the three-node
    cluster runs (results/<target>-cluster.tsv)."""
    single, ok_s, ok_k = table(resdir, "", expected)
    cluster, cok_s, cok_k = table(resdir, "-cluster", cluster_expected)
    lines = [
        "# Client compatibility matrix",
        "",
        "Generated by `compat/run.sh --write-matrix` (from `compat/results/*.tsv`); do not edit by hand.",
        "Each scenario is a small program using the real client library or tool; it checks results, not exit codes",
        "(every produced record read back with key, value, headers, timestamp, partition and per-partition offsets).",
        "",
        "**Compatibility figure: %d / %d** scenarios passing on sluice / scenarios passing on Apache Kafka"
        " (single node; on three nodes: %d / %d)." % (ok_s, ok_k, cok_s, cok_k),
        "",
        "## One node",
        "",
    ] + single + [
        "",
        "## Three nodes",
        "",
        "`compat/run.sh --nodes 3 --write-matrix`: the same scenarios against a three-node sluice cluster and a",
        "three-node Apache Kafka cluster; `leader-failover` (skipped on one node) kills the leader of the",
        "scenario's partition with SIGKILL while the client writes, then starts it again.",
        "",
    ] + cluster + ["", "Expected failures (sluice only) are listed in `compat/expected-failures.txt` (both) and",
                   "`compat/expected-failures-cluster.txt` (three nodes only).", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def table(resdir, suffix, expected):
    """(markdown lines, passing on both, passing on Kafka) for results/<target><suffix>.tsv."""
    res = {t: {(r["client"], r["scenario"]): r for r in load(os.path.join(resdir, t + suffix + ".tsv")) if not r["client"].startswith("#")}
           for t in ("sluice", "kafka")}
    heads = {}
    for t in res:
        p = os.path.join(resdir, t + suffix + ".tsv")
        heads[t] = open(p, encoding="utf-8").readline().strip("# \n") if os.path.exists(p) else "no results yet"
    keys = []
    for t in ("kafka", "sluice"):
        for k in res[t]:
            if k not in keys:
                keys.append(k)
    keys.sort(key=lambda k: (CLIENT_ORDER.index(k[0]) if k[0] in CLIENT_ORDER else 99, k[0]))
    ok_k = sum(1 for k in keys if res["kafka"].get(k, {}).get("status") == "PASS")
    ok_s = sum(1 for k in keys if res["sluice"].get(k, {}).get("status") == "PASS" and res["kafka"].get(k, {}).get("status") == "PASS")

    def cell(t, k):
        r = res[t].get(k)
        if r is None:
            return "–"
        if r["status"] == "PASS":
            return "pass"
        if r["status"] == "SKIP":
            return "skip"
        if t == "sluice" and k in expected:
            return "expected-fail"
        return "**FAIL**"

    lines = [
        "- sluice: %s" % heads["sluice"],
        "- kafka: %s" % heads["kafka"],
        "",
        "| client | scenario | sluice | Apache Kafka | sluice detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in keys:
        r = res["sluice"].get(k)
        d = ""
        if r is not None:
            d = r["detail"]
            if r["status"] != "PASS" and k in expected:
                d = "expected: %s — %s" % (expected[k], d)
        lines.append("| %s | %s | %s | %s | %s |" % (k[0], k[1], cell("sluice", k), cell("kafka", k), d.replace("|", "\\|")[:220]))
    return lines, ok_s, ok_k


if __name__ == "__main__":
    main()

"""Driver for prometheus_e2e.sh: sluice + Prometheus + load, then every dashboard and alert
expression evaluated through Prometheus's HTTP API.

Outcome per expression: ok (series with sane values), PENDING (needs a subsystem that is not
there yet, with the reason) or FAIL. Exit status 1 on any FAIL.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path



REPO = Path(sys.argv[1])
LOAD_SECONDS = int(os.environ.get("LOAD_SECONDS", "25"))
RATE_WINDOW = "15s"  # stands in for $__rate_interval with a 1 s scrape interval
TOPIC = "e2e"
LAG_TOPIC = "e2e-lag"  # its own topic, so TOPIC's counters equal what drive_load produced
PARTITIONS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sluice(workdir):
    args = [os.environ["SLUICE_BIN"], "serve",
            "--override", "log.dirs=%s" % (workdir / "data"),
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", "metrics.listener=127.0.0.1:0",
            # Exercise the fsync histogram: a flush every 200 records.
            "--override", "log.flush.interval.messages=200"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "SLUICE_LOG": "warn"})
    ports = {}
    ready = threading.Event()
    log = open(workdir / "sluice.stderr.log", "w")

    def pump():
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace")
            log.write(line)
            log.flush()
            m = re.search(r"sluice metrics listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                ports["metrics"] = int(m.group(1))
            m = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
            if m:
                ports["kafka"] = int(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(20) or "kafka" not in ports or "metrics" not in ports:
        proc.kill()
        sys.exit("sluice did not start (ports seen: %r)" % ports)
    return proc, ports


def start_prometheus(workdir, metrics_port):
    port = free_port()
    rules = workdir / "alerts.yml"
    shutil.copy(REPO / "grafana" / "alerts.yml", rules)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files:\n  - %s\n"
        "scrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
        % (rules, metrics_port))
    log = open(workdir / "prometheus.log", "w")
    proc = subprocess.Popen(["prometheus", "--config.file=%s" % cfg, "--storage.tsdb.path=%s" % (workdir / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % port],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, "http://127.0.0.1:%d" % port


def api(base, path, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def wait_for_target(base, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            t = api(base, "/api/v1/targets")["data"]["activeTargets"]
            if t and t[0]["health"] == "up":
                return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit("Prometheus never scraped sluice successfully")


def drive_load(bootstrap, seconds):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-assign", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    # One fetch far past the end: OFFSET_OUT_OF_RANGE feeds the error panels.
    stray = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-stray", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
    stray.assign([TopicPartition(TOPIC, 0, 10**9)])
    produced = consumed = 0
    end = time.time() + seconds
    while time.time() < end:
        # About 2,000 records/s: enough for every rate to be non-zero, little enough for a
        # debug build on two cores.
        tick = time.time()
        for i in range(100):
            try:
                producer.produce(TOPIC, key=str(produced % 17).encode(), value=b"x" * 200)
                produced += 1
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        for _ in range(50):
            m = consumer.poll(0.01)
            if m is None:
                break
            if not m.error():
                consumed += 1
        stray.poll(0)
        time.sleep(max(0.0, 0.05 - (time.time() - tick)))
    producer.flush(10)
    deadline = time.time() + 10
    while consumed < produced and time.time() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            consumed += 1
    consumer.close()
    stray.close()
    return produced, consumed


def advertised_api_keys(port):
    """API keys the broker advertises (raw ApiVersions v0, so no client library guesses)."""
    import struct
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        body = struct.pack(">hhih", 18, 0, 1, -1)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = s.recv(size, socket.MSG_WAITALL)
    _, err, n = struct.unpack(">ihi", data[:10])
    return {struct.unpack(">hhh", data[10 + 6 * i:16 + 6 * i])[0] for i in range(n)}


def lag_scenario(base, bootstrap, results):
    """A subscribed, committing consumer: lag must rise while it is stopped and fall after."""
    from confluent_kafka import Consumer, Producer
    group = "e2e-lag"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 500})
    consumer.subscribe([LAG_TOPIC])

    def consume_for(seconds):
        end = time.time() + seconds
        while time.time() < end:
            consumer.poll(0.1)

    def produce_for(seconds):
        end = time.time() + seconds
        while time.time() < end:
            for _ in range(50):
                producer.produce(LAG_TOPIC, value=b"y" * 100)
            producer.poll(0.05)
        producer.flush(10)

    def lag():
        r = api(base, "/api/v1/query", query='sum(sluice_consumer_group_lag_records{group="%s"})' % group)["data"]["result"]
        return float(r[0]["value"][1]) if r else None

    produce_for(2)  # a backlog to catch up with
    consume_for(15)  # join, catch up with the backlog, commit
    time.sleep(3)
    caught_up = lag()
    consumer.pause(consumer.assignment())
    produce_for(8)
    time.sleep(3)
    stopped = lag()
    consumer.resume(consumer.assignment())
    consume_for(10)
    time.sleep(3)
    resumed = lag()
    consumer.close()
    ok = caught_up is not None and stopped is not None and resumed is not None and stopped > caught_up and resumed < stopped
    results.append(("ok" if ok else "FAIL", "lag rises when the consumer stops and falls when it resumes", "lag",
                    "caught up %r, stopped %r, resumed %r" % (caught_up, stopped, resumed)))


def substitute(expr):
    return (expr.replace("$__rate_interval", RATE_WINDOW)
                .replace('"$instance"', '".*"').replace('"$topic"', '".*"').replace('"$group"', '".*"'))


def dashboard_exprs():
    out = []
    for f in sorted((REPO / "grafana" / "dashboards").glob("*.json")):
        d = json.loads(f.read_text())
        for p in d["panels"]:
            for t in p["targets"]:
                out.append(("%s / %s" % (f.stem, p["title"]), substitute(t["expr"])))
    return out


def alert_rules():
    try:
        import yaml as y
        doc = y.safe_load((REPO / "grafana" / "alerts.yml").read_text())
        return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]
    except ImportError:
        text = (REPO / "grafana" / "alerts.yml").read_text()
        return re.findall(r"- alert: (\S+)\n(?:\s+#.*\n)*\s+expr: (.+)", text)


def signal_of(expr):
    """The alert's signal without its threshold: `x > 0.5` -> `x`; `a < b` -> `a - b`."""
    s = re.sub(r"\s*(>=|<=|==|!=|>|<)\s*-?[0-9.]+(?![0-9A-Za-z_])", "", expr)
    return re.sub(r"\s(<|>)\s", " - ", s)


# Series that only exist once the group coordinator provides a GroupsView.
GROUP_METRIC = re.compile(r"sluice_consumer_group|sluice_consumer_groups|sluice_metrics_omitted_groups")
# Alert signals whose series only appear once the bad thing happened, with the broader
# expression that must exist instead.
ABSENT_WHEN_HEALTHY = {
    "alert SluiceStorageErrors (signal)": "sluice_request_errors_total",
    # A single node has no followers and its ISR never changes: the counters appear with the
    # first ISR change and the lag with the first follower (tests/clients/test_replication.py
    # checks them on a cluster).
    "alert SluiceIsrFlapping (signal)": "sluice_partition_isr_size",
    "sluice-topics / ISR shrinks / expands per second": "sluice_partition_isr_size",
    "sluice-topics / Follower lag (offsets behind the leader)": "sluice_partition_isr_size",
}
# Signals that may legitimately be negative.
MAY_BE_NEGATIVE = re.compile(r"lag_trend")


def check(base, label, expr, groups_present, results):
    try:
        r = api(base, "/api/v1/query", query=expr)
    except Exception as e:  # an HTTP 400 means the expression does not parse
        results.append(("FAIL", label, expr, "query failed: %s" % e))
        return
    series = r["data"]["result"]
    if not series and label in ABSENT_WHEN_HEALTHY:
        broader = ABSENT_WHEN_HEALTHY[label]
        present = api(base, "/api/v1/query", query=broader)["data"]["result"]
        results.append(("ok" if present else "FAIL", label, expr,
                        "absent while healthy, as expected; %s has %d series" % (broader, len(present))))
        return
    if not series:
        if GROUP_METRIC.search(expr) and not groups_present:
            results.append(("PENDING", label, expr, "needs consumer groups (GroupsView not registered in this build)"))
        else:
            results.append(("FAIL", label, expr, "no series"))
        return
    values = [float(s["value"][1]) for s in series]
    if "histogram_quantile" in expr:
        # A quantile of an API that saw no request in the window is NaN (0/0): allowed per
        # series, as long as some series carries a real value.
        if all(math.isnan(v) for v in values):
            results.append(("FAIL", label, expr, "every quantile is NaN"))
            return
        values = [v for v in values if not math.isnan(v)]
    bad = [v for v in values if math.isnan(v) or math.isinf(v) or (v < 0 and not MAY_BE_NEGATIVE.search(expr))]
    if bad:
        results.append(("FAIL", label, expr, "insane values %r" % bad[:5]))
    else:
        results.append(("ok", label, expr, "%d series, e.g. %g" % (len(values), values[0])))


class DiskProbe:
    """The disk's own fdatasync latency while the test runs: a 4 KiB append and fdatasync of a
    scratch file next to the broker's log every 50 ms, in a thread. SluiceSlowFsync is right to
    fire when the disk itself is slow (a shared CI machine writing back a build), so its quiet
    check holds the broker to the disk it was given."""

    def __init__(self, workdir):
        self.path, self.samples, self.stop_flag = workdir / "fsync-probe", [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while not self.stop_flag.wait(0.05):
                os.write(fd, b"\0" * 4096)
                t = time.monotonic()
                os.fdatasync(fd)
                self.samples.append(time.monotonic() - t)
        finally:
            os.close(fd)

    def p99(self):
        self.stop_flag.set()
        self.thread.join()
        s = sorted(self.samples)
        return s[min(len(s) - 1, int(len(s) * 0.99))] if s else 0.0


def main():
    work = Path(tempfile.mkdtemp(prefix="sluice-prom-e2e-"))
    sluice, ports = start_sluice(work)
    prom, base = start_prometheus(work, ports["metrics"])
    try:
        wait_for_target(base)
        print("sluice kafka=127.0.0.1:%d metrics=127.0.0.1:%d, prometheus %s, workdir %s"
              % (ports["kafka"], ports["metrics"], base, work))
        results = []
        disk = DiskProbe(work)
        keys = advertised_api_keys(ports["kafka"])
        groups_supported = {10, 11, 8, 9} <= keys  # FindCoordinator, JoinGroup, OffsetCommit, OffsetFetch
        # The lag scenario runs first, so the rate windows evaluated below cover drive_load's
        # steady traffic; the group and its lag series stay for the dashboard checks.
        if groups_supported:
            lag_scenario(base, "127.0.0.1:%d" % ports["kafka"], results)
        try:
            produced, consumed = drive_load("127.0.0.1:%d" % ports["kafka"], LOAD_SECONDS)
        finally:
            if sluice.poll() is not None:
                print("sluice exited with %r; its stderr:\n%s" % (sluice.returncode, (work / "sluice.stderr.log").read_text()[-4000:]))
        print("load: produced %d, consumed %d records" % (produced, consumed))
        time.sleep(3)  # let a few scrapes land after the load
        groups_present = bool(api(base, "/api/v1/query", query="sluice_consumer_groups")["data"]["result"])
        if groups_supported and not groups_present:
            results.append(("FAIL", "group metrics exported", "sluice_consumer_groups",
                            "the broker serves consumer groups but exports no group metrics: register a GroupsView"))

        # Concrete values: the broker's numbers agree with what the clients did.
        def scalar(q):
            r = api(base, "/api/v1/query", query=q)["data"]["result"]
            return float(r[0]["value"][1]) if r else None
        for label, q, want in [
            ("records in == produced", 'sum(sluice_topic_records_in_total{topic="%s"})' % TOPIC, produced),
            ("log end offsets == produced", 'sum(sluice_partition_log_end_offset{topic="%s"})' % TOPIC, produced),
            ("high watermarks == produced", 'sum(sluice_partition_high_watermark{topic="%s"})' % TOPIC, produced),
            ("records out >= consumed", None, None),
        ]:
            if q is None:
                got = scalar('sum(sluice_topic_records_out_total{topic="%s"})' % TOPIC)
                results.append(("ok" if got is not None and got >= consumed else "FAIL", label, "records_out", "%r vs %d" % (got, consumed)))
                continue
            got = scalar(q)
            results.append(("ok" if got == want else "FAIL", label, q, "got %r want %r" % (got, want)))
        got = scalar('sum(rate(sluice_topic_records_in_total{topic="%s"}[%s]))' % (TOPIC, RATE_WINDOW))
        results.append(("ok" if got and got > 0 else "FAIL", "produce rate > 0 during load", "rate", repr(got)))

        for label, expr in dashboard_exprs():
            check(base, label, expr, groups_present, results)
        disk_p99 = disk.p99()
        print("the disk's own fdatasync p99 during the test: %.1f ms (%d samples)" % (disk_p99 * 1e3, len(disk.samples)))
        for name, expr in alert_rules():
            check(base, "alert %s (signal)" % name, signal_of(expr), groups_present, results)
            try:
                r = api(base, "/api/v1/query", query=expr)
                firing = r["data"]["result"]
                if firing and name == "SluiceSlowFsync" and disk_p99 > 0.1:
                    results.append(("ok", "alert %s fires: the disk itself is slow" % name, expr,
                                    "%d series; the test's own fdatasync p99 was %.0f ms" % (len(firing), disk_p99 * 1e3)))
                    continue
                results.append(("ok" if not firing else "FAIL", "alert %s quiet on a healthy broker" % name, expr,
                                "%d series" % len(firing)))
            except Exception as e:
                results.append(("FAIL", "alert %s" % name, expr, "query failed: %s" % e))
        rules = api(base, "/api/v1/rules")["data"]["groups"]
        unhealthy = [r["name"] for g in rules for r in g["rules"] if r.get("health") != "ok"]
        results.append(("ok" if rules and not unhealthy else "FAIL", "Prometheus loaded alerts.yml", "rules",
                        "unhealthy: %r" % unhealthy))
        if not groups_supported:
            results.append(("PENDING", "lag rises when the consumer stops and falls when it resumes", "-",
                            "needs consumer groups: this build does not advertise JoinGroup/OffsetCommit"))

        width = max(len(r[1]) for r in results)
        for status, label, expr, note in results:
            print("%-7s %-*s  %s" % (status, width, label, note))
        fails = [r for r in results if r[0] == "FAIL"]
        pending = [r for r in results if r[0] == "PENDING"]
        print("\n%d ok, %d pending, %d failed" % (len(results) - len(fails) - len(pending), len(pending), len(fails)))
        for status, label, expr, note in fails:
            print("FAILED: %s\n  expr: %s\n  %s" % (label, expr, note))
        return 1 if fails else 0
    finally:
        prom.terminate()
        sluice.terminate()
        for p in (prom, sluice):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("KEEP_WORKDIR") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

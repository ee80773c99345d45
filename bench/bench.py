#!/usr/bin/env python3
"""sluice vs Apache Kafka, side by side. Run through bench/run.sh (= make bench).

Every knob is an environment variable (see bench/README.md). Writes bench/results.json
(raw per-round figures) and then calls bench/report.py for RESULTS.md and results.png.
"""
import base64, glob, json, os, re, resource, shutil, signal, socket, statistics, struct, subprocess
import sys, threading, time, datetime, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Where results.json goes (report.py writes RESULTS.md and results.png next to it).
OUT = os.path.abspath(os.environ.get("BENCH_OUT_DIR", HERE))
FULL = os.environ.get("BENCH_FULL", "0") == "1"


def env(name, smoke, full):
    v = os.environ.get(name)
    if v is not None and v != "":
        return type(smoke)(v)
    return full if FULL else smoke


CFG = {
    "size": "full" if FULL else os.environ.get("BENCH_SIZE_NAME", "smoke"),
    "rounds": env("BENCH_ROUNDS", 2, 2),
    "order": os.environ.get("BENCH_ORDER", "sluice,kafka").split(","),
    "records": env("BENCH_RECORDS", 50000, 2000000),            # per produce workload
    "record_size": env("BENCH_RECORD_SIZE", 1024, 1024),
    "lat_rate": env("BENCH_LAT_RATE", 2000, 2000),              # records/s, well below saturation
    "lat_secs": env("BENCH_LAT_SECS", 10.0, 20.0),             # per latency run
    "lat_runs": env("BENCH_LAT_RUNS", 1, 3),                    # latency runs per session (median taken)
    "lat_warmup": env("BENCH_LAT_WARMUP", 5.0, 60.0),           # seconds at the rate before the first run counts
    "load_lat_secs": env("BENCH_LOAD_LAT_SECS", 5.0, 10.0),    # latency run under load (one per session)
    "load_warmup": env("BENCH_LOAD_WARMUP", 3.0, 20.0),         # seconds at the rate, without load, first
    "load_records": env("BENCH_LOAD_RECORDS", 40000000, 40000000),  # the load producer's, stopped when the run ends
    "scale_partitions": env("BENCH_SCALE_PARTITIONS", 1000, 10000),
    "scale_per_topic": env("BENCH_SCALE_PER_TOPIC", 100, 100),
    "broker_cpus": os.environ.get("BENCH_BROKER_CPUS", "0" if os.cpu_count() >= 2 else "0"),
    "client_cpus": os.environ.get("BENCH_CLIENT_CPUS", "1" if os.cpu_count() >= 2 else "0"),
    "kafka_heap": os.environ.get("BENCH_KAFKA_HEAP", "-Xmx1G -Xms1G"),
    "dd_mib": env("BENCH_DD_MIB", 256, 2048),
    "dd_files": env("BENCH_DD_FILES", 3, 4),                     # page-cache floor: files of dd_mib
    "workloads": os.environ.get("BENCH_WORKLOADS", "produce,pyproduce,consume,durable,latency,loaded,recovery,scale,buffered,pcreads,idlepoll").split(","),
    "perf": os.environ.get("BENCH_PERF", "0") == "1",
}
WORK = os.environ.get("BENCH_WORK", os.path.join(ROOT, ".cache", "bench", "work"))
# Below the ephemeral range (32768-60999 by default): a client or the readiness probe reconnecting to
# a port in that range while no broker listens can self-connect and hold the port.
PORT = int(os.environ.get("BENCH_PORT", "27192"))
RDK = os.environ["BENCH_RDKBENCH"]
FETCHBENCH = os.environ["BENCH_FETCHBENCH"]  # raw Fetch loop (bench/fetchbench.c)
SLUICE = os.environ["BENCH_SLUICE"]          # a private copy of the binary, taken by run.sh
PY = sys.executable
KAFKA_LIBS = os.environ["BENCH_KAFKA_LIBS"]
CLK = os.sysconf("SC_CLK_TCK")
BOOT = f"127.0.0.1:{PORT}"


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def pin(cpus):
    return ["taskset", "-c", cpus] if shutil.which("taskset") else []


# ---------------------------------------------------------------- process facts
def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime + stime, all threads


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0  # MiB
    return None


class RssSampler:
    """Samples VmRSS of pid every 50 ms; peak() since the last reset()."""
    def __init__(self, pid):
        self.pid, self.max, self.stop = pid, 0.0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                self.max = max(self.max, proc_status(self.pid, "VmRSS") or 0)
            except OSError:
                pass
            time.sleep(0.05)

    def reset(self):
        self.max = 0.0

    def close(self):
        self.stop = True


def kafka_random_uuid():
    """Kafka's text form of a random uuid, never starting with '-' (as Uuid.randomUuid), since
    kafka-storage would take such a cluster id for a flag."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


def apiversions_ok(port, timeout=0.5):
    """One ApiVersions v0 round trip: the broker is serving requests."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            cid = b"bench"
            hdr = struct.pack(">hhih", 18, 0, 7, len(cid)) + cid
            s.sendall(struct.pack(">i", len(hdr)) + hdr)
            n = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            body = b""
            while len(body) < n:
                chunk = s.recv(n - len(body))
                if not chunk:
                    return False
                body += chunk
            corr, err = struct.unpack(">ih", body[:6])
            return corr == 7 and err == 0
    except (OSError, struct.error):
        return False


# ---------------------------------------------------------------- client runs
def run_client(cmd, timeout=1800, cpus=None):
    """Run a load generator pinned to the client CPUs; returns (rc, out, err, wall, cpu)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(pin(cpus or CFG["client_cpus"]) + cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -9, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")) + "\n[timeout]"
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return rc, out, err, wall, cpu


def last_json(out):
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    return None


def tool(name):
    return [os.path.join(ROOT, "compat", "kafka", "bin", name)]


def first_error(err):
    lines = [l for l in err.splitlines() if re.search(r"ERROR|Exception|error|FAIL|timeout", l)]
    return (lines[0] if lines else err.strip().splitlines()[-1] if err.strip() else "")[:400]


# ---------------------------------------------------------------- brokers
class Broker:
    name = "?"

    def __init__(self, data):
        self.data, self.proc, self.pid = data, None, None

    def start(self, fresh):
        """Start pinned; returns seconds from exec to the first ApiVersions answer."""
        if fresh:
            shutil.rmtree(self.data, ignore_errors=True)
            os.makedirs(self.data)
            self.prepare()
        self.errlog = open(os.path.join(WORK, f"{self.name}.log"), "ab")
        wait_bindable()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(pin(CFG["broker_cpus"]) + self.cmd(), stdin=subprocess.DEVNULL,
                                     stdout=self.errlog, stderr=self.errlog, start_new_session=True)
        self.pid = self.proc.pid
        while not apiversions_ok(PORT, 0.5):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during startup, see {self.errlog.name}")
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"{self.name} did not serve within 180s")
            time.sleep(0.005)
        return time.monotonic() - t0

    def prepare(self):
        pass

    def kill9(self):
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        wait_port_free()


class Sluice(Broker):
    name = "sluice"
    extra = []  # further --override arguments (the buffered session)

    def cmd(self):
        # The group settings match the Kafka config below, so the consumer-group runs compare
        # like with like (Kafka's built-in default initial rebalance delay is 3 s on both).
        return [SLUICE, "serve", "--override", f"log.dirs={self.data}",
                "--override", f"listeners=PLAINTEXT://{BOOT}",
                "--override", "metrics.listener=none",
                "--override", "group.initial.rebalance.delay.ms=0",
                "--override", "offsets.topic.num.partitions=5"] + self.extra


class Kafka(Broker):
    name = "kafka"

    def props(self):
        return os.path.join(WORK, "kafka-server.properties")

    def prepare(self):
        cport = free_port()
        lines = [
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{cport}",
            f"listeners=PLAINTEXT://{BOOT},CONTROLLER://127.0.0.1:{cport}",
            f"advertised.listeners=PLAINTEXT://{BOOT}",
            "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.data}", "num.partitions=1",
            "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=5",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=5",
            "share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
        ]
        with open(self.props(), "w") as f:
            f.write("\n".join(lines) + "\n")
        cid = kafka_random_uuid()
        subprocess.run([os.path.join(ROOT, "compat", "kafka", "run-class.sh"), "kafka.tools.StorageTool", "format",
                        "-t", cid, "-c", self.props()], check=True, capture_output=True)

    def cmd(self):
        return (["java"] + CFG["kafka_heap"].split() +
                ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                 "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
                 f"-Dkafka.logs.dir={WORK}/kafka-logs",
                 f"-Dlog4j2.configurationFile={ROOT}/compat/kafka/log4j2-server.properties",
                 "-cp", f"{KAFKA_LIBS}/*", "kafka.Kafka", self.props()])


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_bindable(secs=30):
    for _ in range(int(secs * 10)):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", PORT))
            return
        except OSError:
            time.sleep(0.1)
        finally:
            s.close()


def wait_port_free():
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", PORT), 0.2).close()
            time.sleep(0.1)
        except OSError:
            return


# ---------------------------------------------------------------- admin helpers
def admin_run(args, timeout=900):
    rc, out, err, wall, cpu = run_client([PY, os.path.join(HERE, "admin.py"), BOOT] + args, timeout=timeout)
    j = last_json(out)
    if rc != 0 or not j:
        raise RuntimeError(f"admin {args[0]} failed: " + (first_error(err) or f"exit {rc}"))
    return j


def create_topics(specs, timeout=900):
    """specs: [(name, partitions)] or [(name, partitions, "k=v,k=v")]; returns seconds until
    every partition has a leader."""
    return admin_run(["create"] + [":".join(str(x) for x in s) for s in specs], timeout)["secs"]


def latest_offsets(topic, parts):
    # right after a restart Kafka may answer UNKNOWN_LEADER_EPOCH for a moment: retry for 30 s
    deadline = time.monotonic() + 30
    while True:
        try:
            return admin_run(["latest", topic, str(parts)], 120)["sum"]
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# ---------------------------------------------------------------- workloads
def produce_cmd(toolname, topic, acks, n):
    size = CFG["record_size"]
    if toolname == "perftest":
        props = ["acks=all", "enable.idempotence=true"] if acks == "all" else ["acks=1", "enable.idempotence=false"]
        return tool("kafka-producer-perf-test.sh") + [
            "--topic", topic, "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={BOOT}", *props]
    if toolname == "rdk":
        props = ["-X", "acks=all", "-X", "enable.idempotence=true"] if acks == "all" else ["-X", "acks=1"]
        return [RDK, "produce", "-b", BOOT, "-t", topic, "-n", str(n), "-s", str(size), *props]
    if toolname == "py":
        return [PY, os.path.join(HERE, "pyproduce.py"), BOOT, topic, str(n), str(size), acks]
    raise ValueError(toolname)


PERF_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                     r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def parse_produce(toolname, rc, out, err):
    if toolname == "perftest":
        m = None
        for line in out.splitlines():
            mm = PERF_RE.search(line)
            if mm:
                m = mm
        if rc != 0 or not m:
            return {"error": first_error(err + out) or f"exit {rc}"}
        return {"records": int(m.group(1)), "rps": float(m.group(2)), "mbps": float(m.group(3)),
                "client_p50_ms": float(m.group(7)), "client_p99_ms": float(m.group(9))}
    j = last_json(out)
    if rc != 0 or not j:
        return {"error": first_error(err + out) or f"exit {rc}"}
    return j


def timed_read(b, rnd, res, sampler, key, cmd):
    """One catch-up read by a load generator that prints a JSON line with "bytes": its result plus
    broker CPU (total and per GiB read), client CPU and wall time, and peak broker RSS, stored
    under `key`."""
    sampler.reset()
    cpu0 = proc_cpu_s(b.pid)
    rc, out, err, wall, ccpu = run_client(cmd, timeout=900)
    j = last_json(out) if rc == 0 else None
    r = j if j else {"error": first_error(err) or f"exit {rc}"}
    r.update({"broker_cpu_s": proc_cpu_s(b.pid) - cpu0, "client_cpu_s": ccpu, "client_wall_s": wall,
              "rss_peak_mib": sampler.max})
    if r.get("bytes"):
        r["broker_cpu_s_per_gib"] = r["broker_cpu_s"] / (r["bytes"] / 2**30)
    res[key] = r
    log(b.name, rnd, key, r)
    return r


def produce_run(b, rnd, res, sampler, toolname, acks, topic, parts, key, perf_out=None, records=None, config=None):
    """One produce run of `records` (default: the configured count) into `topic`, new with `parts`
    partitions and topic `config` ("k=v,k=v") if given: the tool's result plus broker CPU (total
    and per GiB), client CPU and wall time and peak broker RSS, stored under `key`. With
    `perf_out`, perf records the broker meanwhile."""
    n, size = records or CFG["records"], CFG["record_size"]
    create_topics([(topic, parts, config)] if config else [(topic, parts)])
    cpu0 = proc_cpu_s(b.pid)
    sampler.reset()
    perf = None
    if perf_out:
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-p", str(b.pid), "-o", perf_out],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rc, out, err, wall, ccpu = run_client(produce_cmd(toolname, topic, acks, n))
    if perf:
        perf.send_signal(signal.SIGINT); perf.wait()
    cpu = proc_cpu_s(b.pid) - cpu0
    r = parse_produce(toolname, rc, out, err)
    r.update({"broker_cpu_s": cpu, "client_cpu_s": ccpu, "client_wall_s": wall, "rss_peak_mib": sampler.max})
    if config:
        r["topic_config"] = config
    if "error" not in r:
        r["broker_cpu_s_per_gib"] = cpu / (r.get("records", n) * size / 2**30)
    res[key] = r
    log(b.name, rnd, key, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    return r


def host_steal_s():
    """CPU time the hypervisor gave to others while this guest wanted to run, all CPUs, since boot."""
    ticks = cpu_ticks()
    return ticks[7] / os.sysconf("SC_CLK_TCK") if len(ticks) > 7 else 0.0


LAT_KEYS = ("mean_ms", "p50_ms", "p99_ms", "p999_ms", "max_ms")


def latency_cmd(topic, secs, warmup):
    return [RDK, "latency", "-b", BOOT, "-t", topic, "-r", str(CFG["lat_rate"]), "-d", str(secs), "-w", str(warmup),
            "-s", str(CFG["record_size"]), "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=0"]


def latency_run(b, rnd, res, sampler, topic, key, count=None, first_warmup=None, secs=None):
    """End-to-end latency at the fixed rate on `topic`, new with one partition, stored under `key`.

    CFG["lat_runs"] runs of CFG["lat_secs"] each, kept under "runs" with the host steal time during
    each; the percentiles stored beside them are the session's medians, for reading results.json (the
    report takes its median over the runs of all rounds). On a shared VM a burst of steal (the
    hypervisor running someone else) moves a whole run's p99; a median over runs keeps one such run
    from deciding the figure, and the steal figures show which runs it hit. The first run sends at the rate
    for CFG["lat_warmup"] seconds before it counts: Kafka's p99 at this rate falls for a minute or two
    of it (its JIT compiling the paths of one-record batches), after the produce runs. `count`
    (runs), `first_warmup` and `secs` override those settings."""
    create_topics([(topic, 1)])
    sampler.reset()
    runs = []
    cpu0, t0 = proc_cpu_s(b.pid), time.monotonic()
    for i in range(count or CFG["lat_runs"]):
        steal0 = host_steal_s()
        warmup = (CFG["lat_warmup"] if first_warmup is None else first_warmup) if i == 0 else 1
        rc, out, err, wall, ccpu = run_client(latency_cmd(topic, secs or CFG["lat_secs"], warmup))
        j = last_json(out)
        run = j if (j and rc == 0) else {"error": first_error(err) or f"exit {rc}", **(j or {})}
        run["host_steal_s"] = round(host_steal_s() - steal0, 2)
        runs.append(run)
        log(b.name, rnd, key, "run", run)
        if "error" in run:
            break
    # What the broker spent meanwhile (warm-up included), per second: with idle polling on, its
    # spinners' time shows here.
    r = {"runs": runs, "host_steal_s": round(sum(x["host_steal_s"] for x in runs), 2),
         "broker_cpu_s_per_s": (proc_cpu_s(b.pid) - cpu0) / (time.monotonic() - t0)}
    failed = [x for x in runs if "error" in x]
    if failed:
        r["error"] = failed[0]["error"]
    else:
        for k in LAT_KEYS:
            r[k] = statistics.median(x[k] for x in runs)
        for k in ("sent", "received", "measured", "delivery_failed"):
            r[k] = sum(x.get(k, 0) for x in runs)
    r["rss_peak_mib"] = sampler.max
    res[key] = r
    log(b.name, rnd, key, {k: v for k, v in r.items() if k != "runs"})
    return r


def catch_up_reads(topic, n):
    """The catch-up reads of `n` records of a 16-partition `topic`: (key, command) pairs."""
    return (("rdk/p16", [RDK, "consume", "-b", BOOT, "-t", topic, "-n", str(n)]),
            # The same read without a client library: the broker's ceiling (rdkbench saturates its CPU first).
            ("fetch/p16", [FETCHBENCH, "-b", BOOT, "-t", topic, "-p", "16", "-n", str(n)]))


def session_main(b, rnd, res, perf_dir):
    """Fresh broker: start, idle RSS, produce matrix, consume, latency, kill -9 + recovery."""
    n, size = CFG["records"], CFG["record_size"]
    res["start_s"] = b.start(fresh=True)
    time.sleep(2)
    res["rss_idle_mib"] = proc_status(b.pid, "VmRSS")
    sampler = RssSampler(b.pid)
    wl = CFG["workloads"]
    produced_bytes = 0
    tools = [t for t in ("perftest", "rdk", "py") if (t != "py" and "produce" in wl) or (t == "py" and "pyproduce" in wl)]
    for toolname in tools:
        for acks in ("1", "all"):
            for parts in (1, 16):
                if toolname == "py" and (acks != "1" or parts != 16):
                    continue  # confluent-kafka-python only to compare load generators
                perf = None
                if CFG["perf"] and b.name == "sluice" and toolname == "rdk" and acks == "all" and parts == 16:
                    perf = os.path.join(perf_dir, f"perf-r{rnd}.data")
                r = produce_run(b, rnd, res, sampler, toolname, acks, f"p-{toolname}-a{acks}-p{parts}", parts,
                                f"produce/{toolname}/acks={acks}/p{parts}", perf)
                produced_bytes += r.get("records", n) * size if "error" not in r else 0
    res["rss_load_peak_mib"] = max([v.get("rss_peak_mib", 0) for k, v in res.items()
                                    if k.startswith("produce/") and isinstance(v, dict)] or [0])
    if "consume" in wl and "produce" in wl:
        # The produce matrix leaves gigabytes being written back. The first consumer group makes
        # either broker fsync (sluice creates __consumer_offsets, Kafka's controller appends to its
        # metadata log), and a device flush behind that backlog took 0-5 s in the same session, so
        # the group figure measured the disk queue. Drain it first, outside the timings, for both.
        t0 = time.monotonic()
        subprocess.run(["sync"], check=False)
        log(b.name, rnd, "sync before consume", round(time.monotonic() - t0, 2))
        topic = "p-rdk-a1-p16"
        reads = catch_up_reads(topic, n)
        for key, cmd in reads:
            timed_read(b, rnd, res, sampler, "consume/" + key, cmd)
        rc, out, err, wall, ccpu = run_client(tool("kafka-consumer-perf-test.sh") + [
            "--bootstrap-server", BOOT, "--topic", topic, "--num-records", str(n), "--timeout", "30000",
            "--hide-header"], timeout=300)
        r = {"error": first_error(err + out) or f"exit {rc}"}
        for line in out.splitlines():
            parts_ = [p.strip() for p in line.split(",")]
            if len(parts_) >= 10:
                try:
                    r = {"mbps": float(parts_[3]), "rps": float(parts_[5]), "records": int(float(parts_[4])),
                         "rebalance_ms": float(parts_[6]), "fetch_mbps": float(parts_[8])}
                except ValueError:
                    pass
        if "records" in r and r["records"] < n:
            r = {"error": f"consumed {r['records']} of {n} records; " + first_error(err + out)}
        r.update({"client_cpu_s": ccpu, "client_wall_s": wall})
        res["consume/perftest/p16"] = r
        log(b.name, rnd, "consume/perftest/p16", r)
        # The reads above find Kafka's log in the page cache, where its appends left it, and
        # sluice's directly appended log on the disk. The same reads once the page cache is
        # dropped: a catch-up of data that is no longer in memory, the same for both.
        for key, cmd in reads:
            if not drop_page_cache():
                res["consume-cold/" + key] = {"error": "cannot write /proc/sys/vm/drop_caches (needs root)"}
                continue
            timed_read(b, rnd, res, sampler, "consume-cold/" + key, cmd)
    if "durable" in wl:
        # acks=all answered only once the data is fsynced, two ways:
        # - "durable": sluice's flush.acks.all against Kafka's way to the same guarantee,
        #   flush.messages=1 (an fsync per append);
        # - "durable-fm": flush.messages=1 on both, the setting a Kafka user brings along (sluice
        #   answers the append after a group-commit fsync, Kafka fsyncs inside each append).
        # A quarter of the produce size each, so the log at the kill -9 below grows little.
        for variant, config in (("durable", "flush.acks.all=true" if b.name == "sluice" else "flush.messages=1"),
                                ("durable-fm", "flush.messages=1")):
            produce_run(b, rnd, res, sampler, "rdk", "all", f"{variant}-p16", 16, f"produce/{variant}/acks=all/p16",
                        records=max(1, n // 4), config=config)
    if "latency" in wl:
        latency_run(b, rnd, res, sampler, "lat", "latency")
    sampler.close()
    res["rss_hwm_mib"] = proc_status(b.pid, "VmHWM")
    res["produced_gib"] = produced_bytes / 2**30
    if "recovery" in wl:
        du = subprocess.run(["du", "-sb", b.data], capture_output=True, text=True).stdout.split()
        res["recovery_log_gib"] = int(du[0]) / 2**30 if du else None
        b.kill9()
        try:
            log_at = os.path.getsize(b.errlog.name)  # the session's start opened it
            res["recovery_s"] = b.start(fresh=False)
            if b.name == "sluice":
                res["recovery_opened_logs"] = opened_logs_line(b.errlog.name, log_at)
            if "produce" in wl:
                got = latest_offsets("p-rdk-a1-p16", 16)
                res["recovery_check"] = "ok" if got == n else f"latest offsets sum {got} != {n}"
            log(b.name, rnd, "recovery", res["recovery_s"], res.get("recovery_check"))
        except Exception as e:  # noqa
            res["recovery_error"] = str(e)[:400]
            log(b.name, rnd, "recovery failed", e)
    b.stop()


def opened_logs_line(path, offset):
    """The fields of sluice's "opened logs" line (partitions, elapsed_ms, slowest, slowest_ms)
    logged after `offset` in its log file, so a slow restart says which partition held it up."""
    with open(path, "rb") as f:
        f.seek(offset)
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode("utf-8", "replace"))
    lines = [l for l in text.splitlines() if "opened logs" in l]
    return dict(re.findall(r"(\w+)=(\S+)", lines[-1])) if lines else None


def variant_session(b, rnd, res, override, name, body):
    """Fresh sluice with `override` ("key=value") running `body(sampler)`; a failure is stored
    under "<name>_error" and logged, and the broker is stopped either way."""
    b.extra = ["--override", override]
    try:
        b.start(fresh=True)
        sampler = RssSampler(b.pid)
        body(sampler)
        sampler.close()
    except Exception as e:  # noqa
        res[name + "_error"] = str(e)[:400]
        log(b.name, rnd, name, "session failed:", e)
    finally:
        b.stop()
        b.extra = []


def session_buffered(b, rnd, res):
    """Fresh sluice with log.io.direct=false (every append through the page cache, as Kafka
    writes): the rdkbench produce runs with 16 partitions, the catch-up read of the acks=1 topic
    and the latency run, under keys prefixed "buffered/". The report sets them against Kafka's
    figures for the same workloads."""
    n = CFG["records"]

    def body(sampler):
        for acks in ("1", "all"):
            produce_run(b, rnd, res, sampler, "rdk", acks, f"b-rdk-a{acks}-p16", 16, f"buffered/produce/rdk/acks={acks}/p16")
        subprocess.run(["sync"], check=False)
        timed_read(b, rnd, res, sampler, "buffered/consume/rdk/p16",
                   [RDK, "consume", "-b", BOOT, "-t", "b-rdk-a1-p16", "-n", str(n)])
        if "latency" in CFG["workloads"]:
            latency_run(b, rnd, res, sampler, "b-lat", "buffered/latency")
    variant_session(b, rnd, res, "log.io.direct=false", "buffered", body)


def session_pagecache_reads(b, rnd, res):
    """Fresh sluice with log.io.direct.reads=false (direct appends, every fetch through the page
    cache): the rdkbench acks=1 produce with 16 partitions, then the same catch-up reads as the
    main session, right after it and after dropping the page cache, under keys prefixed
    "pcreads/". The report sets them against Kafka's figures for the same reads."""
    topic = "pc-rdk-a1-p16"

    def body(sampler):
        produce_run(b, rnd, res, sampler, "rdk", "1", topic, 16, "pcreads/produce/rdk/acks=1/p16")
        subprocess.run(["sync"], check=False)
        reads = catch_up_reads(topic, CFG["records"])
        logs = glob.glob(os.path.join(b.data, f"{topic}-*", "*.log"))
        log(b.name, rnd, f"pcreads: {len(logs)} log files of {topic}")
        for key, cmd in reads:
            # The read before this one left the topic in the page cache; its direct appends had
            # not. Each read starts from the state the produce run left.
            evict_from_page_cache(logs)
            timed_read(b, rnd, res, sampler, "pcreads/consume/" + key, cmd)
        for key, cmd in reads:
            if not drop_page_cache():
                res["pcreads/consume-cold/" + key] = {"error": "cannot write /proc/sys/vm/drop_caches (needs root)"}
                continue
            timed_read(b, rnd, res, sampler, "pcreads/consume-cold/" + key, cmd)
    variant_session(b, rnd, res, "log.io.direct.reads=false", "pcreads", body)


def session_idle_poll(b, rnd, res):
    """Fresh sluice with cpu.idle.poll.us=1000 (its CPU kept from halting for 1 ms after each
    request, longer than the 0.5 ms between two records at the default rate): the latency run,
    under "idlepoll/latency". The report sets it against Kafka's latency run, broker CPU included."""
    def body(sampler):
        latency_run(b, rnd, res, sampler, "ip-lat", "idlepoll/latency")
    variant_session(b, rnd, res, "cpu.idle.poll.us=1000", "idlepoll", body)


def session_scale(b, rnd, res):
    """Fresh broker: create N partitions (topics of scale_per_topic), then one record to each."""
    total, per = CFG["scale_partitions"], CFG["scale_per_topic"]
    ntop = max(1, total // per)
    res["scale_start_s"] = b.start(fresh=True)
    time.sleep(2)
    rss0 = proc_status(b.pid, "VmRSS")
    res["scale_rss_before_mib"] = rss0
    try:
        res["scale_create_s"] = admin_run(["create-many", "scale", str(ntop), str(per)])["secs"]
        time.sleep(2)
        rss1 = proc_status(b.pid, "VmRSS")
        res["scale_rss_created_mib"] = rss1
        res["scale_kib_per_idle_partition"] = (rss1 - rss0) * 1024 / (ntop * per)
        rc, out, err, wall, ccpu = run_client([RDK, "touch", "-b", BOOT, "-t", "scale", "-T", str(ntop), "-P", str(per),
                                               "-s", "100"], timeout=900)
        j = last_json(out)
        if rc == 0 and j:
            res["scale_touch_s"] = j["secs"]
            # What a user waits for: the partitions exist and each has accepted a record. Kafka's
            # controller answers CreateTopics once the topic is in its metadata log, and the broker
            # creates the log directories while it applies that metadata, so "until all have
            # leaders" may leave Kafka's file creation out; the sum covers the same work for both.
            res["scale_create_serve_s"] = res["scale_create_s"] + j["secs"]
        else:
            res["scale_touch_error"] = (j or {}).get("first_error") or first_error(err) or f"exit {rc}"
        time.sleep(2)
        res["scale_rss_served_mib"] = proc_status(b.pid, "VmRSS")
        res["scale_kib_per_served_partition"] = (res["scale_rss_served_mib"] - rss0) * 1024 / (ntop * per)
    except Exception as e:  # noqa
        res["scale_error"] = str(e)[:400]
    res["scale_partitions"] = ntop * per
    log(b.name, rnd, "scale", {k: v for k, v in res.items() if k.startswith("scale")})
    b.stop()


def session_loaded_latency(b, rnd, res):
    """Fresh broker: end-to-end latency at the fixed rate (one run) while another producer writes
    16 partitions at full speed (rdkbench acks=1, its own connection), the load a latency-sensitive
    topic shares a broker's threads and disk with. The load starts 1 s before the run and is
    stopped when it ends; its throughput meanwhile is kept under "loaded/load_mbps". First the
    rate runs for CFG["load_warmup"] s without load and without counting (Kafka's JIT, see
    latency_run)."""
    b.start(fresh=True)
    sampler = RssSampler(b.pid)
    load = None
    try:
        create_topics([("load", 16), ("lat-warm", 1)])
        run_client(latency_cmd("lat-warm", CFG["load_warmup"], 1))
        t0 = time.monotonic()
        load = subprocess.Popen(pin(CFG["client_cpus"]) + [RDK, "produce", "-b", BOOT, "-t", "load", "-n", str(CFG["load_records"]),
                                                            "-s", str(CFG["record_size"]), "-X", "acks=1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        latency_run(b, rnd, res, sampler, "lat-load", "loaded/latency", count=1, first_warmup=1, secs=CFG["load_lat_secs"])
        if load.poll() is not None:
            res["loaded/load_error"] = f"the load producer ended early (exit {load.returncode})"
        load.kill()
        load.wait()
        wall = time.monotonic() - t0
        res["loaded/load_mbps"] = latest_offsets("load", 16) * CFG["record_size"] / 2**20 / wall
        log(b.name, rnd, "loaded", {"load_mbps": round(res["loaded/load_mbps"], 1)})
    except Exception as e:  # noqa
        res["loaded_error"] = str(e)[:400]
        log(b.name, rnd, "loaded latency failed:", e)
    finally:
        if load and load.poll() is None:
            load.kill()
            load.wait()
        sampler.close()
        b.stop()


# ---------------------------------------------------------------- machine ceilings
def cpu_ticks():
    """/proc/stat's all-CPU line: user nice system idle iowait irq softirq steal ..., in clock ticks."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def cpu_busy(secs=2.0):
    def snap():
        v = cpu_ticks()
        return sum(v), v[3] + v[4]
    t0, i0 = snap(); time.sleep(secs); t1, i1 = snap()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def machine_facts():
    m = {}
    with open("/proc/cpuinfo") as f:
        m["cpu_model"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    m["cpus"] = os.cpu_count()
    m["kernel"] = os.uname().release
    try:
        m["os"] = open("/etc/debian_version").read().strip()
    except OSError:
        m["os"] = "?"
    m["mem_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    m["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    m["sluice_version"] = subprocess.run([SLUICE, "version"], capture_output=True, text=True).stdout.strip()
    m["sluice_commit"] = os.environ.get("BENCH_SLUICE_COMMIT", "?")
    m["kafka_version"] = os.path.basename(os.path.dirname(KAFKA_LIBS))
    m["librdkafka"] = subprocess.run(["pkg-config", "--modversion", "rdkafka"], capture_output=True, text=True).stdout.strip()
    m["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m["loadavg_start"] = open("/proc/loadavg").read().split()[0]
    m["busy_before"] = round(cpu_busy(), 3)
    return m


def drop_page_cache():
    """Write dirty pages back, then drop the clean page cache: the next read of a file comes from
    the disk. False where /proc/sys/vm/drop_caches is not writable (not root, some containers)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def evict_from_page_cache(paths):
    """Drops the clean cached pages of `paths` (POSIX_FADV_DONTNEED), leaving the rest of the
    page cache as it is."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def page_cache_write_cpu():
    """CPU seconds per GiB that dd spends writing into the page cache (no sync), pinned to the
    broker CPUs: the floor every broker that writes through the page cache pays per GiB produced.
    dd writes BENCH_DD_FILES files of dd_mib each and keeps them until the last is written, so the
    page cache grows as it does while a session's logs grow; one figure per file. On a VM the
    cost rises once the guest's page cache reaches memory the host has to back again (on the
    machine of bench/RESULTS.md: about 0.8 CPU s/GiB for the first 2 GiB, 2.2 after), and a
    session's later produce runs pay the later figure. Measured at the start and the end of the run."""
    files, per_gib = [], []
    for i in range(CFG["dd_files"]):
        f = os.path.join(WORK, f"dd-cache-{i}.bin")
        files.append(f)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(pin(CFG["broker_cpus"]) + ["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={CFG['dd_mib']}"],
                           capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            break
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        per_gib.append(cpu / (CFG["dd_mib"] / 1024))
    for f in files:
        if os.path.exists(f):
            os.unlink(f)
    return per_gib


def dd_copied(stderr):
    """(bytes, seconds) from dd's summary line, or None if it printed none."""
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", stderr)
    return (int(m.group(1)), float(m.group(2))) if m else None


def ceilings():
    c = {"page_cache_write_cpu_s_per_gib_series_start": page_cache_write_cpu()}
    f = os.path.join(WORK, "dd.bin")
    for mode, extra in (("direct", ["oflag=direct"]), ("buffered_fdatasync", ["conv=fdatasync"])):
        # Pinned to the broker CPUs like the page-cache floor, so that the O_DIRECT run's CPU
        # time says what writing a GiB costs a process that bypasses the page cache.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(pin(CFG["broker_cpus"]) + ["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={CFG['dd_mib']}"] + extra,
                           capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        m = dd_copied(p.stderr)
        c[f"dd_{mode}_mibps"] = m[0] / m[1] / 2**20 if m else None
        if m:
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            c[f"dd_{mode}_cpu_s_per_gib"] = cpu / (m[0] / 2**30)
        if mode == "direct" and m:
            # Sequential read of the same file: with O_DIRECT (the way sluice reads what it
            # appended directly) and, once the page cache is dropped, through it with the
            # kernel's read-ahead (the way Kafka reads a log that is no longer cached).
            for rmode, rextra in (("direct", ["iflag=direct"]), ("buffered_cold", [])):
                if rmode == "buffered_cold" and not drop_page_cache():
                    continue
                p = subprocess.run(pin(CFG["broker_cpus"]) + ["dd", f"if={f}", "of=/dev/null", "bs=1M"] + rextra,
                                   capture_output=True, text=True)
                m2 = dd_copied(p.stderr)
                c[f"dd_read_{rmode}_mibps"] = m2[0] / m2[1] / 2**20 if m2 else None
        os.unlink(f)
    # fdatasync latency: 4 KiB append + fdatasync, 200 times
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    lat = []
    buf = os.urandom(4096)
    for _ in range(200):
        t0 = time.perf_counter(); os.write(fd, buf); os.fdatasync(fd); lat.append((time.perf_counter() - t0) * 1e3)
    os.close(fd); os.unlink(f)
    lat.sort()
    c["fdatasync_p50_ms"], c["fdatasync_p99_ms"] = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    # loopback TCP: iperf3 server on the broker CPUs, client on the client CPUs
    if shutil.which("iperf3"):
        port = str(free_port())
        srv = subprocess.Popen(pin(CFG["broker_cpus"]) + ["iperf3", "-s", "-1", "-p", port],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        p = subprocess.run(pin(CFG["client_cpus"]) + ["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "5", "-J"],
                           capture_output=True, text=True)
        srv.wait(10)
        try:
            c["tcp_loopback_mibps"] = json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 2**20
            c["tcp_tool"] = "iperf3"
        except (ValueError, KeyError):
            c["tcp_loopback_mibps"] = None
    return c


def main():
    os.makedirs(WORK, exist_ok=True)
    out = {"config": CFG, "machine": machine_facts(), "rounds": []}
    log("config", CFG)
    log("machine", out["machine"])
    t0, steal0 = time.monotonic(), host_steal_s()
    out["ceilings"] = ceilings()
    log("ceilings", out["ceilings"])
    brokers = {"sluice": Sluice(os.path.join(WORK, "sluice-data")), "kafka": Kafka(os.path.join(WORK, "kafka-data"))}
    for rnd in range(1, CFG["rounds"] + 1):
        for name in CFG["order"]:
            b = brokers[name]
            res = {"broker": name, "round": rnd}
            t1 = time.monotonic()
            try:
                session_main(b, rnd, res, WORK)
                if "loaded" in CFG["workloads"]:
                    shutil.rmtree(b.data, ignore_errors=True)
                    session_loaded_latency(b, rnd, res)
                if "scale" in CFG["workloads"]:
                    session_scale(b, rnd, res)
                if "buffered" in CFG["workloads"] and name == "sluice":
                    shutil.rmtree(b.data, ignore_errors=True)
                    session_buffered(b, rnd, res)
                if "pcreads" in CFG["workloads"] and name == "sluice":
                    shutil.rmtree(b.data, ignore_errors=True)
                    session_pagecache_reads(b, rnd, res)
                if "idlepoll" in CFG["workloads"] and name == "sluice" and "latency" in CFG["workloads"]:
                    shutil.rmtree(b.data, ignore_errors=True)
                    session_idle_poll(b, rnd, res)
            except Exception as e:  # noqa
                res["session_error"] = str(e)[:400]
                log(name, rnd, "session failed:", e)
                b.stop()
            res["session_wall_s"] = time.monotonic() - t1
            out["rounds"].append(res)
            shutil.rmtree(b.data, ignore_errors=True)
            with open(os.path.join(OUT, "results.json"), "w") as f:
                json.dump(out, f, indent=1)
    out["ceilings"]["page_cache_write_cpu_s_per_gib_series_end"] = page_cache_write_cpu()
    out["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[0]
    out["machine"]["busy_after"] = round(cpu_busy(), 3)
    out["wall_s"] = time.monotonic() - t0
    out["machine"]["host_steal_s"] = round(host_steal_s() - steal0, 1)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
    log(f"done in {out['wall_s']:.0f}s")


if __name__ == "__main__":
    main()

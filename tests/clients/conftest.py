"""Fixtures that start the broker under test.

TARGET=sluice (default): runs $SLUICE_BIN (default <repo>/target/release/sluice) as
    sluice serve --override log.dirs=<dir> --override listeners=PLAINTEXT://127.0.0.1:<port|0> --override k=v ...
  and waits (20s) for a stderr line containing "listening on PLAINTEXT://127.0.0.1:<port>".
TARGET=kafka: runs real Apache Kafka (single-node KRaft) via compat/kafka/kafka-ref.sh
  with the same overrides written into server.properties.
  Tests marked sluice_only are skipped for TARGET=kafka unless SLUICE_ONLY_SELFCHECK=1
  (then they run against Kafka too, which checks the test itself).

A test module may set BROKER_OVERRIDES = {"key": "value"} to start its brokers with
those configs. Fixtures:
  broker          function-scoped, fresh data dir
  module_broker   one broker shared by a module
  broker_factory  make(overrides=None, target=None) -> Broker, several per test
  kafka_cluster   make(n=3, overrides=None) -> KafkaCluster: real Kafka, n combined nodes
  sluice_controllers  make(n=3, overrides=None) -> SluiceControllers: n dedicated sluice
                  controllers (process.roles=controller), a metadata quorum without brokers
  sluice_cluster  make(n=3, overrides=None) -> SluiceCluster: n combined sluice nodes
                  (process.roles=broker,controller), each started from a server.properties
                  written as for Kafka
"""
import base64
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_REF = REPO / "compat" / "kafka" / "kafka-ref.sh"
TARGET = os.environ.get("TARGET", "sluice")
LISTEN_RE = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
SLUICE_START_TIMEOUT = 20.0


def _ephemeral_range():
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _ephemeral_range()
_handed_out = set()
_next_port = [20000 + (os.getpid() * 7919) % 8000]


def free_port():
    """A port nothing listens on, from below the kernel's ephemeral range. A port the kernel
    picked for bind(0) is an ephemeral one: in the seconds a JVM takes to bind it, a client's
    outgoing connection can be given the same port and the broker fails with "Address already
    in use". Ports below the range are never handed to outgoing connections. No port is given
    twice in one run."""
    for _ in range(20000):
        port = _next_port[0]
        _next_port[0] = port + 1 if port + 1 < min(_EPHEMERAL[0], 32768) else 10000
        if port in _handed_out or _EPHEMERAL[0] <= port <= _EPHEMERAL[1]:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range %s" % (_EPHEMERAL,))


def sluice_bin():
    b = os.environ.get("SLUICE_BIN", "target/release/sluice")
    p = Path(b)
    if not p.is_absolute():
        p = REPO / p
    return p


class Broker:
    """A broker process (sluice or Apache Kafka) on 127.0.0.1 with its own data dir."""

    def __init__(self, workdir, target=TARGET, overrides=None, data_dir=None):
        self.target = target
        self.workdir = Path(workdir)
        self.data_dir = Path(data_dir) if data_dir else self.workdir / "data"
        self.log_dir = self.workdir / "logs"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = dict(overrides or {})
        self.port = None
        self.proc = None
        self.stderr_lines = []
        self._starts = 0

    @property
    def bootstrap(self):
        return "127.0.0.1:%d" % self.port

    def __repr__(self):
        return "<Broker %s %s data=%s>" % (self.target, self.port and self.bootstrap, self.data_dir)

    # ------------------------------------------------------------ lifecycle
    def start(self, extra_overrides=None):
        if extra_overrides:
            self.overrides.update(extra_overrides)
        self._starts += 1
        if self.target == "sluice":
            self._start_sluice()
        elif self.target == "kafka":
            self._start_kafka()
        else:
            raise ValueError("TARGET must be sluice or kafka, not %r" % self.target)
        return self

    def stop(self):
        """Clean shutdown (SIGTERM, wait)."""
        if self.target == "kafka":
            self._ref("stop")
            return
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError("sluice did not exit within 30s of SIGTERM")
        self.proc = None

    def kill9(self, restart=True):
        """SIGKILL the broker, then (by default) start it again on the same port and data dir."""
        if self.target == "kafka":
            self._ref("kill9")
        elif self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None
        if restart:
            self.start()

    def restart(self, extra_overrides=None):
        self.stop()
        self.start(extra_overrides)

    def close(self):
        try:
            if self.target == "kafka":
                self._ref("kill9")
            elif self.proc and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        finally:
            self.proc = None

    def is_running(self):
        if self.target == "kafka":
            return subprocess.run([str(KAFKA_REF), "status", "--dir", str(self.data_dir),
                                   "--state-dir", str(self.log_dir / "kafka-ref")],
                                  capture_output=True).returncode == 0
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------ sluice
    def _start_sluice(self):
        binary = sluice_bin()
        if not binary.exists():
            pytest.fail("sluice binary not found at %s (build it, or set SLUICE_BIN / TARGET=kafka)" % binary)
        args = [str(binary), "serve",
                "--override", "log.dirs=%s" % self.data_dir,
                "--override", "listeners=PLAINTEXT://127.0.0.1:%d" % (self.port or 0)]
        for k, v in self.overrides.items():
            args += ["--override", "%s=%s" % (k, v)]
        logf = open(self.log_dir / ("sluice-%d.stderr.log" % self._starts), "w")
        self.stderr_lines = []
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf,
                                     stderr=subprocess.PIPE, cwd=str(self.workdir))
        found = threading.Event()
        port_box = []
        lines = self.stderr_lines
        proc = self.proc

        def pump():
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                logf.write(line)
                logf.flush()
                if not found.is_set():
                    m = LISTEN_RE.search(line)
                    if m:
                        port_box.append(int(m.group(1)))
                        found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.time() + SLUICE_START_TIMEOUT
        while not found.is_set() and time.time() < deadline:
            found.wait(0.1)
        if not port_box:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            time.sleep(0.1)
            pytest.fail("sluice did not print 'listening on PLAINTEXT://127.0.0.1:<port>' within %.0fs "
                        "(exit code %s); args=%s\nstderr:\n%s"
                        % (SLUICE_START_TIMEOUT, proc.returncode, args, "".join(lines)[-8000:]))
        if self.port is not None and port_box[0] != self.port:
            pytest.fail("sluice restarted on port %d, expected %d" % (port_box[0], self.port))
        self.port = port_box[0]

    # ------------------------------------------------------------ kafka
    def _ref(self, cmd, *extra):
        args = [str(KAFKA_REF), cmd, "--dir", str(self.data_dir),
                "--state-dir", str(self.log_dir / "kafka-ref")] + list(extra)
        r = subprocess.run(args, capture_output=True, text=True, timeout=180)
        if r.returncode != 0 and cmd == "start":
            pytest.fail("kafka-ref.sh start failed:\n%s\n%s" % (r.stdout, r.stderr))
        return r

    def _start_kafka(self):
        if self.port is None:
            self.port = free_port()
        extra = ["--port", str(self.port)]
        for k, v in self.overrides.items():
            extra += ["--override", "%s=%s" % (k, v)]
        self._ref("start", *extra)


def per_node(value, node):
    """A cluster override's value for one node: `{node}` in it becomes the node id (e.g.
    `broker.rack=rack-{node}`)."""
    return str(value).replace("{node}", str(node))


class KafkaCluster:
    """A real Apache Kafka KRaft cluster of n combined nodes (node ids 1..n, every node a voter),
    each a kafka-ref.sh instance with its own data dir and ports on 127.0.0.1 — or, given
    `hosts` (node -> address) and `wrap` (node -> command prefix, e.g. `ip netns exec NS`), on
    an address of its own in a network namespace of its own (chaos/net.py)."""

    def __init__(self, workdir, n, overrides=None, hosts=None, wrap=None):
        self.workdir = Path(workdir)
        self.hosts = hosts or {i: "127.0.0.1" for i in range(1, n + 1)}
        self.wrap = wrap or (lambda node: [])
        self.ports = {i: free_port() for i in range(1, n + 1)}
        self.controller_ports = {i: free_port() for i in range(1, n + 1)}
        self.voters = ",".join("%d@%s:%d" % (i, self.hosts[i], p) for i, p in self.controller_ports.items())
        self.cluster_id = base64.urlsafe_b64encode(b"sluice-reference").decode().rstrip("=")
        self.overrides = dict(overrides or {})

    @property
    def bootstrap_controllers(self):
        return ",".join("%s:%d" % (self.hosts[i], p) for i, p in self.controller_ports.items())

    def data_dir(self, node):
        return self.workdir / ("node%d" % node) / "data"

    def _ref(self, cmd, node, *extra, check=True):
        args = [str(KAFKA_REF), cmd, "--dir", str(self.data_dir(node)), "--host", self.hosts[node],
                "--state-dir", str(self.workdir / ("node%d" % node) / "ref"), "--port", str(self.ports[node])]
        if cmd == "start":
            args = self.wrap(node) + args
        r = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=180)
        if check and r.returncode != 0:
            pytest.fail("kafka-ref.sh %s (node %d) failed:\n%s\n%s" % (cmd, node, r.stdout, r.stderr))
        return r

    @property
    def bootstrap(self):
        return ",".join("%s:%d" % (self.hosts[i], p) for i, p in self.ports.items())

    def pid(self, node):
        return int((self.workdir / ("node%d" % node) / "ref" / "kafka.pid").read_text().strip())

    def start(self, node=None):
        """Starts every node (or one), then waits until each serves."""
        nodes = [node] if node else list(self.ports)
        for i in nodes:
            extra = ["--node-id", str(i), "--voters", self.voters, "--cluster-id", self.cluster_id,
                     "--controller-port", str(self.controller_ports[i]), "--no-wait"]
            for k, v in self.overrides.items():
                extra += ["--override", "%s=%s" % (k, per_node(v, i))]
            self._ref("start", i, *extra)
        for i in nodes:
            self._ref("wait", i)
        return self

    def kill9(self, node):
        self._ref("kill9", node)

    def stop(self, node):
        self._ref("stop", node)

    def close(self):
        for i in self.ports:
            self._ref("kill9", i, check=False)


class SluiceControllers:
    """n dedicated sluice controllers (node ids 1..n, all voters) on 127.0.0.1, each formatted
    with the same cluster id as KafkaCluster's; /healthz on its own metrics port."""

    def __init__(self, workdir, n, overrides=None):
        self.workdir = Path(workdir)
        self.controller_ports = {i: free_port() for i in range(1, n + 1)}
        self.health_ports = {i: free_port() for i in range(1, n + 1)}
        self.voters = ",".join("%d@127.0.0.1:%d" % (i, p) for i, p in self.controller_ports.items())
        self.cluster_id = base64.urlsafe_b64encode(b"sluice-reference").decode().rstrip("=")
        self.overrides = dict(overrides or {})
        self.procs = {}

    @property
    def bootstrap_controllers(self):
        return ",".join("127.0.0.1:%d" % p for p in self.controller_ports.values())

    def _args(self, node):
        kv = {
            "process.roles": "controller", "node.id": str(node), "controller.quorum.voters": self.voters,
            "listeners": "CONTROLLER://127.0.0.1:%d" % self.controller_ports[node],
            "controller.listener.names": "CONTROLLER", "log.dirs": str(self.workdir / ("node%d" % node)),
            "metrics.listener": "127.0.0.1:%d" % self.health_ports[node],
        }
        kv.update(self.overrides)
        return [a for k, v in kv.items() for a in ("--override", "%s=%s" % (k, v))]

    def health(self, node):
        """(HTTP status, JSON body) of the node's /healthz, or None when it does not answer."""
        import json
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.health_ports[node], timeout=2) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
        except OSError:
            return None

    def start(self, node=None):
        """Starts every node (or one), then waits until each reports a leader on /healthz."""
        nodes = [node] if node else list(self.controller_ports)
        for i in nodes:
            if not (self.workdir / ("node%d" % i)).exists():
                subprocess.run([str(sluice_bin()), "format", "--cluster-id", self.cluster_id] + self._args(i),
                               check=True, capture_output=True, timeout=30)
            log = open(self.workdir / ("node%d.log" % i), "ab")
            self.procs[i] = subprocess.Popen([str(sluice_bin()), "serve"] + self._args(i), stdout=log, stderr=log)
        deadline = time.time() + 30
        for i in nodes:
            while True:
                h = self.health(i)
                if h and h[0] == 200:
                    break
                assert time.time() < deadline, "controller %d never reported a leader: %s" % (i, h)
                time.sleep(0.2)
        return self

    def leader(self):
        h = self.health(next(iter(self.procs)))
        return h[1]["leader"] if h else None

    def kill9(self, node):
        p = self.procs.pop(node)
        p.kill()
        p.wait(10)

    def close(self):
        for i in list(self.procs):
            self.kill9(i)


class SluiceCluster:
    """n sluice nodes, each broker and controller (node ids 1..n, all voters), on 127.0.0.1, each
    started with `sluice serve -c server.properties`: Kafka's KRaft settings for a static
    three-voter quorum, nothing sluice-specific but the metrics port. `hosts` and `wrap` as in
    KafkaCluster."""

    PROPERTIES = """process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=3
default.replication.factor=1
metrics.listener={host}:{health_port}
"""

    def __init__(self, workdir, n, overrides=None, hosts=None, wrap=None):
        self.workdir = Path(workdir)
        self.hosts = hosts or {i: "127.0.0.1" for i in range(1, n + 1)}
        self.wrap = wrap or (lambda node: [])
        self.ports = {i: free_port() for i in range(1, n + 1)}
        self.controller_ports = {i: free_port() for i in range(1, n + 1)}
        self.health_ports = {i: free_port() for i in range(1, n + 1)}
        self.voters = ",".join("%d@%s:%d" % (i, self.hosts[i], p) for i, p in self.controller_ports.items())
        self.cluster_id = base64.urlsafe_b64encode(b"sluice-reference").decode().rstrip("=")
        self.overrides = dict(overrides or {})
        self.procs = {}

    @property
    def bootstrap(self):
        return ",".join("%s:%d" % (self.hosts[i], p) for i, p in self.ports.items())

    @property
    def bootstrap_controllers(self):
        return ",".join("%s:%d" % (self.hosts[i], p) for i, p in self.controller_ports.items())

    def pid(self, node):
        return self.procs[node].pid

    def properties(self, node):
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / ("node%d.properties" % node)
        text = self.PROPERTIES.format(node=node, voters=self.voters, port=self.ports[node], host=self.hosts[node],
                                      controller_port=self.controller_ports[node],
                                      data=self.workdir / ("node%d" % node), health_port=self.health_ports[node])
        text += "".join("%s=%s\n" % (k, per_node(v, node)) for k, v in self.overrides.items())
        path.write_text(text)
        return path

    def log(self, node):
        return (self.workdir / ("node%d.log" % node)).read_text(errors="replace")

    def start(self, node=None, wait=True):
        """Starts every node (or one); with `wait`, until each serves clients."""
        nodes = [node] if node else list(self.ports)
        for i in nodes:
            props = self.properties(i)
            if not (self.workdir / ("node%d" % i)).exists():
                subprocess.run([str(sluice_bin()), "format", "-t", self.cluster_id, "-c", str(props)],
                               check=True, capture_output=True, timeout=30)
            log = open(self.workdir / ("node%d.log" % i), "ab")
            self.procs[i] = subprocess.Popen(self.wrap(i) + [str(sluice_bin()), "serve", "-c", str(props)],
                                             stdout=log, stderr=log,
                                             env=dict(os.environ, SLUICE_LOG="info"))
        if wait:
            for i in nodes:
                self.wait_unfenced(i)
        return self

    def wait_unfenced(self, node, timeout=30):
        """Until the node's log says the controller unfenced it."""
        deadline = time.time() + timeout
        while "this broker is unfenced" not in self.log(node).split("registered with the active controller")[-1]:
            assert self.procs[node].poll() is None, "node %d exited:\n%s" % (node, self.log(node)[-4000:])
            assert time.time() < deadline, "node %d was not unfenced within %ds:\n%s" % (node, timeout, self.log(node)[-4000:])
            time.sleep(0.1)

    def kill9(self, node):
        p = self.procs.pop(node)
        p.kill()
        p.wait(10)

    def sigterm(self, node, timeout=60):
        """SIGTERM and wait; returns the exit code."""
        p = self.procs.pop(node)
        p.send_signal(signal.SIGTERM)
        return p.wait(timeout)

    def close(self):
        for i in list(self.procs):
            self.kill9(i)


def _clusters(tmp_path, cls, prefix):
    """A factory make(n=3, overrides=None) -> started cls; and the list of what it made."""
    made = []

    def make(n=3, overrides=None):
        c = cls(tmp_path / ("%s%d" % (prefix, len(made))), n, overrides)
        made.append(c)
        return c.start()

    return make, made


@pytest.fixture
def sluice_cluster(tmp_path):
    """make(n=3, overrides=None) -> started SluiceCluster; every node is killed at the end."""
    make, made = _clusters(tmp_path, SluiceCluster, "cluster")
    yield make
    for c in made:
        c.close()


@pytest.fixture
def sluice_controllers(tmp_path):
    """make(n=3, overrides=None) -> started SluiceControllers; every node is killed at the end."""
    make, made = _clusters(tmp_path, SluiceControllers, "controllers")
    yield make
    for c in made:
        c.close()


@pytest.fixture
def kafka_cluster(tmp_path):
    """make(n=3, overrides=None) -> a started KafkaCluster; every node is killed at the end."""
    make, made = _clusters(tmp_path, KafkaCluster, "cluster-kafka")
    yield make
    for c in made:
        c.close()


# ---------------------------------------------------------------- pytest glue
def pytest_configure(config):
    config.addinivalue_line("markers", "sluice_only: test only meaningful against sluice (skipped for TARGET=kafka)")


def pytest_collection_modifyitems(config, items):
    if TARGET != "sluice" and not os.environ.get("SLUICE_ONLY_SELFCHECK"):
        skip = pytest.mark.skip(reason="sluice-only test (TARGET=%s)" % TARGET)
        for item in items:
            if "sluice_only" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config):
    where = sluice_bin() if TARGET == "sluice" else "compat/kafka/kafka-ref.sh"
    return "broker under test: TARGET=%s (%s)" % (TARGET, where)


def _module_overrides(request):
    mod = getattr(request, "module", None)
    return dict(getattr(mod, "BROKER_OVERRIDES", {}) or {})


@pytest.fixture
def broker_factory(tmp_path, request):
    made = []

    def make(overrides=None, target=None, start=True, data_dir=None):
        ov = _module_overrides(request)
        ov.update(overrides or {})
        b = Broker(tmp_path / ("broker%d" % len(made)), target=target or TARGET, overrides=ov, data_dir=data_dir)
        made.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in made:
        b.close()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory, request):
    b = Broker(tmp_path_factory.mktemp("mbroker"), overrides=_module_overrides(request))
    b.start()
    yield b
    b.close()

"""Network partitions between real processes: one network namespace per node, joined in a full
mesh of veth pairs, so that the link between two nodes can be cut while both still reach the
clients.

    node i: namespace chaos-<i>, address 10.99.0.<i> (on the namespace's lo)
    peers:  a veth pair per pair of nodes (cx<i><j> in i's namespace, cx<j><i> in j's), with a
            /32 route to the other node's address through it
    host:   a veth pair per node (ch<i> on the host, cn<i> in the namespace); the host holds
            10.99.0.254 (on its lo), so the clients (this process) reach every node and every
            node reaches them

Cutting i-j sets both ends of that pair down (the kernel drops the routes through it: a node
trying to reach the other gets "network unreachable", established connections stall until their
timeouts); healing sets them up and puts the routes back. The links to the host are never cut:
clients keep reaching every node, as in Jepsen's partitions between database nodes.

Needs root (CAP_NET_ADMIN) and `ip`. Everything is made in setup() and removed in teardown(),
which also clears what an earlier run that died left behind.
"""
import itertools
import subprocess

SUBNET = "10.99.0."
HOST_ADDR = SUBNET + "254"


def ip(*args, check=True):
    r = subprocess.run(("ip",) + args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


class Mesh:
    def __init__(self, n):
        self.nodes = list(range(1, n + 1))
        self.cut = set()

    @staticmethod
    def ns(i):
        return "chaos-%d" % i

    @staticmethod
    def host(i):
        return SUBNET + str(i)

    def wrap(self, i):
        """The command prefix that runs a program in node i's namespace."""
        return ["ip", "netns", "exec", self.ns(i)]

    def setup(self):
        self.teardown()
        ip("addr", "add", HOST_ADDR + "/32", "dev", "lo")
        for i in self.nodes:
            ns = self.ns(i)
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", self.host(i) + "/32", "dev", "lo")
            ip("link", "add", "ch%d" % i, "type", "veth", "peer", "name", "cn%d" % i)
            ip("link", "set", "cn%d" % i, "netns", ns)
            ip("link", "set", "ch%d" % i, "up")
            ip("-n", ns, "link", "set", "cn%d" % i, "up")
            ip("route", "replace", self.host(i) + "/32", "dev", "ch%d" % i, "src", HOST_ADDR)
            ip("-n", ns, "route", "replace", HOST_ADDR + "/32", "dev", "cn%d" % i, "src", self.host(i))
        for i, j in itertools.combinations(self.nodes, 2):
            ip("link", "add", "cx%d%d" % (i, j), "type", "veth", "peer", "name", "cx%d%d" % (j, i))
            ip("link", "set", "cx%d%d" % (i, j), "netns", self.ns(i))
            ip("link", "set", "cx%d%d" % (j, i), "netns", self.ns(j))
            self._link(i, j, up=True)
        return self

    def _link(self, i, j, up):
        for a, b in ((i, j), (j, i)):
            ip("-n", self.ns(a), "link", "set", "cx%d%d" % (a, b), "up" if up else "down")
        if up:
            for a, b in ((i, j), (j, i)):
                ip("-n", self.ns(a), "route", "replace", self.host(b) + "/32", "dev", "cx%d%d" % (a, b),
                   "src", self.host(a))

    def isolate(self, i):
        """Cut node i from every other node (not from the clients)."""
        for j in self.nodes:
            if j != i:
                self.cut_link(i, j)

    def cut_link(self, i, j):
        key = (min(i, j), max(i, j))
        if key not in self.cut:
            self._link(i, j, up=False)
            self.cut.add(key)

    def heal(self):
        for i, j in sorted(self.cut):
            self._link(i, j, up=True)
        self.cut.clear()

    def teardown(self):
        for i in self.nodes:
            ip("netns", "del", self.ns(i), check=False)
            ip("link", "del", "ch%d" % i, check=False)
        ip("addr", "del", HOST_ADDR + "/32", "dev", "lo", check=False)

"""Network partitions between real processes: one network namespace per node, joined in a full
mesh of veth pairs, so that the link between two nodes can be cut while both still reach the
clients.

    node i: namespace chaos<m>-<i>, address 10.<99-m>.0.<i> (on the namespace's lo), where m
            is the mesh's number (0 by default; two runs at once need two numbers)
    peers:  a veth pair per pair of nodes (c<m>x<i><j> in i's namespace, c<m>x<j><i> in j's),
            with a /32 route to the other node's address through it
    host:   a veth pair per node (c<m>h<i> on the host, c<m>n<i> in the namespace); the host
            holds 10.<99-m>.0.254 (on its lo), so the clients (this process) reach every node
            and every node reaches them

Cutting i-j sets both ends of that pair down (the kernel drops the routes through it: a node
trying to reach the other gets "network unreachable", established connections stall until their
timeouts); healing sets them up and puts the routes back. The links to the host are never cut:
clients keep reaching every node, as in Jepsen's partitions between database nodes.

Needs root (CAP_NET_ADMIN) and `ip`. Everything is made in setup() and removed in teardown(),
which also clears what an earlier run that died left behind.
"""
import itertools
import subprocess



def ip(*args, check=True):
    r = subprocess.run(("ip",) + args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


class Mesh:
    def __init__(self, n, number=0):
        assert 0 <= number < 10
        self.nodes = list(range(1, n + 1))
        self.cut = set()
        self.m = number
        self.subnet = "10.%d.0." % (99 - number)
        self.host_addr = self.subnet + "254"

    def ns(self, i):
        return "chaos%d-%d" % (self.m, i)

    def host(self, i):
        return self.subnet + str(i)

    def _if(self, kind, *nodes):
        return "c%d%s%s" % (self.m, kind, "".join(str(n) for n in nodes))

    def wrap(self, i):
        """The command prefix that runs a program in node i's namespace."""
        return ["ip", "netns", "exec", self.ns(i)]

    def setup(self):
        self.teardown()
        ip("addr", "add", self.host_addr + "/32", "dev", "lo")
        for i in self.nodes:
            ns = self.ns(i)
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", self.host(i) + "/32", "dev", "lo")
            ip("link", "add", self._if("h", i), "type", "veth", "peer", "name", self._if("n", i))
            ip("link", "set", self._if("n", i), "netns", ns)
            ip("link", "set", self._if("h", i), "up")
            ip("-n", ns, "link", "set", self._if("n", i), "up")
            ip("route", "replace", self.host(i) + "/32", "dev", self._if("h", i), "src", self.host_addr)
            ip("-n", ns, "route", "replace", self.host_addr + "/32", "dev", self._if("n", i), "src", self.host(i))
        for i, j in itertools.combinations(self.nodes, 2):
            ip("link", "add", self._if("x", i, j), "type", "veth", "peer", "name", self._if("x", j, i))
            ip("link", "set", self._if("x", i, j), "netns", self.ns(i))
            ip("link", "set", self._if("x", j, i), "netns", self.ns(j))
            self._link(i, j, up=True)
        return self

    def _link(self, i, j, up):
        for a, b in ((i, j), (j, i)):
            ip("-n", self.ns(a), "link", "set", self._if("x", a, b), "up" if up else "down")
        if up:
            for a, b in ((i, j), (j, i)):
                ip("-n", self.ns(a), "route", "replace", self.host(b) + "/32", "dev", self._if("x", a, b),
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
            ip("link", "del", self._if("h", i), check=False)
        ip("addr", "del", self.host_addr + "/32", "dev", "lo", check=False)

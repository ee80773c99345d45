"""The leader-failover scenario, the same for every Python-driven client (confluent-kafka,
kafka-python, kcat, Kafka's tools): on a cluster (compat/run.sh --nodes 3 exports
COMPAT_NODE_CTL), a topic with one partition on three replicas (min.insync.replicas=2) takes
20 acks=all records, its leader is killed with SIGKILL, the same client writes 20 more through
the failover, and all 40 are read back from offset 0, each at the offset it was acknowledged
at; partition 0 then has another leader. The killed broker is started again whatever happens.
Standard library only: Kafka's tools run under the system python3."""
import os
import subprocess
import time

RECORDS = 20
TOPIC_CONFIG = {"min.insync.replicas": "2"}


class Skip(Exception):
    """The scenario does not apply here (a single node)."""


def node_ctl(cmd, node):
    ctl = os.environ["COMPAT_NODE_CTL"]
    p = subprocess.run([ctl, cmd, str(node)], capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        raise AssertionError("node-ctl %s %s exited %d: %s" % (cmd, node, p.returncode, p.stderr.strip()[-300:]))


def keys(tag, first=0):
    return ["%s-%d" % (tag, i) for i in range(first, first + RECORDS)]


def run(create, leader_and_isr, produce, consume):
    """create(): makes the topic (1 partition, replication factor 3, TOPIC_CONFIG);
    leader_and_isr() -> (leader, sorted isr) of partition 0, or None while unknown;
    produce(keys) -> the offsets the records were acknowledged at, in order (None where the
    client does not report offsets; the read-back then checks them);
    consume(n) -> [(offset, key)] read from offset 0 of partition 0.
    Returns the scenario's detail."""
    if not os.environ.get("COMPAT_NODE_CTL"):
        raise Skip("needs a cluster (compat/run.sh --nodes 3)")
    create()
    wait("partition 0 to have a leader and three in-sync replicas",
         lambda: (lambda s: s is not None and s[0] >= 0 and len(s[1]) == 3)(leader_and_isr()))
    before = produce(keys("before"))
    expect_offsets(before, 0)
    old = leader_and_isr()[0]
    node_ctl("kill9", old)
    try:
        after = produce(keys("after"))
        expect_offsets(after, RECORDS)
        got = consume(2 * RECORDS)
        want = list(enumerate(keys("before") + keys("after")))
        if got != want:
            raise AssertionError("read back %r..., expected %r..." % (got[:3] + ["..."] + got[-2:], want[:3] + ["..."] + want[-2:]))
        new = wait("partition 0 to have a leader other than the killed broker %d" % old,
                   lambda: (lambda s: s[0] if s is not None and s[0] >= 0 and s[0] != old else None)(leader_and_isr()))
    finally:
        node_ctl("start", old)
    return "leader %d killed (-9): %d records acked before and %d after on new leader %d, %d read back at offsets 0-%d" % (
        old, RECORDS, RECORDS, new, 2 * RECORDS, 2 * RECORDS - 1)


def expect_offsets(offsets, first):
    if offsets is not None and list(offsets) != list(range(first, first + RECORDS)):
        raise AssertionError("acknowledged at offsets %r, expected %d..%d" % (offsets, first, first + RECORDS - 1))


def wait(what, check, secs=60):
    deadline = time.time() + secs
    while True:
        try:
            got = check()
        except Exception:  # noqa: BLE001 - a metadata request to a dead broker; ask again
            got = None
        if got:
            return got
        if time.time() > deadline:
            raise AssertionError("waited %ds for %s" % (secs, what))
        time.sleep(0.5)

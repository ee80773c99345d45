"""A broker with two listeners names itself, in Metadata and FindCoordinator, by the endpoint of
the listener the request came in on (`advertised.listeners`), as Kafka does: the usual Docker
setup, an internal name for the containers and `localhost` for the host, works from either side.
"""
import pytest

from conftest import free_port
from kafkautil import admin, consumer, create_topic, make_records, produce_all, producer, unique


@pytest.mark.sluice_only
def test_each_listener_advertises_its_own_endpoint(broker_factory):
    internal, external = free_port(), free_port()
    b = broker_factory(overrides={
        "listeners": "PLAINTEXT://127.0.0.1:%d,EXTERNAL://127.0.0.1:%d" % (internal, external),
        # The internal name does not resolve here: a client sent to it could not connect.
        "advertised.listeners": "PLAINTEXT://kafka.invalid:%d,EXTERNAL://localhost:%d" % (internal, external),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
    })
    assert b.port == internal
    inside = admin("127.0.0.1:%d" % internal).list_topics(timeout=10)
    assert [(x.host, x.port) for x in inside.brokers.values()] == [("kafka.invalid", internal)]
    outside_bootstrap = "127.0.0.1:%d" % external
    outside = admin(outside_bootstrap).list_topics(timeout=10)
    assert [(x.host, x.port) for x in outside.brokers.values()] == [("localhost", external)]

    # A client outside produces and consumes in a group: the leader and the coordinator it is
    # sent to are the external endpoint.
    topic = create_topic(outside_bootstrap, unique("listeners"), partitions=2)
    recs = make_records(40, 2)
    d = produce_all(producer(outside_bootstrap, acks="all"), topic, recs)
    assert not d.failed and len(d.ok) == 40
    c = consumer(outside_bootstrap, group_id=unique("ext-g"), enable_partition_eof=False)
    c.subscribe([topic])
    got = []
    for _ in range(60):
        m = c.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 40:
            break
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(r["value"] for r in recs)

"""A master SIGKILLed under the client: the cluster recovers its tablets on
the other servers, and the client (map refreshed after its connection
fails) reads back every write that was acknowledged. A cluster of its own,
since it loses a server."""
from __future__ import annotations

import asyncio
import time

import pytest

import shoalkv
from shoalkv.hashing import key_hash

from conftest import Cluster


@pytest.fixture(scope="module")
def doomed(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("shoal3-kill"), servers=3)
    yield c
    c.stop()


def test_reads_every_acknowledged_write_after_a_master_is_killed(doomed):
    c = shoalkv.Client.cluster(doomed.coordinator)
    t = c.create_table("survivors")
    n = 600
    acked = {}
    for i in range(0, n, 100):
        batch = [(t, f"k{j}", f"v{j}") for j in range(i, i + 100)]
        for (_, k, v), r in zip(batch, c.multi_write(batch)):
            assert isinstance(r, int), r
            acked[k] = v.encode()
    for i in range(50):
        assert isinstance(c.increment(t, "counter"), shoalkv.IncrementResult)
    acked["counter"] = b"50"
    # The victim: the master of the counter, so that it holds data for sure.
    victim_addr = c.tablet_map.locate(t, key_hash(t, b"counter"))
    victim = next(s["id"] for s in doomed.map()["servers"] if s["native"] == "%s:%d" % victim_addr)
    on_victim = [k for k in acked if c.tablet_map.locate(t, key_hash(t, k.encode())) == victim_addr]
    assert len(on_victim) > 10
    c.read(t, on_victim[0])  # a pooled connection to the victim is open
    started = time.monotonic()
    doomed.kill_server(victim)

    # Every key, one by one with the same client: its map still names the
    # dead server; the connection fails, the client refreshes and retries
    # until the tablets are recovered elsewhere.
    got = {k: c.read(t, k).value for k in acked}
    assert got == acked
    recovered_in = time.monotonic() - started
    m = c.tablet_map
    assert victim_addr not in m.servers(), m.servers()
    assert c.increment(t, "counter").value == 51  # writes go on too
    c.close()

    async def reread():
        a = await shoalkv.AsyncClient.connect_cluster(doomed.coordinator)
        try:
            res = await a.multi_read([(t, k) for k in acked])
            return {k: r.value for k, r in zip(acked, res)}
        finally:
            await a.close()

    acked["counter"] = b"51"
    assert asyncio.run(reread()) == acked
    print(f"recovered and read back {len(acked)} keys in {recovered_in:.1f}s")


def test_async_client_rides_out_the_loss_of_a_second_map_entry(doomed):
    # The cluster lost a server in the test above; a new asyncio client
    # created from the current map routes straight to the survivors.
    async def body():
        a = await shoalkv.AsyncClient.connect_cluster(doomed.coordinator)
        try:
            t = await a.table_id("survivors")
            assert (await a.read(t, "k0")).value == b"v0"
            live = {s["native"] for s in doomed.map()["servers"] if s["state"] == "up"}
            assert {"%s:%d" % s for s in a.tablet_map.servers()} <= live
        finally:
            await a.close()
    asyncio.run(body())

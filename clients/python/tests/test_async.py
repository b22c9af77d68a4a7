"""The asyncio client against the same 3-server `shoal local` (each test
runs its own event loop with asyncio.run: no plugin needed)."""
from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

import shoalkv
from shoalkv import AsyncClient, RejectRules, errors
from shoalkv.hashing import key_hash
from shoalkv.routing import TabletMap


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def with_table(cluster, body, **kwargs):
    c = await AsyncClient.connect_cluster(cluster.coordinator, **kwargs)
    name = "a-" + uuid.uuid4().hex[:8]
    try:
        t = await c.create_table(name)
        return await body(c, t, name)
    finally:
        try:
            await c.drop_table(name)
        finally:
            await c.close()


def test_operations(cluster):
    async def body(c, t, name):
        v1 = await c.write(t, "k", "one")
        assert await c.read(t, "k") == (b"one", v1)
        with pytest.raises(errors.ObjectExists):
            await c.write(t, "k", "x", RejectRules.if_absent())
        with pytest.raises(errors.WrongVersion) as e:
            await c.write(t, "k", "x", RejectRules.if_version(v1 + 1))
        assert e.value.version == v1
        assert await c.remove(t, "k") == v1
        with pytest.raises(errors.ObjectDoesntExist):
            await c.read(t, "k")
        assert await c.get(t, "k") is None
        assert (await c.increment(t, "n", 7)).value == 7
        await c.write(t, "s", "not a number")
        with pytest.raises(errors.NotAnInteger):
            await c.increment(t, "s")
        await c.write(t, "e", "x", ttl=30)
        ttl = await c.ttl(t, "e")
        assert 20000 < ttl.remaining_ms <= 30000
        assert await c.table_id(name) == t
        assert await c.create_table(name) == t
        await c.ping()
        assert "objects" in await c.stats()
        with pytest.raises(errors.UnknownTable):
            await c.read(987654, "k")
    run(with_table(cluster, body))


def test_concurrent_requests_share_one_connection_per_server(cluster):
    async def body(c, t, name):
        n = 600
        versions = await asyncio.gather(*[c.write(t, f"k{i}", f"v{i}") for i in range(n)])
        assert all(v > 0 for v in versions)
        reads = await asyncio.gather(*[c.read(t, f"k{i}") for i in range(n)])
        assert [r.value for r in reads] == [f"v{i}".encode() for i in range(n)]
        owners = {c.tablet_map.locate(t, key_hash(t, f"k{i}".encode())) for i in range(n)}
        assert owners == set(cluster.natives)
        for addr in cluster.natives:
            assert len(c._conns[addr]) == 1 and c._conns[addr][0] is not None
    run(with_table(cluster, body))


def test_pipeline_multi_ops_and_enumerate(cluster):
    async def body(c, t, name):
        pl = c.pipeline()
        for i in range(300):
            pl.write(t, f"p{i}", str(i))
        pl.read(t, "missing")
        res = await pl.execute()
        assert all(isinstance(v, int) for v in res[:300]) and isinstance(res[300], errors.ObjectDoesntExist)
        got = await c.multi_read([(t, f"p{i}") for i in range(300)])
        assert [g.value for g in got] == [str(i).encode() for i in range(300)]
        assert await c.multi_write([(t, "p0", "new")]) != [res[0]]
        removed = await c.multi_remove([(t, "p1"), (t, "nothing")])
        assert removed == [res[1], None]
        keys = Counter(o.key for o in await c.scan_all(t, page_size=50))
        assert keys == Counter([f"p{i}".encode() for i in range(300) if i != 1])
    run(with_table(cluster, body, connections=2))


def test_a_stale_map_is_refreshed(cluster):
    async def body(c, t, name):
        real = c.tablet_map
        c._map = TabletMap([(t, 0, 2**64 - 1, cluster.natives[1])], admin=real.admin)
        await asyncio.gather(*[c.write(t, f"s{i}", "v") for i in range(60)])
        assert c.tablet_map.version >= real.version
        assert all(r.value == b"v" for r in await c.multi_read([(t, f"s{i}") for i in range(60)]))
    run(with_table(cluster, body))


def test_single_server_and_connection_errors(cluster):
    async def body():
        with pytest.raises(errors.ShoalConnectionError):
            await AsyncClient.connect("127.0.0.1:1", timeout=2)
        with pytest.raises(errors.ClusterError):
            await AsyncClient.connect_cluster("127.0.0.1:1", timeout=2)
        host, port = cluster.natives[2]
        async with await AsyncClient.connect(f"{host}:{port}") as c:
            await c.ping()
            with pytest.raises(errors.UnknownTableName):
                await c.table_id("no such table " + uuid.uuid4().hex)
    run(body())

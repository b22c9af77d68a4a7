"""The sync client against a real 3-server `shoal local`."""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

import shoalkv
from shoalkv import RejectRules, WriteItem, RemoveItem, errors, protocol as p
from shoalkv.client import Connection, Options
from shoalkv.hashing import key_hash
from shoalkv.routing import TabletMap


@pytest.fixture(scope="module")
def client(cluster):
    c = shoalkv.Client.cluster(cluster.coordinator)
    yield c
    c.close()


@pytest.fixture
def table(client):
    name = "t-" + uuid.uuid4().hex[:8]
    t = client.create_table(name)
    yield t
    drop(client, name)


def drop(client, name):
    """Drops a table that exists: the drop succeeds (a server whose copy of
    the map lost the name first once answered UNKNOWN_TABLE_NAME) and the
    table is gone."""
    client.drop_table(name)
    assert name not in client.fetch_map().tables


def test_tables_are_created_looked_up_and_dropped(client):
    name = "tables-" + uuid.uuid4().hex[:8]
    t = client.create_table(name)
    assert client.create_table(name) == t  # existing name: same id
    assert client.table_id(name) == t
    client.write(t, "k", "v")
    assert name in client.fetch_map().tables
    drop(client, name)
    with pytest.raises(errors.UnknownTableName):
        client.table_id(name)
    with pytest.raises(errors.UnknownTableName):
        client.drop_table(name)
    with pytest.raises(errors.TableError):
        client.read(t, "k")


def test_keys_route_to_each_of_the_three_servers(client, table, cluster):
    keys = [f"user:{i}".encode() for i in range(300)]
    m = client.tablet_map
    owners = {k: m.locate(table, key_hash(table, k)) for k in keys}
    assert set(owners.values()) == set(cluster.natives)
    for k in keys:
        client.write(table, k, b"v-" + k)
    # Each server holds its keys and refuses the others (UNKNOWN_TABLET),
    # asked directly on a connection of our own.
    for server in cluster.natives:
        conn = Connection(server, Options())
        try:
            mine = [k for k in keys if owners[k] == server][:5]
            theirs = [k for k in keys if owners[k] != server][:5]
            ids = conn.send([(p.READ, p.key_op(table, k)) for k in mine + theirs])
            got = [p.decode_response(*conn.wait(i)) for i in ids]
            assert [g.value for g in got[:5]] == [b"v-" + k for k in mine]
            assert all(isinstance(g, errors.UnknownTablet) for g in got[5:])
        finally:
            conn.close()
    assert all(client.read(table, k).value == b"v-" + k for k in keys)


def test_versions_and_reject_rules(client, table):
    v1 = client.write(table, "k", "one")
    assert client.read(table, "k") == (b"one", v1)
    with pytest.raises(errors.ObjectExists) as e:
        client.write(table, "k", "x", RejectRules.if_absent())
    assert e.value.version == v1
    with pytest.raises(errors.WrongVersion) as w:
        client.write(table, "k", "x", RejectRules.if_version(v1 + 100))
    assert w.value.version == v1
    v2 = client.write(table, "k", "two", RejectRules.if_version(v1))
    assert v2 > v1 and client.read(table, "k") == (b"two", v2)
    with pytest.raises(errors.WrongVersion):
        client.read(table, "k", RejectRules.if_newer_than(v2))
    assert client.read(table, "k", RejectRules.if_newer_than(v1)).version == v2
    with pytest.raises(errors.WrongVersion):
        client.remove(table, "k", RejectRules.if_version(v1))
    assert client.remove(table, "k", RejectRules.if_version(v2)) == v2
    with pytest.raises(errors.ObjectDoesntExist):
        client.read(table, "k")
    assert client.get(table, "k") is None
    assert client.remove(table, "k") is None
    with pytest.raises(errors.ObjectDoesntExist):
        client.write(table, "k", "x", RejectRules.if_present())
    assert client.write(table, "k", "new", RejectRules.if_absent()) > v2  # versions never go back


def test_increment(client, table):
    assert client.increment(table, "n") == (1, client.read(table, "n").version)
    assert client.increment(table, "n", -11).value == -10
    assert client.read(table, "n").value == b"-10"  # a counter is decimal ASCII
    client.write(table, "c", "41")
    assert client.increment(table, "c").value == 42
    client.write(table, "s", "abc")
    with pytest.raises(errors.NotAnInteger):
        client.increment(table, "s")
    client.write(table, "max", str(2**63 - 1))
    with pytest.raises(errors.Overflow):
        client.increment(table, "max")
    with pytest.raises(errors.CounterError):
        client.increment(table, "max")
    with pytest.raises(errors.ObjectDoesntExist):
        client.increment(table, "absent", 1, RejectRules.if_present())


def test_multi_ops_across_servers(client, table):
    n = 200
    versions = client.multi_write([(table, f"m{i}", f"v{i}") for i in range(n)])
    assert all(isinstance(v, int) and v > 0 for v in versions)
    got = client.multi_read([(table, f"m{i}") for i in range(n)] + [(table, "missing")])
    assert [g.value for g in got[:n]] == [f"v{i}".encode() for i in range(n)]
    assert isinstance(got[n], errors.ObjectDoesntExist)
    mixed = client.multi_write([WriteItem(table, "m0", "again", RejectRules.if_absent()),
                                WriteItem(table, "m1", "again", RejectRules.if_version(versions[1]))])
    assert isinstance(mixed[0], errors.ObjectExists) and mixed[0].version == versions[0]
    assert isinstance(mixed[1], int) and mixed[1] > versions[1]
    removed = client.multi_remove([(table, f"m{i}") for i in range(n)] + [RemoveItem(table, "missing")])
    assert removed[1] == mixed[1] and removed[2] == versions[2] and removed[n] is None
    assert all(isinstance(r, errors.ObjectDoesntExist) for r in client.multi_read([(table, "m0"), (table, "m5")]))
    assert client.multi_read([]) == []


def test_enumerate_returns_every_object_once_across_tablets(client, table):
    n = 500
    client.multi_write([(table, f"e{i}", f"{i}") for i in range(n)])
    seen = Counter(o.key for o in client.scan(table, page_size=37))
    assert seen == Counter(f"e{i}".encode() for i in range(n))
    assert {o.key: o.value for o in client.scan(table)}[b"e7"] == b"7"
    page = client.enumerate(table, 0, 10)
    assert page.next_cursor is not None and 0 < len(page.objects)


def test_enumerate_an_empty_table(client, table):
    assert list(client.scan(table)) == []


def test_time_to_live(client, table):
    v = client.write(table, "temp", "x", ttl=0.5)
    ttl = client.ttl(table, "temp")
    assert ttl.version == v and 0 < ttl.remaining_ms <= 500
    assert abs(ttl.expires_at_ms - time.time() * 1000) < 5000
    client.write(table, "kept", "x", ttl=0.5)
    client.write(table, "kept", "y")  # a plain write clears the expiry
    assert client.ttl(table, "kept").expires_at_ms is None
    time.sleep(0.8)
    with pytest.raises(errors.ObjectDoesntExist):
        client.read(table, "temp")
    assert client.read(table, "kept").value == b"y"
    with pytest.raises(ValueError):
        client.write(table, "k", "v", ttl=0)


def test_pipeline_keeps_order_across_servers(client, table):
    pl = client.pipeline()
    n = 3000  # ~400 KB of requests: written while responses are read
    for i in range(n):
        pl.write(table, f"p{i}", b"x" * 100)
    for i in range(n):
        pl.read(table, f"p{i}")
    pl.read(table, "missing").increment(table, "pc", 5)
    results = pl.execute()
    assert len(results) == 2 * n + 2 and len(pl) == 0
    assert all(isinstance(v, int) and v > 0 for v in results[:n])
    assert [r for r in results[n:2 * n]] == [(b"x" * 100, v) for v in results[:n]]
    assert isinstance(results[2 * n], errors.ObjectDoesntExist)
    assert results[2 * n + 1].value == 5
    with pytest.raises(errors.ObjectDoesntExist):
        client.pipeline().read(table, "missing").execute(raise_on_error=True)


def test_responses_are_matched_by_request_id(client, table, cluster):
    client.write(table, "a", "1")
    addr = client.tablet_map.locate(table, key_hash(table, b"a"))
    conn = Connection(addr, Options())
    try:
        ids = conn.send([(p.READ, p.key_op(table, b"a"))] * 50 + [(p.PING, b"")])
        assert len(set(ids)) == 51
        for rid in reversed(ids):  # waited for in the opposite order
            opcode, body = conn.wait(rid)
            assert opcode == (p.PING if rid == ids[-1] else p.READ)
    finally:
        conn.close()


def test_pool_is_shared_by_threads_and_bounded(cluster, table):
    c = shoalkv.Client.cluster(cluster.coordinator, pool_size=3)
    failures = []

    def work(t: int) -> None:
        try:
            for i in range(100):
                k = f"thread{t}-{i}"
                c.write(table, k, k)
                assert c.read(table, k).value == k.encode()
        except Exception as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not failures
    assert all(0 < c.pool(a).size <= 3 for a in cluster.natives)
    c.close()


def test_a_stale_map_is_refreshed(cluster, table):
    c = shoalkv.Client.cluster(cluster.coordinator)
    real = c.tablet_map
    # Everything of the table on the first server: the other servers' keys
    # are refused until the client fetches the real map.
    c._map = TabletMap([(table, 0, 2**64 - 1, cluster.natives[0])], admin=real.admin, version=0)
    for i in range(50):
        c.write(table, f"s{i}", "v")
    assert c.tablet_map.version >= real.version and c.tablet_map.names_table(table)
    assert c.tablet_map.locate(table, key_hash(table, b"s1")) == real.locate(table, key_hash(table, b"s1"))
    c.close()


def test_single_server_client(cluster, client, table):
    # A client of one server sends everything there: its own keys are
    # served, the others are refused and, with no coordinator to ask, the
    # refusals are reported once retries are spent.
    server = cluster.natives[0]
    keys = [f"one{i}" for i in range(40)]
    client.multi_write([(table, k, k) for k in keys])
    single = shoalkv.Client(f"{server[0]}:{server[1]}")
    single.ping()
    results = single.multi_read([(table, k) for k in keys])
    owner = client.tablet_map
    for k, r in zip(keys, results):
        if owner.locate(table, key_hash(table, k.encode())) == server:
            assert r.value == k.encode()
        else:
            assert isinstance(r, errors.UnavailableError) and isinstance(r.last, errors.UnknownTablet)
    single.close()


def test_size_errors(client, table):
    with pytest.raises(errors.KeyTooLarge) as e:
        client.write(table, b"k" * 70000, "v")
    assert e.value.length == 70000 and isinstance(e.value, errors.LimitError)
    with pytest.raises(errors.ValueTooLarge):
        client.write(table, "k", b"v" * (1536 << 10))
    small = shoalkv.Client.cluster(client.coordinator, max_body=100)
    with pytest.raises(errors.RequestTooLarge):
        small.write(table, "k", b"v" * 200)
    small.close()


def test_unknown_table_id(client):
    with pytest.raises(errors.UnknownTable) as e:
        client.read(987654, "k")
    assert e.value.table == 987654


def test_stats_and_ping(client, table):
    client.ping()
    stats = client.stats()
    assert isinstance(stats["objects"], int) and isinstance(stats["log_utilisation"], float)


def test_unreachable_coordinator():
    with pytest.raises(errors.ClusterError):
        shoalkv.Client.cluster("127.0.0.1:1", timeout=2)
    with pytest.raises(errors.ShoalConnectionError):
        shoalkv.Client("127.0.0.1:1", timeout=2).ping()

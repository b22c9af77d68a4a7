"""AUTH and TLS on the native port: a one-server `shoal local --tls` with a
password (mutual TLS, throwaway CA in <root>/tls)."""
from __future__ import annotations

import asyncio
import ssl

import pytest

import shoalkv
from shoalkv import errors

from conftest import Cluster

PASSWORD = "correct horse"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("shoal1-tls"), servers=1, extra=["--tls"],
                env={"SHOAL_PASSWORD": PASSWORD})
    with shoalkv.Client.cluster(c.coordinator, ssl_context=tls(c), password=PASSWORD) as client:
        c.wait_serving(client)
    yield c
    c.stop()


def tls(secure, client_cert: bool = True) -> ssl.SSLContext:
    d = secure.root / "cluster" / "tls"
    if client_cert:
        return shoalkv.tls_context(str(d / "ca.crt"), str(d / "client.crt"), str(d / "client.key"))
    return shoalkv.tls_context(str(d / "ca.crt"))


def test_tls_and_password(secure):
    with shoalkv.Client.cluster(secure.coordinator, ssl_context=tls(secure), password=PASSWORD) as c:
        t = c.create_table("secrets")
        v = c.write(t, "k", "v")
        assert c.read(t, "k") == (b"v", v)
        pl = c.pipeline()
        for i in range(500):
            pl.write(t, f"p{i}", b"x" * 1000)  # 0.5 MB through the TLS draining path
        assert all(isinstance(r, int) for r in pl.execute())
        assert c.stats()["tls_handshakes"] >= 1


def test_wrong_password_and_no_password(secure):
    with pytest.raises(errors.AuthFailed):
        shoalkv.Client.cluster(secure.coordinator, ssl_context=tls(secure), password="wrong").ping()
    c = shoalkv.Client.cluster(secure.coordinator, ssl_context=tls(secure))
    c.ping()  # PING needs no login
    with pytest.raises(errors.NotAuthenticated):
        c.table_id("secrets")
    with pytest.raises(errors.AuthError):
        c.read(1, "k")


def test_clear_text_on_a_tls_port_and_missing_client_certificate(secure):
    with pytest.raises(errors.MalformedRequest, match="TLS"):
        shoalkv.Client.cluster(secure.coordinator, password=PASSWORD).ping()
    with pytest.raises(errors.ShoalConnectionError):
        shoalkv.Client.cluster(secure.coordinator, ssl_context=tls(secure, client_cert=False),
                               password=PASSWORD, timeout=3).table_id("secrets")


def test_asyncio_over_tls(secure):
    async def body():
        a = await shoalkv.AsyncClient.connect_cluster(secure.coordinator, ssl_context=tls(secure), password=PASSWORD)
        try:
            t = await a.create_table("secrets")
            await asyncio.gather(*[a.write(t, f"a{i}", "v") for i in range(100)])
            assert (await a.read(t, "a99")).value == b"v"
        finally:
            await a.close()
        wrong = await shoalkv.AsyncClient.connect_cluster(secure.coordinator, ssl_context=tls(secure), password="no")
        with pytest.raises(errors.AuthFailed):
            await wrong.ping()
        await wrong.close()
    asyncio.run(body())

"""A client given several coordinator addresses (a leader and its
standbys) fetches the map from the one that listens, and follows the
leader when it moves. The coordinators here are sockets of this test that
answer GET_MAP; only the leader listens, as with real coordinators."""
from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Dict, Optional, Tuple

import pytest

import shoalkv
from shoalkv.client import coordinator_list
from shoalkv.errors import ClusterError
from shoalkv.routing import control_frame

MAP: Dict[str, Any] = {
    "version": 3,
    "servers": [{"id": 1, "native": "127.0.0.1:1", "state": "up"}],
    "tables": [{"id": 5, "name": "t"}],
    "tablets": [{"table": 5, "start_hash": 0, "end_hash": 2**64 - 1, "master": 1}],
}


class FakeLeader:
    """Answers every GET_MAP on a listening socket with ``MAP`` at ``version``."""

    def __init__(self, version: int, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.addr: Tuple[str, int] = self.sock.getsockname()
        self.reply = control_frame({"reply": "map", "map": dict(MAP, version=version)})
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(self.reply)

    def close(self) -> None:
        # Wakes the blocked accept(), so the port stops listening at once.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


def unused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_coordinator_lists_parse() -> None:
    assert coordinator_list("127.0.0.1:1, 127.0.0.1:2") == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    assert coordinator_list(("h", 3)) == [("h", 3)]
    assert coordinator_list(["127.0.0.1:4", ("h", 5)]) == [("127.0.0.1", 4), ("h", 5)]
    with pytest.raises(ValueError):
        coordinator_list(" , ")


def test_the_client_finds_the_listening_coordinator_and_follows_a_new_leader() -> None:
    standby_port = unused_port()
    leader = FakeLeader(3)
    try:
        addrs = f"127.0.0.1:{standby_port},127.0.0.1:{leader.addr[1]}"
        c = shoalkv.Client.cluster(addrs, timeout=2)
        assert c.coordinator == leader.addr and c.tablet_map.version == 3
        # The leader goes; the standby takes over at its own address.
        leader.close()
        new = FakeLeader(4, standby_port)
        try:
            c.refresh_map()
            assert c.coordinator == new.addr and c.tablet_map.version == 4
        finally:
            new.close()
        # None listens: the map held stays, and a fetch names every address.
        c.refresh_map()
        assert c.tablet_map.version == 4
        with pytest.raises(ClusterError, match=str(standby_port)):
            c.fetch_map()
    finally:
        leader.close()


def test_the_async_client_finds_the_listening_coordinator() -> None:
    leader = FakeLeader(7)
    standby_port = unused_port()

    async def run() -> Optional[Tuple[str, int]]:
        c = await shoalkv.AsyncClient.connect_cluster([("127.0.0.1", standby_port), leader.addr], timeout=2)
        assert c.tablet_map.version == 7
        await c.close()
        return c.coordinator

    try:
        assert asyncio.run(run()) == leader.addr
    finally:
        leader.close()

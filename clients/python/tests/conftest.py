"""Fixtures: a real ``shoal local`` cluster on free ports, started by the
test session and stopped (by PID) at its end.

The binary is ``$SHOAL_BIN``, else the repository's ``target/debug/shoal``.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import shoalkv
from shoalkv.hashing import key_hash

REPO = Path(__file__).resolve().parents[3]
STARTUP_SECONDS = 60


def shoal_bin() -> str:
    env = os.environ.get("SHOAL_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "shoal"
    if not path.is_file():
        pytest.fail(f"no shoal binary at {path}: build it (cargo build -p shoal) or set SHOAL_BIN")
    return str(path)


def get_map(coordinator: Tuple[str, int]) -> Dict:
    with socket.create_connection(coordinator, timeout=5) as s:
        body = b'{"op":"get_map"}'
        s.sendall(struct.pack("<I", len(body)) + body)
        f = s.makefile("rb")
        (n,) = struct.unpack("<I", f.read(4))
        return json.loads(f.read(n))["map"]


def addr(text: str) -> Tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def children(pid: int) -> List[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


class Cluster:
    """A running ``shoal local``: its coordinator, servers and their PIDs."""

    def __init__(self, root: Path, servers: int, extra: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None, log_level: str = "warn") -> None:
        self.root = root
        self.servers = servers
        self.out_path = root / "local.out"
        cmd = [shoal_bin(), "local", "--servers", str(servers), "--root", str(root / "cluster"),
               "--coordinator-port", "0", "--native-port", "0", "--resp-port", "0", "--memcached-port", "0",
               "--backup-port", "0", "--memory", "64MiB", "--log-level", log_level] + (extra or [])
        self.out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})})
        self.server_pids: Dict[int, int] = {}
        self.child_pids: List[int] = []
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        text = ""
        while time.monotonic() < deadline:
            text = self.out_path.read_text(errors="replace")
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal local exited ({self.proc.returncode}):\n{text}")
            m = re.search(r"coordinator:\s+(\S+)", text)
            natives = re.findall(r"server \d+: native protocol (\S+), Redis protocol (\S+),", text)
            if m and len(natives) == self.servers:
                self.coordinator = addr(m.group(1))
                self.natives = [addr(n) for n, _ in natives]
                self.resps = [addr(r.rstrip(",")) for _, r in natives]
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"shoal local did not print its ports in {STARTUP_SECONDS}s:\n{text}")
        while time.monotonic() < deadline:
            m = get_map(self.coordinator)
            if sum(s["state"] == "up" for s in m["servers"]) == self.servers:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the cluster's servers did not come up")
        self.child_pids = children(self.proc.pid)
        for pid in self.child_pids:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if len(args) > 1 and args[1] == b"server" and b"--data-dir" in args:
                data = Path(args[args.index(b"--data-dir") + 1].decode())
                self.server_pids[int((data / "server-id").read_text().strip())] = pid

    def wait_serving(self, client) -> None:
        """Waits until every server holds its master lease: a server is up in
        the map before its first lease, and refuses its keys with RETRY
        until then (which a single read absorbs). A multi-op sent before it
        has the connection closed with its replies (server issue: see
        tests/test_recovery.py)."""
        t = client.create_table("ready")
        for server in self.natives:
            key = next(k for k in (b"ready%d" % i for i in range(10000))
                       if client.tablet_map.locate(t, key_hash(t, k)) == server)
            assert client.get(t, key) is None

    def map(self) -> Dict:
        return get_map(self.coordinator)

    def kill_server(self, server_id: int) -> None:
        """SIGKILLs a server (by the PID this fixture saw it started with)."""
        os.kill(self.server_pids[server_id], signal.SIGKILL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in self.child_pids:  # only if shoal local left one behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.out.close()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = Cluster(tmp_path_factory.mktemp("shoal3"), servers=3)
    with shoalkv.Client.cluster(c.coordinator) as client:
        c.wait_serving(client)
    yield c
    c.stop()

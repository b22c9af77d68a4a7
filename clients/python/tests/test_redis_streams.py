"""redis-py's stream API against the ``shoal`` binary and a real Redis.

The comparison itself is ``crates/shoal-server/tests/resp_stream_compat.py``
(also run by ``cargo test`` against an in-process server): here it runs
against a standalone ``shoal server`` started as a user starts it, and a
real ``redis-server``, both on free loopback ports and stopped by PID.
Redis streams are served by standalone servers only (docs/streams.md).
Skips when redis-server or redis-py is missing, fails then in CI.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, shoal_bin

COMPAT = REPO / "crates" / "shoal-server" / "tests"


def _have_redis() -> bool:
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    return shutil.which("redis-server") is not None


@pytest.fixture
def standalone(tmp_path: Path):
    """A standalone ``shoal server``: its RESP port."""
    out_path = tmp_path / "server.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [shoal_bin(), "server", "--native-port", "0", "--resp-port", "0", "--no-memcached",
             "--memory", "128MiB", "--log-level", "info"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        port = None
        while port is None and time.time() < deadline:
            m = re.search(rb"Redis protocol on 127\.0\.0\.1:(\d+)", out_path.read_bytes())
            if m:
                port = int(m.group(1))
            elif proc.poll() is not None:
                pytest.fail("shoal server exited: " + out_path.read_text(errors="replace"))
            else:
                time.sleep(0.05)
        if port is None:
            pytest.fail("shoal server did not start: " + out_path.read_text(errors="replace"))
        yield port
    finally:
        proc.kill()
        proc.wait()


def test_redis_py_stream_replies_match_a_real_redis(standalone: int) -> None:
    if not _have_redis():
        if os.environ.get("CI"):
            pytest.fail("redis-server and redis-py are needed (Debian redis-server, pip install redis)")
        pytest.skip("redis-server or redis-py missing")
    sys.path.insert(0, str(COMPAT))
    try:
        import resp_stream_compat as compat
    finally:
        sys.path.remove(str(COMPAT))
    proc, redis_port = compat.start_redis("redis-server")
    try:
        for protocol in (2, 3):
            total, mismatches = compat.compare(standalone, redis_port, 20261127 + protocol, 1000, protocol)
            assert total > 1000 + len(compat.edge_ops())
            assert mismatches == [], mismatches[:5]
    finally:
        proc.kill()
        proc.wait()

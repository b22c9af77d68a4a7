#!/usr/bin/env python3
"""Throughput of shoalkv (native protocol) against redis-py on Shoal's Redis
port and redis-py on a real redis-server, same machine, same operations:
writes then reads of --keys keys of --value-size bytes, one request at a
time and pipelined (--batch requests per round trip).

Bounded: every measurement stops after --seconds even if its keys are not
all done (ops/s is what was done in the time spent). Starts its own
`shoal local` (--servers, Redis port with --cluster-mode off so plain
redis-py works) and its own redis-server on free ports, and stops both by
PID. Prints a table, then one JSON document (also written to --json).

    python3 clients/python/bench.py --keys 20000 --seconds 5
    python3 clients/python/bench.py --keys 200 --seconds 1   # smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the source tree's shoalkv if not installed

import redis  # noqa: E402

import shoalkv  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not ready in {seconds}s")


class Processes:
    """What this script started, stopped by PID at exit."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="shoalkv-bench-"))

    def shoal(self, binary: str, servers: int) -> Dict[str, str]:
        out = self.tmp / "local.out"
        cmd = [binary, "local", "--servers", str(servers), "--root", str(self.tmp / "shoal"),
               "--coordinator-port", "0", "--native-port", "0", "--resp-port", "0", "--memcached-port", "0",
               "--backup-port", "0", "--memory", "256MiB", "--cluster-mode", "off", "--log-level", "warn"]
        f = open(out, "wb")
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        found: Dict[str, str] = {}

        def ready() -> bool:
            text = out.read_text(errors="replace")
            if p.poll() is not None:
                raise RuntimeError(f"shoal local exited:\n{text}")
            c = re.search(r"coordinator:\s+(\S+)", text)
            s = re.search(r"server 1: native protocol (\S+), Redis protocol (\S+),", text)
            if c and s:
                found.update(coordinator=c.group(1), native=s.group(1), resp=s.group(2))
            return bool(found)

        wait_for(ready, 60, "shoal local")
        return found

    def redis(self, binary: str) -> int:
        port = free_port()
        p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", str(self.tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)

        def up() -> bool:
            try:
                return bool(redis.Redis(port=port, socket_timeout=1).ping())
            except redis.ConnectionError:
                return False

        wait_for(up, 20, "redis-server")
        return port

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)


def measure(run_batch: Callable[[int, int], None], n: int, batch: int, seconds: float) -> Dict[str, float]:
    """Calls run_batch(start, count) over keys 0..n in batches until done or
    out of time; returns ops done, seconds and ops/s."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while done < n and time.perf_counter() < deadline:
        count = min(batch, n - done)
        run_batch(done, count)
        done += count
    elapsed = time.perf_counter() - start
    return {"ops": done, "seconds": round(elapsed, 3), "ops_per_sec": round(done / elapsed, 1) if elapsed else 0.0}


def key(i: int) -> bytes:
    return b"bench:%d" % i


def shoal_runs(client: shoalkv.Client, table: int, value: bytes, n: int, batch: int,
               seconds: float) -> Dict[str, Dict[str, float]]:
    def write1(s: int, c: int) -> None:
        for i in range(s, s + c):
            client.write(table, key(i), value)

    def read1(s: int, c: int) -> None:
        for i in range(s, s + c):
            client.read(table, key(i))

    def writep(s: int, c: int) -> None:
        pl = client.pipeline()
        for i in range(s, s + c):
            pl.write(table, key(i), value)
        pl.execute(raise_on_error=True)

    def readp(s: int, c: int) -> None:
        pl = client.pipeline()
        for i in range(s, s + c):
            pl.read(table, key(i))
        pl.execute(raise_on_error=True)

    return {
        "write": measure(write1, n, 100, seconds),
        "read": measure(read1, n, 100, seconds),
        "write_pipelined": measure(writep, n, batch, seconds),
        "read_pipelined": measure(readp, n, batch, seconds),
    }


def redis_runs(r: "redis.Redis", value: bytes, n: int, batch: int, seconds: float) -> Dict[str, Dict[str, float]]:
    def write1(s: int, c: int) -> None:
        for i in range(s, s + c):
            r.set(key(i), value)

    def read1(s: int, c: int) -> None:
        for i in range(s, s + c):
            r.get(key(i))

    def writep(s: int, c: int) -> None:
        pl = r.pipeline(transaction=False)
        for i in range(s, s + c):
            pl.set(key(i), value)
        pl.execute()

    def readp(s: int, c: int) -> None:
        pl = r.pipeline(transaction=False)
        for i in range(s, s + c):
            pl.get(key(i))
        pl.execute()

    return {
        "write": measure(write1, n, 100, seconds),
        "read": measure(read1, n, 100, seconds),
        "write_pipelined": measure(writep, n, batch, seconds),
        "read_pipelined": measure(readp, n, batch, seconds),
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo = HERE.parents[1]
    ap.add_argument("--shoal-bin", default=os.environ.get("SHOAL_BIN", str(repo / "target" / "release" / "shoal")),
                    help="shoal binary (default $SHOAL_BIN, else target/release/shoal, else target/debug/shoal)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--servers", type=int, default=1, help="servers of the shoal local cluster (default 1)")
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100, help="requests per pipelined round trip")
    ap.add_argument("--seconds", type=float, default=3.0, help="time limit of each measurement")
    ap.add_argument("--json", help="also write the JSON here")
    args = ap.parse_args(argv)
    binary = args.shoal_bin
    if not Path(binary).is_file():
        binary = str(repo / "target" / "debug" / "shoal")
    if not Path(binary).is_file():
        ap.error(f"no shoal binary at {args.shoal_bin}: set --shoal-bin or SHOAL_BIN")

    procs = Processes()
    try:
        shoal = procs.shoal(binary, args.servers)
        redis_port = procs.redis(args.redis_server)
        value = b"v" * args.value_size
        results: Dict[str, Dict[str, Dict[str, float]]] = {}

        client = shoalkv.Client.cluster(shoal["coordinator"])
        table = client.create_table("bench")
        results["shoalkv (native)"] = shoal_runs(client, table, value, args.keys, args.batch, args.seconds)
        client.close()

        host, port = shoal["resp"].rsplit(":", 1)
        r = redis.Redis(host=host, port=int(port))
        results["redis-py -> Shoal RESP"] = redis_runs(r, value, args.keys, args.batch, args.seconds)
        r.close()

        r = redis.Redis(host="127.0.0.1", port=redis_port)
        results["redis-py -> redis-server"] = redis_runs(r, value, args.keys, args.batch, args.seconds)
        r.close()
    finally:
        procs.stop()

    ops = ["write", "read", "write_pipelined", "read_pipelined"]
    print(f"\n{'ops/s':<26}" + "".join(f"{o:>17}" for o in ops))
    for who, runs in results.items():
        print(f"{who:<26}" + "".join(f"{runs[o]['ops_per_sec']:>17,.0f}" for o in ops))
    doc = {
        "config": {"servers": args.servers, "keys": args.keys, "value_size": args.value_size, "batch": args.batch,
                   "seconds_limit": args.seconds, "shoal_bin": binary, "python": sys.version.split()[0],
                   "redis_py": redis.__version__, "shoalkv": shoalkv.__version__},
        "results": results,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Shoal's memcached port against a real memcached, reply by reply.

Two parts, each sent to both servers and compared:
  raw     fixed exchanges over raw sockets: every command, errors, meta
          commands, noreply, pipelines, oversized values (the connection
          must stay usable); cas uniques are compared by what they do, not
          their numbers.
  random  pymemcache (the client applications use) running random
          operations over a small key space, every return value compared.

Starts memcached itself (memcached -p 0 is not possible: a free port is
picked here) unless --memcached-port is given, and stops it by PID.
Prints "N checks, D differences"; exits 1 on any difference.
"""
import argparse
import random
import re
import shutil
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_memcached():
    exe = shutil.which("memcached")
    if exe is None:
        sys.exit("memcached is not installed (apt-get install memcached)")
    port = free_port()
    args = [exe, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64"]
    try:
        import os
        if os.geteuid() == 0:
            args += ["-u", "root"]
    except AttributeError:
        pass
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("memcached did not start")


class Raw:
    """One connection; `exchange` sends bytes and reads until a sentinel."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def exchange(self, data, sentinel=b"MN\r\n"):
        """Sends data then `mn`; returns everything before the last MN reply.

        Waits for one MN per `mn` line sent, not for the first MN seen: a
        server may answer a pipeline of `mn`s in several packets."""
        self.sock.sendall(data + b"mn\r\n")
        expected = (data + b"mn\r\n").split(b"\r\n").count(b"mn")
        while not (self.buf.endswith(sentinel) and self.buf.count(sentinel) >= expected):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                break
            self.buf += chunk
        out, self.buf = self.buf[: -len(sentinel)], b""
        return out

    def close(self):
        self.sock.close()


def normalize(reply):
    """Replaces numbers that differ by design: cas uniques, times, versions."""
    reply = re.sub(rb"(VALUE \S+ \d+ \d+) \d+\r\n", rb"\1 <cas>\r\n", reply)
    reply = re.sub(rb"( c)\d+", rb"\1<cas>", reply)
    reply = re.sub(rb"VERSION \S+", rb"VERSION <v>", reply)
    return reply


RAW_CASES = [
    # storage and retrieval
    b"set a 0 0 5\r\nhello\r\nget a\r\ngets a\r\nget a nokey a\r\n",
    b"set f 4294967295 0 2\r\nhi\r\nget f\r\nset f 7 0 0\r\n\r\nget f\r\n",
    b"add a 0 0 1\r\nx\r\nadd n1 3 0 1\r\nx\r\nget n1\r\nreplace n2 0 0 1\r\nx\r\nreplace a 5 0 3\r\nabc\r\nget a\r\n",
    b"append a 9 0 2\r\nde\r\nprepend a 9 0 2\r\nzz\r\nget a\r\nappend nokey 0 0 1\r\nx\r\nprepend nokey 0 0 1\r\nx\r\n",
    b"cas nokey 0 0 1 1\r\nx\r\ncas a 0 0 1 999999\r\nx\r\n",
    # delete, touch, gat
    b"set d 0 0 1\r\nx\r\ndelete d\r\ndelete d\r\ndelete d 0\r\ndelete d 5\r\ndelete d noreply\r\ndelete d 0 noreply\r\n",
    b"set t 0 0 1\r\nx\r\ntouch t 100\r\ntouch nokey 100\r\ntouch t abc\r\ngat 100 t nokey\r\ngats 0 t\r\ngat abc t\r\ngat\r\ngats 1\r\n",
    # expiry
    b"set e 0 -1 1\r\nx\r\nget e\r\nset e 0 1000 1\r\nx\r\nget e\r\nset e 0 1 1\r\nx\r\nset e2 0 2000000000 1\r\ny\r\nget e2\r\n",
    b"set old 0 1000000000 1\r\nx\r\nget old\r\n",
    # counters
    b"set c 0 0 2\r\n10\r\nincr c 5\r\ndecr c 3\r\ndecr c 100\r\nincr nokey 1\r\nincr c x\r\nincr c -1\r\n",
    b"set big 0 0 20\r\n18446744073709551615\r\nincr big 1\r\nset s 0 0 3\r\nabc\r\nincr s 1\r\ndecr s 1\r\n",
    b"set sp 0 0 3\r\n 12\r\nincr sp 1\r\nincr c 18446744073709551616\r\n",
    # noreply: only the final get answers
    b"set q 0 0 1 noreply\r\na\r\nappend q 0 0 1 noreply\r\nb\r\nincr q 1 noreply\r\nadd q 0 0 1 noreply\r\nz\r\nget q\r\n",
    b"set n 0 0 1 noreply\r\n5\r\nincr n 2 noreply\r\ndecr n 1 noreply\r\ntouch n 10 noreply\r\nget n\r\n",
    # errors
    b"bogus\r\n\r\nGET a\r\nset\r\nset a\r\nset a 0 0\r\nget\r\n",
    b"set a abc 0 1\r\nx\r\nset a 0 abc 1\r\nx\r\nset a 0 0 -1\r\nset a 0 0 abc\r\n",
    b"get " + b"k" * 251 + b"\r\nset " + b"k" * 251 + b" 0 0 1\r\nx\r\nget " + b"k" * 250 + b"\r\n",
    b"set bad 0 0 1\r\nxyz\r\nget bad\r\nset bad2 0 0 1 noreply\r\nxyz\r\n",
    b"incr\r\ntouch a\r\ndelete\r\nverbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nflush_all abc\r\n",
    b"cas a 0 0 1\r\nx\r\nstats foo\r\nversion\r\n",
    # a value over the limit: answered, its data discarded, the connection usable
    b"set toobig 0 0 2000000\r\n" + b"z" * 2000000 + b"\r\nget toobig\r\nset ok 0 0 1\r\nk\r\nget ok\r\n",
    b"set toobig 0 0 2000000 noreply\r\n" + b"z" * 2000000 + b"\r\nms toobig 2000000\r\n" + b"z" * 2000000 + b"\r\nget ok\r\n",
    # meta get
    b"set m 5 0 2\r\nhi\r\nmg m v\r\nmg m\r\nmg m k v f s t q O123\r\nmg nokey v\r\nmg nokey v q\r\nmg m q\r\nmg m s v f t\r\n",
    b"mg m v v\r\nmg m Z\r\nmg m O" + b"x" * 40 + b"\r\nmg\r\nmg " + b"k" * 251 + b" v\r\nmg m T30 t v\r\nmg m c\r\n",
    # meta set
    b"ms ms1 2\r\nhi\r\nmg ms1 v f t\r\nms ms1 2 T0 F7 c\r\nho\r\nmg ms1 v f\r\nms ms1 2 q\r\nhx\r\nms ms1 2 k O5\r\nhy\r\n",
    b"ms ms2 2 ME\r\nab\r\nms ms2 2 ME\r\ncd\r\nms ms2 2 MA\r\nef\r\nms ms2 2 MP\r\n01\r\nmg ms2 v\r\nms ms3 2 MR\r\nxx\r\nms ms3 2 MA\r\nxx\r\n",
    b"ms ms4 2 MS\r\nxx\r\nms ms4 2 ms\r\nyy\r\nmg ms4 v\r\nms ms4 2 MX\r\nzz\r\nms ms4 2 Z\r\nzz\r\nms ms4 2 I\r\nzz\r\nmg ms4 v\r\n",
    b"ms nokey2 2 C1\r\nhi\r\nms ms4 2 C1\r\nhi\r\nms\r\nms ms4\r\nms ms4 x\r\nms ms4 2 T-1\r\nab\r\nmg ms4 v\r\n",
    # meta delete
    b"set md1 0 0 1\r\nx\r\nmd md1 q\r\nmd md1 q\r\nmd md1\r\nset md1 0 0 1\r\nx\r\nmd md1 k O7\r\nmd md1 C1\r\nmd md1 Z\r\nmd\r\n",
    b"set md2 0 0 1\r\nx\r\nmd md2 C1\r\nmg md2 v\r\n",
    # meta arithmetic
    b"ma mc\r\nma mc q\r\nma mc N0 J5\r\nma mc v\r\nma mc MD D10 v\r\nma mc q\r\nma mc v t\r\nma mc M+ D2 v\r\nma mc M- v\r\n",
    b"set ms5 0 0 1\r\nx\r\nma ms5\r\nma mc Dx\r\nma mc MQ\r\nma mc Z\r\nma\r\nma mc N0 k O3 t\r\nma mc C1\r\n",
    b"mn\r\nmn\r\n",
]


def run_raw(shoal_port, mc_port, report):
    for port in (shoal_port, mc_port):
        r = Raw(port)
        r.exchange(b"flush_all\r\n")
        r.close()
    for i, case in enumerate(RAW_CASES):
        replies = []
        for port in (shoal_port, mc_port):
            r = Raw(port)
            replies.append(normalize(r.exchange(case)))
            r.close()
        report(f"raw case {i}: {case[:70]!r}", replies[0], replies[1])
    # cas uniques do the same on both: the one gets gave wins once, then loses.
    for name, port in (("shoal", shoal_port), ("memcached", mc_port)):
        pass
    results = []
    for port in (shoal_port, mc_port):
        r = Raw(port)
        got = r.exchange(b"set casme 0 0 1\r\nx\r\ngets casme\r\n")
        cas = re.search(rb"VALUE casme 0 1 (\d+)", got).group(1)
        out = r.exchange(b"cas casme 0 0 1 " + cas + b"\r\ny\r\ncas casme 0 0 1 " + cas + b"\r\nz\r\nget casme\r\n")
        got = r.exchange(b"mg casme c\r\n")
        c = re.search(rb"HD c(\d+)", got).group(1)
        out += r.exchange(b"ms casme 1 C" + c + b"\r\nw\r\nms casme 1 C" + c + b"\r\nv\r\nmg casme v\r\n")
        got = r.exchange(b"mg casme c\r\n")
        c = re.search(rb"HD c(\d+)", got).group(1)
        out += r.exchange(b"md casme C" + c + b"1\r\nmd casme C" + c + b"\r\nmg casme v\r\n")
        results.append(out)
        r.close()
    report("cas uniques", results[0], results[1])
    # A pipeline of many noreply writes in one send, then one read.
    results = []
    for port in (shoal_port, mc_port):
        r = Raw(port)
        # (4 digits that stay 4 digits: memcached pads a counter that
        # shrinks with spaces, Shoal does not; see docs/memcached.md)
        batch = b"".join(b"set p%d 0 0 4 noreply\r\n%04d\r\n" % (i, i + 1000) for i in range(2000))
        batch += b"".join(b"incr p%d 1 noreply\r\n" % i for i in range(2000))
        out = r.exchange(batch + b"get p0 p1 p1999\r\n")
        results.append(out)
        r.close()
    report("noreply pipeline", results[0], results[1])


def unpad(result):
    """memcached writes a counter that shrinks in place, padded with
    spaces ("9 " after decr of "10"); Shoal stores the digits alone, so that
    Redis INCR reads them. Compared without that padding."""
    if isinstance(result, bytes) and re.fullmatch(rb"\d+ +", result):
        return result.rstrip(b" ")
    if isinstance(result, dict):
        return {k: unpad(v) for k, v in result.items()}
    if isinstance(result, tuple):
        return tuple(unpad(v) for v in result)
    return result


def run_random(shoal_port, mc_port, ops, seed, report):
    from pymemcache.client.base import Client

    clients = [Client(("127.0.0.1", p), default_noreply=False, connect_timeout=5, timeout=10) for p in (shoal_port, mc_port)]
    for c in clients:
        c.flush_all()
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(40)]
    # Counters live apart: memcached pads a counter that shrinks with
    # spaces, which an append would then expose (see unpad).
    counters = [f"c{i}" for i in range(8)]
    for n in range(ops):
        op = rng.choice(["set", "get", "get_many", "add", "replace", "append", "prepend", "incr", "decr",
                         "delete", "touch", "gets_cas", "set_many", "gat"])
        key = rng.choice(keys)
        value = rng.choice([b"", b"v", b"12", b"%d" % rng.randrange(1000), b"x" * rng.randrange(1, 3000)])
        if op in ("incr", "decr") or (op in ("set", "add", "replace", "get", "touch", "delete") and rng.random() < 0.3):
            key = rng.choice(counters)
            value = b"%d" % rng.randrange(10**rng.randrange(1, 20))
        flags = rng.choice([0, 0, 1, 42, 2**32 - 1])
        expire = rng.choice([0, 0, 0, 100, -1])

        def call(c):
            if op == "set":
                return c.set(key, value, expire=expire, flags=flags)
            if op == "get":
                return c.get(key)
            if op == "get_many":
                return c.get_many(rng_keys)
            if op == "add":
                return c.add(key, value, expire=expire, flags=flags)
            if op == "replace":
                return c.replace(key, value, expire=expire, flags=flags)
            if op == "append":
                return c.append(key, value)
            if op == "prepend":
                return c.prepend(key, value)
            if op in ("incr", "decr"):
                try:
                    return getattr(c, op)(key, delta)
                except Exception as e:  # non-numeric value
                    return f"{type(e).__name__}: {e}"
            if op == "delete":
                return c.delete(key)
            if op == "touch":
                return c.touch(key, expire=expire)
            if op == "gat":
                return c.touch(key, expire=100), c.get(key)
            if op == "set_many":
                return c.set_many({k: value for k in rng_keys}, expire=expire)
            if op == "gets_cas":
                got, cas = c.gets(key)
                if cas is None:
                    return ("missing", c.cas(key, value, b"1"))
                return (got, c.cas(key, value, cas), c.cas(key, value, cas))
            raise AssertionError(op)

        rng_keys = rng.sample(keys, rng.randrange(1, 6))
        delta = rng.randrange(0, 1000)
        results = [unpad(call(c)) for c in clients]
        report(f"op {n}: {op} {key}", results[0], results[1])
    for c in clients:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--memcached-port", type=int)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    proc = None
    mc_port = args.memcached_port
    if mc_port is None:
        proc, mc_port = start_memcached()
    checks = 0
    diffs = 0

    def report(what, shoal, memcached):
        nonlocal checks, diffs
        checks += 1
        if shoal != memcached:
            diffs += 1
            if diffs <= 30:
                print(f"DIFFERENT {what}\n  shoal:     {shoal!r}\n  memcached: {memcached!r}")

    try:
        run_raw(args.shoal_port, mc_port, report)
        run_random(args.shoal_port, mc_port, args.ops, args.seed, report)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    print(f"memcached_compat: {checks} checks, {diffs} differences")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()

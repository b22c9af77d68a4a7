#!/usr/bin/env python3
"""Runs the same seeded random sequence of supported commands against Shoal
and against a real Redis, through redis-py, and compares every reply,
errors included (exception type and message).

Usage: resp_compat.py --shoal-port PORT [--seed N] [--ops N]
                      [--redis-port PORT | --redis-server PATH]

Without --redis-port it starts `redis-server` itself on a free loopback port
(no persistence) and stops it at the end. Both protocols are exercised: the
sequence runs once over RESP2 and once over RESP3 (HELLO 3). Exits 1 on any
difference, printing the first ones.

Commands whose replies differ by design are left out: SET with EX/PX (keys
do not expire in Shoal), CLIENT ID, INFO, COMMAND, HELLO's server fields,
TIME's value; KEYS is compared sorted (the order is the store's), SETRANGE
offsets stay below the largest value Shoal accepts.
"""

import argparse
import random
import socket
import subprocess
import sys
import time

import redis

KEYS = [b"k%d" % i for i in range(8)] + [b"n%d" % i for i in range(4)] + [b"", b"sp ace", b"\x00\xff"]
VALUES = [
    b"", b"v", b"hello", b"0", b"1", b"-1", b"42", b"-17", b"01", b"+1", b" 1", b"1.5", b"-0",
    b"9223372036854775807", b"-9223372036854775808", b"9223372036854775806", b"18446744073709551616",
    b"\x00\x01binary\xff", b"x" * 300,
]
DELTAS = [b"1", b"-1", b"0", b"5", b"-100", b"9223372036854775807", b"-9223372036854775808",
          b"abc", b"", b"1.0", b"+3", b"007", b"99999999999999999999"]
PATTERNS = [b"*", b"k*", b"n?", b"*1*", b"[kn]0", b"[^k]*", b"k\\*", b"nomatch*", b"?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(path):
    port = free_port()
    proc = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            redis.Redis(port=port, socket_timeout=1).ping()
            return proc, port
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start on port %d" % port)


def gen_ops(rng, n):
    """A list of commands (argument lists); "SCAN-ALL" is a whole iteration."""
    key = lambda: rng.choice(KEYS)
    val = lambda: rng.choice(VALUES)
    ops = []
    for _ in range(n):
        r = rng.random()
        c = rng.randrange(40)
        if c == 0:
            opts = rng.choice([[], [b"NX"], [b"XX"], [b"GET"], [b"NX", b"GET"], [b"XX", b"GET"],
                               [b"nx", b"xx"], [b"FOO"], [b"GET", b"GET"], [b"KEEPTTL", b"EX"]])
            ops.append([b"SET", key(), val()] + opts)
        elif c in (1, 2):
            ops.append([b"GET", key()])
        elif c == 3:
            ops.append([b"GETSET", key(), val()])
        elif c == 4:
            ops.append([b"SETNX", key(), val()])
        elif c == 5:
            ops.append([rng.choice([b"DEL", b"UNLINK"])] + [key() for _ in range(rng.randrange(1, 4))])
        elif c == 6:
            ops.append([b"EXISTS"] + [key() for _ in range(rng.randrange(1, 4))])
        elif c == 7:
            ops.append([b"MGET"] + [key() for _ in range(rng.randrange(1, 5))])
        elif c == 8:
            args = [b"MSET"]
            for _ in range(rng.randrange(1, 4)):
                args += [key(), val()]
            if r < 0.1:
                args.append(key())
            ops.append(args)
        elif c == 9:
            args = [b"MSETNX"]
            for _ in range(rng.randrange(1, 3)):
                args += [key(), val()]
            ops.append(args)
        elif c in (10, 11, 12):
            ops.append([rng.choice([b"INCR", b"DECR"]), key()])
        elif c in (13, 14):
            ops.append([rng.choice([b"INCRBY", b"DECRBY"]), key(), rng.choice(DELTAS)])
        elif c == 15:
            ops.append([b"APPEND", key(), val()])
        elif c == 16:
            ops.append([b"STRLEN", key()])
        elif c == 17:
            ops.append([b"DBSIZE"])
        elif c == 18:
            ops.append([b"SELECT", rng.choice([b"0", b"0", b"1", b"2", b"16", b"-1", b"x", b"01"])])
        elif c == 19:
            ops.append([b"ECHO", val()])
        elif c == 20:
            ops.append([b"PING"] + ([val()] if r < 0.5 else []))
        elif c == 21:
            ops.append(rng.choice([[b"GET"], [b"GET", b"a", b"b"], [b"INCR"], [b"SET", b"k"], [b"MGET"],
                                   [b"ECHO"], [b"PING", b"a", b"b"], [b"STRLEN"], [b"DBSIZE", b"x"],
                                   [b"SELECT"], [b"MSETNX", b"a"], [b"DEL"], [b"INCRBY", b"k"]]))
        elif c == 22:
            ops.append(rng.choice([[b"FOO"], [b"foo", b"a", b"b"], [b"nosuch", b"x" * 200],
                                   [b"nul\x00l", b"a\x00b"], [b"X" * 200, b"y"]]))
        elif c == 23 and r < 0.1:
            ops.append([b"FLUSHDB"] + rng.choice([[], [b"ASYNC"], [b"SYNC"], [b"BAD"]]))
        elif c == 24:
            opts = rng.choice([[], [b"MATCH", rng.choice(PATTERNS)], [b"COUNT", b"3"],
                               [b"MATCH", rng.choice(PATTERNS), b"COUNT", b"2"], [b"TYPE", b"string"],
                               [b"TYPE", b"list"]])
            ops.append([b"SCAN-ALL"] + opts)
        elif c == 25:
            ops.append(rng.choice([[b"SCAN", b"0", b"COUNT", b"0"], [b"SCAN", b"0", b"COUNT", b"x"],
                                   [b"SCAN", b"abc"], [b"SCAN", b"0", b"MATCH"], [b"SCAN", b"0", b"BAD", b"1"],
                                   [b"SCAN", b" 1"]]))
        elif c == 26:
            ops.append([b"CONFIG", b"GET", rng.choice([b"save", b"appendonly", b"databases",
                                                         b"maxmemory-policy", b"nosuchparam"])])
        elif c == 27:
            ops.append(rng.choice([[b"CONFIG"], [b"CONFIG", b"GET"], [b"CONFIG", b"nope"],
                                   [b"CLIENT"], [b"CLIENT", b"nope"], [b"CLIENT", b"SETNAME"],
                                   [b"CLIENT", b"GETNAME", b"x"], [b"COMMAND", b"nope"]]))
        elif c == 28:
            ops.append(rng.choice([[b"CLIENT", b"SETNAME", rng.choice([b"me", b"", b"a b", b"x\ny"])],
                                   [b"CLIENT", b"GETNAME"]]))
        elif c == 29:
            ops.append(rng.choice([[b"HELLO", b"x"], [b"HELLO", b"4"], [b"HELLO", b"1"],
                                   [b"HELLO", b"2", b"BAD"], [b"HELLO", b"2", b"SETNAME", b"a b"]]))
        elif c == 30:
            ops.append([b"SET", key(), val(), rng.choice([b"NX", b"XX", b"GET"]), rng.choice([b"XX", b"NX", b"GET"])])
        elif c == 31:
            ops.append([b"GETDEL", key()])
        elif c == 32:
            ops.append([b"GETRANGE", key(), rng.choice([b"0", b"1", b"-1", b"-3", b"5", b"x", b"-100"]),
                        rng.choice([b"-1", b"0", b"2", b"-2", b"100", b"y", b"-200"])])
        elif c == 33:
            ops.append([b"SETRANGE", key(), rng.choice([b"0", b"1", b"3", b"10", b"-1", b"x", b"600"]), val()])
        elif c == 34:
            ops.append([b"TYPE", key()])
        elif c == 35:
            ops.append([b"KEYS-SORTED", rng.choice(PATTERNS)])
        elif c == 36 and r < 0.05:
            ops.append([b"FLUSHALL"] + rng.choice([[], [b"ASYNC"], [b"SYNC"], [b"BAD"]]))
        elif c == 37:
            ops.append(rng.choice([[b"GETDEL"], [b"GETRANGE", b"k"], [b"SETRANGE", b"k", b"1"], [b"TYPE"],
                                   [b"KEYS"], [b"KEYS", b"a", b"b"], [b"TIME", b"x"], [b"FLUSHALL", b"A", b"B"]]))
        else:
            ops.append([b"GET", key()])
    return ops


def run(client, op):
    """The outcome of one op: ("ok", reply) or ("err", type, message)."""
    try:
        if op[0] == b"SCAN-ALL":
            cursor, keys = 0, []
            for _ in range(10000):
                cursor, page = client.execute_command(b"SCAN", cursor, *op[1:])
                keys += page
                if int(cursor) == 0:
                    break
            return ("ok", sorted(keys))
        if op[0] == b"KEYS-SORTED":
            return ("ok", sorted(client.execute_command(b"KEYS", *op[1:])))
        return ("ok", client.execute_command(*op))
    except redis.exceptions.ResponseError as e:
        return ("err", type(e).__name__, str(e))


def compare(shoal_port, redis_port, seed, n, protocol):
    rng = random.Random(seed)
    ops = gen_ops(rng, n)
    clients = []
    for port in (shoal_port, redis_port):
        c = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10,
                        single_connection_client=True)
        c.execute_command(b"SELECT", 0)
        for db in range(3):
            c.execute_command(b"SELECT", db)
            c.execute_command(b"FLUSHDB")
        c.execute_command(b"SELECT", 0)
        clients.append(c)
    mismatches = []
    for i, op in enumerate(ops):
        a, b = run(clients[0], op), run(clients[1], op)
        if a != b:
            mismatches.append((i, op, a, b))
    for c in clients:
        c.close()
    return len(ops), mismatches


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--redis-port", type=int)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--ops", type=int, default=3000)
    args = ap.parse_args()
    proc = None
    redis_port = args.redis_port
    if redis_port is None:
        proc, redis_port = start_redis(args.redis_server)
    try:
        total, failed = 0, []
        for protocol in (2, 3):
            n, mismatches = compare(args.shoal_port, redis_port, args.seed + protocol, args.ops, protocol)
            total += n
            failed += [(protocol,) + m for m in mismatches]
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    for protocol, i, op, a, b in failed[:25]:
        print("RESP%d op #%d %r\n  shoal: %r\n  redis: %r" % (protocol, i, op, a, b))
    print("resp_compat: %d ops compared (seed %d), %d differences" % (total, args.seed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

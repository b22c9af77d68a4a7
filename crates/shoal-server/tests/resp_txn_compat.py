#!/usr/bin/env python3
"""Runs the same seeded random transactions (MULTI, EXEC, DISCARD, WATCH,
UNWATCH, with commands queued between them and a second client writing
watched keys) against Shoal and a real Redis, through redis-py, and compares
every reply, errors included, and then every key's value.

Usage: resp_txn_compat.py --shoal-port PORT [--seed N] [--rounds N]
                          [--redis-port PORT | --redis-server PATH]

Left out by design: SCAN, DBSIZE and FLUSHDB inside MULTI (Shoal refuses
them: a transaction locks keys, not databases; docs/resp.md), and a second
client removing keys (a watched key that was absent, created and removed
again: see resp/multi.rs on absence stamps). Expiry commands are queued
with absolute times far in the future, or times that delete at once, so
that no key expires by waiting and every reply (EXPIRETIME too) is exact;
a watched key expiring by waiting is in resp_compat.py's expiry scenario.
"""

import argparse
import random
import sys
import time

import redis

from resp_compat import start_redis

KEYS = [b"t%d" % i for i in range(6)] + [b"c0", b"c1"]
VALUES = [b"", b"v", b"1", b"-3", b"x" * 50, b"9223372036854775807", b"abc"]
# Absolute expiry times far in the future (the same for both servers).
LATER = int(time.time()) + 10 ** 6


def queued_command(rng):
    """One command to queue (or run outside a transaction)."""
    k = lambda: rng.choice(KEYS)
    v = lambda: rng.choice(VALUES)
    c = rng.randrange(25)
    if c < 3:
        return [b"SET", k(), v()] + rng.choice([[], [b"NX"], [b"XX"], [b"GET"]])
    if c < 5:
        return [b"GET", k()]
    if c < 7:
        return [rng.choice([b"INCR", b"DECR"]), k()]
    if c == 7:
        return [b"INCRBY", k(), rng.choice([b"5", b"-2", b"x"])]
    if c == 8:
        return [b"DEL", k()] + ([k()] if rng.random() < 0.5 else [])
    if c == 9:
        return [b"MSET", k(), v(), k(), v()]
    if c == 10:
        return [b"MSETNX", k(), v(), k(), v()]
    if c == 11:
        return [b"MGET", k(), k(), k()]
    if c == 12:
        return [b"APPEND", k(), v()]
    if c == 13:
        return [b"EXISTS", k(), k()]
    if c == 14:
        return [b"GETSET", k(), v()]
    if c == 15:
        return [b"SELECT", rng.choice([b"0", b"1", b"0", b"17"])]
    if c == 17:
        return rng.choice([[b"SET", k(), v(), b"PXAT", b"%d" % (LATER * 1000 + 7)], [b"SET", k(), v(), b"KEEPTTL"],
                           [b"SET", k(), v(), b"EXAT", b"%d" % LATER, b"GET"], [b"SET", k(), v(), b"EX", b"0"]])
    if c == 18:
        return rng.choice([[b"EXPIREAT", k(), b"%d" % LATER], [b"EXPIRE", k(), b"-1"],
                           [b"EXPIREAT", k(), b"%d" % (LATER + 9), b"NX"],
                           [b"EXPIREAT", k(), b"%d" % (LATER + rng.randrange(3)), rng.choice([b"GT", b"LT", b"XX"])],
                           [b"PEXPIREAT", k(), b"%d" % (LATER * 1000)], [b"EXPIRE", k(), b"0", b"XX"]])
    if c == 19:
        return rng.choice([[b"EXPIRETIME", k()], [b"PEXPIRETIME", k()], [b"PERSIST", k()]])
    if c == 20:
        return [b"GETEX", k()] + rng.choice([[], [b"PERSIST"], [b"EXAT", b"%d" % LATER], [b"PXAT", b"1"],
                                             [b"EX", b"0"]])
    if c == 22:
        return [rng.choice([b"RENAME", b"RENAMENX"]), k(), k()]
    if c == 23:
        return [b"COPY", k(), k()] + rng.choice([[], [b"REPLACE"], [b"DB", b"1"]])
    if c == 16:
        # Errors found while queueing: the whole transaction is discarded.
        return rng.choice([[b"NOSUCH", b"x"], [b"GET"], [b"SET", b"k"], [b"MGET"], [b"INCRBY", b"k"]])
    return [b"PING"]


def gen_ops(rng, rounds):
    """A list of (client index, command); client 1 writes behind client 0's back."""
    ops = []
    for _ in range(rounds):
        shape = rng.randrange(10)
        if shape < 5:
            ops.append((0, [b"WATCH"] + [rng.choice(KEYS) for _ in range(rng.randrange(1, 3))]))
        for _ in range(rng.randrange(0, 3)):
            who = 1 if rng.random() < 0.5 else 0
            cmd = queued_command(rng)
            if who == 1 and cmd[0] in (b"DEL", b"SELECT"):
                cmd = [b"SET", rng.choice(KEYS), rng.choice(VALUES)]
            ops.append((who, cmd))
        if rng.random() < 0.1:
            ops.append((0, [b"UNWATCH"]))
        ops.append((0, [b"MULTI"]))
        for _ in range(rng.randrange(0, 6)):
            r = rng.random()
            if r < 0.03:
                ops.append((0, [b"MULTI"]))
            elif r < 0.06:
                ops.append((0, [b"WATCH", rng.choice(KEYS)]))
            else:
                ops.append((0, queued_command(rng)))
        if rng.random() < 0.2:
            ops.append((1, [b"SET", rng.choice(KEYS), rng.choice(VALUES)]))
        end = rng.random()
        if end < 0.8:
            ops.append((0, [b"EXEC"]))
        elif end < 0.95:
            ops.append((0, [b"DISCARD"]))
        else:
            ops.append((0, [b"EXEC"]))
            ops.append((0, [b"EXEC"]))
            ops.append((0, [b"DISCARD"]))
    return ops


def plain(reply):
    """The reply with errors inside it (EXEC's array) as comparable tuples."""
    if isinstance(reply, Exception):
        return ("error", type(reply).__name__, str(reply))
    if isinstance(reply, list):
        return [plain(r) for r in reply]
    return reply


def outcome(client, cmd):
    try:
        return ("ok", plain(client.execute_command(*cmd)))
    except redis.exceptions.ResponseError as e:
        return ("err", type(e).__name__, str(e))


def connect(port, protocol):
    c = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10, single_connection_client=True)
    return c


def contents(port):
    c = connect(port, 2)
    out = {}
    for db in (0, 1):
        c.execute_command(b"SELECT", db)
        for k in KEYS:
            out[(db, k)] = c.execute_command(b"GET", k)
    c.close()
    return out


# How Redis answered EXEC, over the whole run: the sequence must exercise
# applied, watch-aborted and EXECABORT transactions (and EXEC without MULTI).
KINDS = {}


def compare(shoal_port, redis_port, seed, rounds, protocol):
    rng = random.Random(seed)
    ops = gen_ops(rng, rounds)
    pairs = []
    for port in (shoal_port, redis_port):
        main = connect(port, protocol)
        for db in (1, 0):
            main.execute_command(b"SELECT", db)
            main.execute_command(b"FLUSHDB")
        pairs.append((main, connect(port, protocol)))
    mismatches = []
    for i, (who, cmd) in enumerate(ops):
        a, b = outcome(pairs[0][who], cmd), outcome(pairs[1][who], cmd)
        if a != b:
            mismatches.append((i, who, cmd, a, b))
        if cmd == [b"EXEC"]:
            kind = ("applied" if isinstance(b[1], list) else "watch-aborted") if b[0] == "ok" else b[1]
            KINDS[kind] = KINDS.get(kind, 0) + 1
    for pair in pairs:
        for c in pair:
            c.close()
    a, b = contents(shoal_port), contents(redis_port)
    for key in sorted(a):
        if a[key] != b[key]:
            mismatches.append(("final", 0, key, a[key], b[key]))
    return len(ops), mismatches


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--redis-port", type=int)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--rounds", type=int, default=400)
    args = ap.parse_args()
    proc = None
    redis_port = args.redis_port
    if redis_port is None:
        proc, redis_port = start_redis(args.redis_server)
    try:
        total, failed, execs = 0, [], 0
        for protocol in (2, 3):
            n, mismatches = compare(args.shoal_port, redis_port, args.seed + protocol, args.rounds, protocol)
            total += n
            failed += [(protocol,) + m for m in mismatches]
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    for protocol, i, who, op, a, b in failed[:25]:
        print("RESP%d op #%s (client %d) %r\n  shoal: %r\n  redis: %r" % (protocol, i, who, op, a, b))
    print("EXEC outcomes (Redis's): %s" % sorted(KINDS.items()))
    print("resp_txn_compat: %d ops compared (seed %d), %d differences" % (total, args.seed, len(failed)))
    thin = [k for k in ("applied", "watch-aborted", "ExecAbortError") if KINDS.get(k, 0) < 10]
    if thin:
        print("too few EXECs of kinds %s: the sequence does not test them" % thin)
    sys.exit(1 if failed or thin else 0)


if __name__ == "__main__":
    main()

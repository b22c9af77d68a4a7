#!/usr/bin/env python3
"""Runs the same seeded random sequence of supported commands against Shoal
and against a real Redis, through redis-py, and compares every reply,
errors included (exception type and message).

Usage: resp_compat.py --shoal-port PORT [--seed N] [--ops N]
                      [--redis-port PORT | --redis-server PATH]

Without --redis-port it starts `redis-server` itself on a free loopback port
(no persistence) and stops it at the end. Both protocols are exercised: the
sequence runs once over RESP2 and once over RESP3 (HELLO 3), followed each
time by a fixed expiry scenario that sleeps for keys to expire. Exits 1 on
any difference, printing the first ones.

Expiry in the random sequence: every time given is either far in the
future (so no key expires while the sequence runs, and the two servers
agree whatever the small delay between their clocks) or already past,
zero, negative or out of range (so the key is deleted at once, or the
command refused); times to live read back (TTL, PTTL, EXPIRETIME,
PEXPIRETIME) are compared within a tolerance, since each server measures
them from its own moment of the command. Keys that expire by waiting are
the scenario's (`expiry_scenario`), with short times and sleeps well past
them.

Commands whose replies differ by design are left out: CLIENT ID, INFO,
COMMAND, HELLO's server fields, TIME's value, and DBSIZE while expired
keys may not be reclaimed yet (Redis drops them when they are touched,
Shoal within the sweep's interval; the scenario waits for both); KEYS is
compared sorted (the order is the store's), SETRANGE offsets stay below
the largest value Shoal accepts.
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
FLOATS = [b"0.1", b"-0.1", b"1.5", b"1e3", b"-2.5e-3", b"3.0e2", b"1e20", b"-1e-20", b"0x10", b"0x1p-2", b"inf",
          b"-inf", b"nan", b"abc", b"", b" 1", b"1 ", b"1e400", b"1e5000", b"1e-5000", b".5", b"5.", b"+7",
          b"10.50", b"0"]
PATTERNS = [b"*", b"k*", b"n?", b"*1*", b"[kn]0", b"[^k]*", b"k\\*", b"nomatch*", b"?"]
# Times the random sequence uses, beside random long ones: refused or
# deleting at once, and out of range.
BAD_TIMES = [b"0", b"-1", b"-100", b"abc", b"", b"1.5", b"9223372036854775807", b"9223372036854776",
             b"-9223372036854775808", b"-9223372036854776", b"9223372036854775", b"+5"]
# Commands whose integer reply is a time: compared within a tolerance.
TIME_REPLIES = {b"TTL": 2, b"PTTL": 2000, b"EXPIRETIME": 2, b"PEXPIRETIME": 2000}


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


def gen_ops(rng, n, now_s):
    """A list of commands (argument lists); "SCAN-ALL" is a whole iteration.
    `now_s`: the current Unix time in seconds, for absolute expiry times."""
    key = lambda: rng.choice(KEYS)
    val = lambda: rng.choice(VALUES)

    def future(unit):
        """A time to live or a Unix time, in seconds or ms, far from now."""
        kind = rng.randrange(4)
        if kind == 0:  # relative seconds
            return b"%d" % rng.randrange(1000, 10 ** 7)
        if kind == 1:  # relative ms
            return b"%d" % rng.randrange(10 ** 6, 10 ** 10)
        if kind == 2:  # absolute seconds
            return b"%d" % (now_s + rng.randrange(10 ** 4, 10 ** 8))
        return b"%d" % ((now_s + rng.randrange(10 ** 4, 10 ** 8)) * 1000 + rng.randrange(1000))

    def time_arg(absolute, millis):
        r = rng.random()
        if r < 0.2:
            return rng.choice(BAD_TIMES)
        if r < 0.3 and absolute:  # in the past: deletes (EXPIREAT, GETEX) or stays refused
            return b"%d" % rng.choice([1, 1000, now_s - 10 ** 5])
        v = rng.randrange(10 ** 4, 10 ** 8)
        if absolute:
            v += now_s
        return b"%d" % (v * 1000 + rng.randrange(1000) if millis else v)

    ops = []
    for _ in range(n):
        r = rng.random()
        c = rng.randrange(57)
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
        elif c in (31, 32):
            # SET with an expiry: never one that is past (Redis keeps such
            # a key until touched, Shoal until swept; see the scenario).
            opt = rng.choice([b"EX", b"PX", b"EXAT", b"PXAT"])
            absolute, millis = opt.endswith(b"AT"), opt.startswith(b"P")
            t = time_arg(False, millis) if not absolute else b"%d" % (
                (now_s + rng.randrange(10 ** 4, 10 ** 8)) * (1000 if millis else 1))
            if r < 0.15:
                t = rng.choice([b"0", b"-1", b"abc", b"9223372036854775807", b"9223372036854776"])
            extra = rng.choice([[], [], [b"NX"], [b"XX"], [b"GET"], [b"XX", b"GET"], [b"KEEPTTL"], [opt, t],
                                [b"EX" if opt != b"EX" else b"PX", t], [b"PERSIST"]])
            args = [opt, t] + extra
            if r > 0.8:
                rng.shuffle(args)
            ops.append([b"SET", key(), val()] + args)
        elif c == 33:
            ops.append([b"SET", key(), val(), b"KEEPTTL"] + rng.choice([[], [b"GET"], [b"XX"], [b"KEEPTTL"]]))
        elif c == 34:
            ops.append([rng.choice([b"SETEX", b"PSETEX"]), key(), time_arg(False, r < 0.5), val()])
        elif c == 35:
            opt = rng.choice([[], [b"PERSIST"], [b"EX", time_arg(False, False)], [b"PX", time_arg(False, True)],
                              [b"EXAT", time_arg(True, False)], [b"PXAT", time_arg(True, True)],
                              [b"KEEPTTL"], [b"NX"], [b"EX"], [b"PERSIST", b"EX", b"100"],
                              [b"EX", b"100", b"PERSIST"], [b"EX", b"100", b"PX", b"100"]])
            ops.append([b"GETEX", key()] + opt)
        elif c in (36, 37, 38):
            cmd = rng.choice([b"EXPIRE", b"PEXPIRE", b"EXPIREAT", b"PEXPIREAT"])
            absolute, millis = cmd.endswith(b"AT"), cmd.startswith(b"P")
            conds = rng.choice([[], [], [b"NX"], [b"XX"], [b"GT"], [b"LT"], [b"xx", b"gt"], [b"XX", b"LT"],
                                [b"NX", b"XX"], [b"NX", b"GT"], [b"GT", b"LT"], [b"NX", b"NX"], [b"FOO"],
                                [b"GT", b"GT"]])
            ops.append([cmd, key(), time_arg(absolute, millis)] + conds)
        elif c in (39, 40):
            ops.append([rng.choice(list(TIME_REPLIES)), key()])
        elif c == 41:
            ops.append([b"PERSIST", key()])
        elif c == 42:
            ops.append(rng.choice([[b"EXPIRE", b"k0"], [b"TTL"], [b"TTL", b"a", b"b"], [b"PERSIST"], [b"SETEX", b"k", b"1"],
                                   [b"PSETEX"], [b"GETEX"], [b"EXPIRETIME"], [b"PEXPIREAT", b"k"]]))
        elif c == 43:
            ops.append([b"GETDEL", key()])
        elif c == 44:
            ops.append([b"GETRANGE", key(), rng.choice([b"0", b"1", b"-1", b"-3", b"5", b"x", b"-100"]),
                        rng.choice([b"-1", b"0", b"2", b"-2", b"100", b"y", b"-200"])])
        elif c == 45:
            ops.append([b"SETRANGE", key(), rng.choice([b"0", b"1", b"3", b"10", b"-1", b"x", b"600"]), val()])
        elif c == 46:
            ops.append([b"TYPE", key()])
        elif c == 47:
            ops.append([b"KEYS-SORTED", rng.choice(PATTERNS)])
        elif c == 48 and r < 0.05:
            ops.append([b"FLUSHALL"] + rng.choice([[], [b"ASYNC"], [b"SYNC"], [b"BAD"]]))
        elif c == 49:
            ops.append(rng.choice([[b"GETDEL"], [b"GETRANGE", b"k"], [b"SETRANGE", b"k", b"1"], [b"TYPE"],
                                   [b"KEYS"], [b"KEYS", b"a", b"b"], [b"TIME", b"x"], [b"FLUSHALL", b"A", b"B"],
                                   [b"RENAME", b"k"], [b"RENAMENX", b"a", b"b", b"c"], [b"COPY", b"a"]]))
        elif c == 50:
            ops.append([rng.choice([b"RENAME", b"RENAMENX"]), key(), key()])
        elif c == 51:
            ops.append([b"COPY", key(), key()] + rng.choice([[], [b"REPLACE"], [b"replace", b"REPLACE"], [b"DB", b"1"],
                                                             [b"DB", b"0", b"REPLACE"], [b"DB", b"16"], [b"DB", b"x"],
                                                             [b"DB"], [b"FOO"], [b"DB", b"99999999999"]]))
        elif c == 53:
            ops.append(rng.choice([[b"OBJECT", b"ENCODING", key()], [b"OBJECT", b"FREQ", key()],
                                   [b"OBJECT", b"encoding"], [b"OBJECT", b"NOPE", key()], [b"OBJECT"],
                                   [b"OBJECT", b"ENCODING", key(), b"x"]]))
        elif c == 54:
            ops.append(rng.choice([[b"MEMORY", b"USAGE", key()], [b"MEMORY", b"USAGE", key(), b"SAMPLES", b"5"],
                                   [b"MEMORY", b"USAGE", key(), b"SAMPLES", b"-1"],
                                   [b"MEMORY", b"USAGE", key(), b"SAMPLES", b"x"], [b"MEMORY", b"USAGE"],
                                   [b"MEMORY", b"USAGE", key(), b"BAD"], [b"MEMORY", b"NOPE"]]))
        elif c == 52:
            # A key moved or copied with its expiry (TTL reads come later).
            k = key()
            ops.append([b"SET", k, val(), b"EX", b"%d" % rng.randrange(1000, 10 ** 6)])
            ops.append([rng.choice([b"RENAME", b"COPY"]), k, key()])
        elif c in (55, 56):
            k = key()
            if r < 0.3:
                ops.append([b"SET", k, rng.choice(FLOATS + VALUES)])
            ops.append([b"INCRBYFLOAT", k, rng.choice(FLOATS + DELTAS)])
            if r < 0.5:
                ops.append([rng.choice([b"GET", b"INCR", b"STRLEN"]), k])
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


def same(op, a, b):
    """Whether two outcomes of `op` agree: equal, or for a time read back
    (TTL, ...), both the same special value (-1, -2) or within tolerance."""
    if a == b:
        return True
    # MEMORY USAGE: each store's own byte count; both a number or both null.
    if isinstance(op[0], bytes) and op[0].upper() == b"MEMORY" and len(op) > 1 and op[1].upper() == b"USAGE":
        return a[0] == b[0] == "ok" and (a[1] is None) == (b[1] is None)
    # OBJECT ENCODING: Redis answers "raw" for a short value made by APPEND
    # or SETRANGE; Shoal does not record how a value was made (docs/resp.md).
    if isinstance(op[0], bytes) and op[0].upper() == b"OBJECT" and a == ("ok", b"embstr") and b == ("ok", b"raw"):
        return True
    # Likewise Redis answers "embstr" for an integer made by INCRBYFLOAT (it
    # stores the text it printed without trying the integer encoding).
    if isinstance(op[0], bytes) and op[0].upper() == b"OBJECT" and a == ("ok", b"int") and b == ("ok", b"embstr"):
        return True
    tolerance = TIME_REPLIES.get(op[0].upper()) if isinstance(op[0], bytes) else None
    if tolerance is None or a[0] != "ok" or b[0] != "ok":
        return False
    x, y = a[1], b[1]
    if not (isinstance(x, int) and isinstance(y, int)) or min(x, y) < 0:
        return False
    return abs(x - y) <= tolerance


def expiry_scenario():
    """Steps for keys that expire by waiting: ("SLEEP", seconds), ("WAIT",
    op) for a reply that must agree once both servers reclaimed expired
    keys, or a command."""
    steps = [[b"FLUSHDB"]]
    for k in (b"e1", b"e2", b"e3", b"e4", b"e5", b"e6", b"e7", b"e8", b"e9"):
        steps.append([b"SET", k, b"5", b"PX", b"500"])
    steps += [
        [b"SETEX", b"s1", b"100", b"v"],
        [b"PSETEX", b"s2", b"500", b"v"],
        [b"SET", b"g1", b"v", b"EX", b"100"],
        [b"GETEX", b"g1", b"PX", b"500"],
        [b"SET", b"p1", b"v", b"PX", b"500"],
        [b"PERSIST", b"p1"],
        [b"SET", b"x1", b"v"],
        [b"PEXPIRE", b"x1", b"500"],
        [b"SET", b"c1", b"10", b"PX", b"500"],
        [b"INCR", b"c1"],
        [b"APPEND", b"c1", b"0"],
        [b"SET", b"kt", b"v", b"PX", b"500"],
        [b"SET", b"kt", b"w", b"KEEPTTL"],
        # A watched key that expires before EXEC aborts it, as in Redis 7.
        [b"SET", b"w1", b"v", b"PX", b"500"],
        [b"WATCH", b"w1"],
        [b"SET", b"past", b"v", b"PXAT", b"1"],
        [b"SET", b"past2", b"v", b"EXAT", b"1000"],
        [b"GET", b"past"], [b"EXISTS", b"past", b"past2"], [b"TTL", b"past"], [b"MGET", b"past", b"s1"],
        [b"PTTL", b"e1"], [b"TTL", b"s1"], [b"PTTL", b"g1"], [b"TTL", b"p1"], [b"PTTL", b"c1"], [b"PTTL", b"kt"],
        # Redis deleted the keys set in the past when they were touched, Shoal's sweep
        # removes them within its interval (a tenth of a second); the others live on.
        ("WAIT", [b"DBSIZE"]),
        ["SLEEP", 0.9],
        [b"MULTI"], [b"SET", b"w2", b"x"], [b"EXEC"], [b"GET", b"w2"],
        [b"GET", b"e1"], [b"EXISTS", b"e2", b"s1", b"e2"], [b"MGET", b"e3", b"s1", b"p1"],
        [b"TTL", b"e4"], [b"PTTL", b"e4"], [b"EXPIRETIME", b"e4"], [b"PEXPIRETIME", b"e4"],
        [b"INCR", b"e5"], [b"TTL", b"e5"],
        [b"SET", b"e6", b"nx", b"NX"], [b"GET", b"e6"],
        [b"SET", b"e7", b"xx", b"XX"], [b"SETNX", b"e7", b"n"], [b"GET", b"e7"],
        [b"APPEND", b"e8", b"tail"], [b"STRLEN", b"e8"],
        [b"GETSET", b"e9", b"new"],
        [b"DEL", b"s2"], [b"EXPIRE", b"g1", b"100"], [b"PERSIST", b"x1"], [b"GETEX", b"c1", b"PERSIST"],
        [b"SET", b"kt", b"again", b"KEEPTTL"], [b"TTL", b"kt"],
        [b"GET", b"p1"], [b"TTL", b"p1"], [b"TTL", b"s1"],
        [b"SET", b"e9", b"v", b"XX", b"GET"],
        [b"EXPIRE", b"s1", b"0"], [b"EXISTS", b"s1"], [b"PEXPIREAT", b"p1", b"1"], [b"GET", b"p1"],
        [b"GETEX", b"e7", b"EXAT", b"1"], [b"GET", b"e7"],
        [b"SCAN-ALL"],
        ("WAIT", [b"DBSIZE"]),
    ]
    return steps


def compare(shoal_port, redis_port, seed, n, protocol):
    rng = random.Random(seed)
    ops = gen_ops(rng, n, int(time.time()))
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
        if not same(op, a, b):
            mismatches.append((i, op, a, b))
    steps = expiry_scenario()
    for i, step in enumerate(steps, start=len(ops)):
        if step[0] == "SLEEP":
            time.sleep(step[1])
            continue
        if step[0] == "WAIT":
            # Redis reclaims the expired keys touched above at once; Shoal's
            # sweep within its interval: wait a while for the same answer.
            op = step[1]
            deadline = time.time() + 3
            b = run(clients[1], op)
            a = run(clients[0], op)
            while a != b and time.time() < deadline:
                time.sleep(0.05)
                a = run(clients[0], op)
        else:
            op = step
            a, b = run(clients[0], op), run(clients[1], op)
        if not same(op, a, b):
            mismatches.append((i, op, a, b))
    for c in clients:
        c.close()
    return len(ops) + len(steps), mismatches


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

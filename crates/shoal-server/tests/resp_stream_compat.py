#!/usr/bin/env python3
"""Redis streams (XADD, XLEN, XRANGE, XREVRANGE, XREAD, XTRIM, XDEL) against
Shoal and a real Redis through redis-py: every reply compared, errors
included, over RESP2 and RESP3 (docs/streams.md, "RESP streams
compatibility table").

* redis-py's stream API as an application calls it (xadd, xread, xrange,
  xrevrange, xlen, xtrim, xdel), with the replies redis-py parses;
* fixed scenarios of the commands' edge cases: every argument error,
  every invalid ID form, the `ms-*` and `(` forms, COUNT 0, `$`, streams
  that do not exist or hold a string, what other commands do to a stream
  key (TYPE, EXISTS, DEL, GET, SET, SETNX, MGET, FLUSHDB);
* a random sequence of stream commands, valid and invalid, over a few
  keys. IDs are explicit, or `*` on streams whose last ID lies in the
  future (then `*` takes the last ID's next one on both servers).
  Approximate trims (`~`) are sent only while a stream has fewer than 90
  entries: Redis then holds it in one node and Shoal in one group, and
  both keep every entry (past that their units differ, by design);
* XREAD BLOCK: a timeout, and a reader woken by another client's XADD,
  with `$` and with an ID.

Usage: resp_stream_compat.py --shoal-port PORT [--redis-server PATH]
                             [--seed N] [--ops N]
"""

import argparse
import random
import sys
import threading
import time

import redis

from resp_compat import start_redis

KEYS = [b"s1", b"s2", b"s3", b"{s}4", b"str"]
FUTURE = 10 ** 15  # ms: IDs past any clock, so that `*` is deterministic


def outcome(fn):
    try:
        return ("ok", fn())
    except redis.exceptions.ResponseError as e:
        return ("err", str(e))


def connect(port, protocol):
    return redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10,
                       single_connection_client=True)


# ------------------------------------------------------------ redis-py API

def api_scenario(r):
    """redis-py's stream methods as a producer and a consumer use them."""
    out = []
    add = lambda *a, **k: out.append(outcome(lambda: r.xadd(*a, **k)))
    add("events", {"user": "7", "action": "click"}, id="1-1")
    add("events", {"user": "8", "action": "view"}, id="1-*")
    add("events", {"user": "9"}, id="5")
    add("events", {"n": "1"}, id="5-*", maxlen=3, approximate=False)
    add("events", {"n": "2"}, id="6-0", minid="1-2", approximate=False)
    add("events", {"n": "3"}, id="7-0", nomkstream=True)
    add("missing", {"n": "3"}, nomkstream=True)
    add("events", {"x": "y"}, id="3-0")
    out.append(outcome(lambda: r.xlen("events")))
    out.append(outcome(lambda: r.xrange("events")))
    out.append(outcome(lambda: r.xrange("events", min="5", max="6", count=2)))
    out.append(outcome(lambda: r.xrange("events", min="(5-0", max="+")))
    out.append(outcome(lambda: r.xrevrange("events", count=2)))
    out.append(outcome(lambda: r.xrevrange("events", max="(7-0", min="-")))
    out.append(outcome(lambda: r.xread({"events": "0-0"})))
    out.append(outcome(lambda: r.xread({"events": "5-1", "missing": "0"}, count=1)))
    out.append(outcome(lambda: r.xread({"events": "$"})))
    out.append(outcome(lambda: r.xread({"events": "7-0"}, block=50)))
    out.append(outcome(lambda: r.xdel("events", "5-1", "9-9")))
    out.append(outcome(lambda: r.xlen("events")))
    out.append(outcome(lambda: r.xtrim("events", maxlen=1, approximate=False)))
    out.append(outcome(lambda: r.xtrim("events", minid="8", approximate=False)))
    out.append(outcome(lambda: r.xlen("events")))
    out.append(outcome(lambda: r.xadd("events", {"after": "empty"}, id="7-0")))
    out.append(outcome(lambda: r.xadd("events", {"after": "empty"}, id="7-1")))
    out.append(outcome(lambda: r.xrange("events")))
    out.append(outcome(lambda: r.xtrim("events", maxlen=10, approximate=True, limit=5)))
    out.append(outcome(lambda: r.type("events")))
    out.append(outcome(lambda: r.exists("events", "missing")))
    out.append(outcome(lambda: r.delete("events")))
    out.append(outcome(lambda: r.xlen("events")))
    out.append(outcome(lambda: r.xadd("events", {"again": "1"}, id="1-1")))
    # Binary fields and values, empty ones, many of them.
    fields = {bytes([i, 255 - i]) * (i % 5): bytes(range(i % 7)) for i in range(40)}
    out.append(outcome(lambda: r.xadd("bin", fields, id="1-1")))
    out.append(outcome(lambda: r.xrange("bin")))
    return out


# ------------------------------------------------------------ edge cases

def edge_ops():
    """Fixed commands (argument lists) covering the commands' errors and forms."""
    ops = [
        [b"FLUSHDB"],
        [b"XADD", b"e", b"0", b"f", b"v"], [b"XADD", b"e", b"0-0", b"f", b"v"], [b"EXISTS", b"e"],
        [b"XADD", b"e", b"1-1", b"f"], [b"XADD", b"e", b"1-1", b"f", b"v", b"g"],
        [b"XADD", b"e"], [b"XADD", b"e", b"*"], [b"XADD", b"e", b"*", b"f"],
        [b"XADD", b"e", b"1-1", b"f", b"v"], [b"XADD", b"e", b"1-1", b"f", b"v"], [b"XADD", b"e", b"1", b"f", b"v"],
        [b"XADD", b"e", b"0-5", b"f", b"v"], [b"XADD", b"e", b"1-*", b"f", b"v"], [b"XADD", b"e", b"0-*", b"f", b"v"],
        [b"XADD", b"e", b" 5", b"f", b"v"], [b"XADD", b"e", b"+5-1", b"f", b"v"], [b"XADD", b"e", b"05-2", b"f", b"v"],
        [b"XADD", b"e", b"-", b"f", b"v"], [b"XADD", b"e", b"+", b"f", b"v"], [b"XADD", b"e", b"9-x", b"f", b"v"],
        [b"XADD", b"e", b"-9", b"f", b"v"], [b"XADD", b"e", b"9-", b"f", b"v"], [b"XADD", b"e", b"9--1", b"f", b"v"],
        [b"XADD", b"e", b"9-1-1", b"f", b"v"], [b"XADD", b"e", b"18446744073709551616", b"f", b"v"],
        [b"XADD", b"e", b"9" * 130, b"f", b"v"], [b"XADD", b"e", b"", b"f", b"v"],
        # (Then `6-*` gets an error whose text Redis 7.0 picks from a stale errno.)
        [b"XADD", b"e", b"6-18446744073709551615", b"f", b"v"],
        [b"XADD", b"e", b"nomkstream", b"x", b"y"], [b"XADD", b"nos", b"NOMKSTREAM", b"*", b"x", b"y"],
        [b"EXISTS", b"nos"],
        [b"XADD", b"e", b"LIMIT", b"5", b"*", b"a", b"b"], [b"XADD", b"e", b"LIMIT", b"0", b"*", b"a", b"b"],
        [b"XADD", b"e", b"MAXLEN", b"5", b"LIMIT", b"5", b"10-1", b"a", b"b"],
        [b"XADD", b"e", b"MAXLEN", b"-1", b"*", b"a", b"b"], [b"XADD", b"e", b"MAXLEN", b"x", b"*", b"a", b"b"],
        [b"XADD", b"e", b"MAXLEN", b"2", b"MINID", b"5", b"*", b"a", b"b"],
        [b"XADD", b"e", b"MINID", b"-", b"*", b"a", b"b"], [b"XADD", b"e", b"MINID", b"x", b"*", b"a", b"b"],
        [b"XADD", b"e", b"MAXLEN", b"~", b"x", b"*", b"a", b"b"], [b"XADD", b"e", b"MAXLEN", b"~"],
        [b"XADD", b"e", b"MAXLEN", b"5", b"NOMKSTREAM"], [b"XADD", b"e", b"LIMIT", b"-1", b"*", b"a", b"b"],
        [b"XADD", b"e", b"maxlen", b"=", b"3", b"11-0", b"a", b"b"], [b"XLEN", b"e"],
        [b"XADD", b"e", b"MINID", b"=", b"6", b"12-0", b"a", b"b"], [b"XRANGE", b"e", b"-", b"+"],
        [b"XADD", b"e", b"MAXLEN", b"0", b"13-0", b"a", b"b"], [b"XLEN", b"e"], [b"EXISTS", b"e"],
        [b"XADD", b"e", b"13-0", b"a", b"b"], [b"XADD", b"e", b"13-1", b"a", b"b"],
        [b"XADD", b"e", b"MAXLEN", b"~", b"1", b"LIMIT", b"10", b"14-0", b"a", b"b"], [b"XLEN", b"e"],
        # XRANGE / XREVRANGE
        [b"XRANGE", b"e", b"-", b"+", b"COUNT", b"0"], [b"XRANGE", b"e", b"-", b"+", b"COUNT", b"-3"],
        [b"XRANGE", b"none", b"-", b"+", b"COUNT", b"0"], [b"XRANGE", b"none", b"-", b"+"],
        [b"XRANGE", b"e", b"-", b"+", b"COUNT"], [b"XRANGE", b"e", b"-", b"+", b"COUNT", b"x"],
        [b"XRANGE", b"e", b"-", b"+", b"LIMIT", b"1"], [b"XRANGE", b"e", b"-"], [b"XRANGE", b"e"],
        [b"XRANGE", b"e", b"(-", b"+"], [b"XRANGE", b"e", b"-", b"(+"], [b"XRANGE", b"e", b"(", b"+"],
        [b"XRANGE", b"e", b"(13-0", b"+"], [b"XRANGE", b"e", b"13", b"13"], [b"XRANGE", b"e", b"13-1", b"13-0"],
        [b"XRANGE", b"e", b"(18446744073709551615-18446744073709551615", b"+"],
        [b"XRANGE", b"e", b"-", b"(0-0"], [b"XRANGE", b"e", b"-", b"(0"], [b"XRANGE", b"e", b"x", b"+"],
        [b"XRANGE", b"e", b"+", b"-"], [b"XRANGE", b"e", b"5-*", b"+"], [b"XRANGE", b"e", b"13-1", b"(14"],
        [b"XREVRANGE", b"e", b"+", b"-"], [b"XREVRANGE", b"e", b"+", b"-", b"COUNT", b"1"],
        [b"XREVRANGE", b"e", b"(14-0", b"-"], [b"XREVRANGE", b"e", b"-", b"+"], [b"XREVRANGE", b"e", b"+"],
        # XREAD (non-blocking)
        [b"XREAD", b"STREAMS", b"e", b"0"], [b"XREAD", b"COUNT", b"1", b"STREAMS", b"e", b"none", b"0", b"0"],
        [b"XREAD", b"STREAMS", b"e", b"$"], [b"XREAD", b"STREAMS", b"e", b"e", b"0", b"13-0"],
        [b"XREAD", b"STREAMS", b"e"], [b"XREAD", b"STREAMS", b"e", b"f", b"0"], [b"XREAD", b"COUNT", b"1", b"e"],
        [b"XREAD", b"COUNT", b"x", b"STREAMS", b"e", b"0"], [b"XREAD", b"COUNT", b"-1", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"BLOCK", b"x", b"STREAMS", b"e", b"0"], [b"XREAD", b"BLOCK", b"-1", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"BLOCK", b"9223372036854775807", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"GROUP", b"g", b"c", b"STREAMS", b"e", b">"], [b"XREAD", b"NOACK", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"STREAMS", b"e", b">"], [b"XREAD", b"STREAMS", b"e", b"-"], [b"XREAD", b"STREAMS", b"e", b"+"],
        [b"XREAD", b"STREAMS", b"e", b"x"], [b"XREAD", b"FOO", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"STREAMS", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"COUNT", b"1", b"COUNT", b"2", b"STREAMS", b"e", b"0"],
        [b"XREAD", b"STREAMS", b"e", b"18446744073709551615-18446744073709551615"],
        # XDEL
        [b"XDEL", b"none", b"bad"], [b"XDEL", b"e", b"bad"], [b"XDEL", b"e", b"13-1", b"bad"], [b"XLEN", b"e"],
        [b"XDEL", b"e", b"13-1", b"13-1", b"99"], [b"XDEL", b"e"], [b"XDEL", b"e", b"-"], [b"XLEN", b"e"],
        [b"XDEL", b"e", b"14-0"], [b"XLEN", b"e"], [b"XADD", b"e", b"14-0", b"a", b"b"],
        [b"XADD", b"e", b"14-1", b"a", b"b"],
        # XTRIM
        [b"XTRIM", b"e"], [b"XTRIM", b"e", b"MAXLEN"], [b"XTRIM", b"e", b"FOO", b"1"],
        [b"XTRIM", b"none", b"MAXLEN", b"1"], [b"XTRIM", b"none", b"FOO", b"1"],
        [b"XTRIM", b"e", b"MAXLEN", b"1", b"LIMIT", b"1"], [b"XTRIM", b"e", b"LIMIT", b"1"],
        [b"XTRIM", b"e", b"MAXLEN", b"~", b"1", b"LIMIT", b"x"], [b"XTRIM", b"e", b"MAXLEN", b"1", b"NOMKSTREAM"],
        [b"XTRIM", b"e", b"MINID", b"+"], [b"XTRIM", b"e", b"MINID", b"~", b"0", b"LIMIT", b"0"],
        [b"XTRIM", b"e", b"MAXLEN", b"~", b"0"], [b"XLEN", b"e"],
        [b"XTRIM", b"e", b"MAXLEN", b"=", b"0"], [b"XLEN", b"e"], [b"XRANGE", b"e", b"-", b"+"],
        [b"XADD", b"e", b"14-1", b"a", b"b"], [b"XADD", b"e", b"14-2", b"a", b"b"],
        # XLEN
        [b"XLEN"], [b"XLEN", b"e", b"f"], [b"XLEN", b"none"],
        # Types: a string key to stream commands, a stream key to other commands.
        [b"SET", b"str", b"v"], [b"XADD", b"str", b"*", b"a", b"b"], [b"XADD", b"str", b"0", b"a", b"b"],
        [b"XADD", b"str", b"NOMKSTREAM", b"*", b"a", b"b"], [b"XLEN", b"str"], [b"XRANGE", b"str", b"-", b"+"],
        [b"XRANGE", b"str", b"x", b"+"], [b"XREVRANGE", b"str", b"+", b"-"], [b"XREAD", b"STREAMS", b"str", b"0"],
        [b"XREAD", b"STREAMS", b"e", b"str", b"0", b"0"], [b"XREAD", b"STREAMS", b"str", b"bad"],
        [b"XDEL", b"str", b"1"], [b"XTRIM", b"str", b"MAXLEN", b"0"], [b"GET", b"str"],
        [b"TYPE", b"e"], [b"TYPE", b"str"], [b"EXISTS", b"e", b"str", b"none", b"e"],
        [b"GET", b"e"], [b"STRLEN", b"e"], [b"APPEND", b"e", b"x"], [b"INCR", b"e"], [b"GETRANGE", b"e", b"0", b"1"],
        [b"GETSET", b"e", b"x"], [b"GETDEL", b"e"], [b"SETRANGE", b"e", b"0", b"x"], [b"MGET", b"e", b"str"],
        [b"SETNX", b"e", b"x"], [b"MSETNX", b"e", b"x", b"other", b"y"], [b"EXISTS", b"other"],
        [b"SET", b"e", b"x", b"NX"], [b"SET", b"e", b"x", b"GET"], [b"XLEN", b"e"], [b"TYPE", b"e"],
        [b"TTL", b"e"], [b"PTTL", b"e"], [b"EXPIRETIME", b"e"], [b"OBJECT", b"ENCODING", b"e"], [b"DBSIZE"],
        [b"XADD", b"we\x00ird %41", b"1-1", b"a", b"b"], [b"KEYS-SORTED", b"*"], [b"KEYS-SORTED", b"e*"],
        [b"KEYS-SORTED", b"we*"], [b"DBSIZE"], [b"DEL", b"we\x00ird %41"], [b"DBSIZE"],
        [b"SET", b"e", b"now a string"], [b"TYPE", b"e"], [b"GET", b"e"], [b"XLEN", b"e"],
        [b"XADD", b"e2", b"1-1", b"a", b"b"], [b"MSET", b"e2", b"v", b"x", b"y"], [b"GET", b"e2"], [b"TYPE", b"e2"],
        [b"XADD", b"e3", b"1-1", b"a", b"b"], [b"SETEX", b"e3", b"100", b"v"], [b"TYPE", b"e3"],
        [b"XADD", b"e4", b"1-1", b"a", b"b"], [b"DEL", b"e4", b"e4", b"none"], [b"EXISTS", b"e4"],
        [b"XADD", b"e4", b"1-1", b"a", b"b"], [b"UNLINK", b"e4"], [b"TYPE", b"e4"],
        [b"XADD", b"e5", b"1-1", b"a", b"b"], [b"SELECT", b"1"], [b"XLEN", b"e5"], [b"XADD", b"e5", b"1-1", b"c", b"d"],
        [b"FLUSHDB"], [b"SELECT", b"0"], [b"XRANGE", b"e5", b"-", b"+"], [b"FLUSHALL"], [b"XLEN", b"e5"],
        [b"TYPE", b"e5"],
        # The last possible ID.
        [b"XADD", b"m", b"18446744073709551615-18446744073709551614", b"a", b"b"],
        [b"XADD", b"m", b"*", b"a", b"b"], [b"XADD", b"m", b"*", b"a", b"b"],
        [b"XADD", b"m", b"18446744073709551615-*", b"a", b"b"],
        [b"XRANGE", b"m", b"(18446744073709551615-18446744073709551614", b"+"],
        [b"XREAD", b"STREAMS", b"m", b"18446744073709551615-18446744073709551614"],
        # Transactions: stream commands are refused when queued (docs/streams.md).
    ]
    return ops


# ------------------------------------------------------------ random ops

def random_id(rng, ids):
    r = rng.random()
    if r < 0.4 and ids:
        i = rng.choice(ids)
        return b"%d-%d" % i
    if r < 0.6:
        return b"%d" % rng.randrange(0, 300)
    if r < 0.9:
        return b"%d-%d" % (rng.randrange(0, 300), rng.randrange(0, 4))
    return rng.choice([b"-", b"+", b"x", b"1-x", b"(5", b"(", b"5-*", b""])


def gen_op(rng, lens, ids, future, tops):
    """One random op; `lens`: Redis's XLEN of each key so far, `ids` the IDs
    added, `future`: the keys whose last ID lies in the future, `tops`: the
    ms of each key's last ID."""
    key = rng.choice(KEYS)
    r = rng.random()
    if r < 0.35:
        op = [b"XADD", key]
        if rng.random() < 0.1:
            op.append(b"NOMKSTREAM")
        t = rng.random()
        if t < 0.1:
            op += [b"MAXLEN", rng.choice([b"=", b""]), b"%d" % rng.randrange(0, 6)]
        elif t < 0.15:
            op += [b"MINID", b"%d" % rng.randrange(0, 60)]
        elif t < 0.2 and lens.get(key, 0) < 80:
            op += [b"MAXLEN", b"~", b"%d" % rng.randrange(0, 6)]
        op = [a for a in op if a != b""]
        top = tops.get(key, 0)
        u = rng.random()
        if u < 0.5:  # mostly past the stream's top: accepted
            op.append(b"%d-%d" % (top + rng.choice([0, 1, 1, 2]), rng.randrange(0, 4)))
        elif u < 0.65:
            op.append(b"%d-*" % (top + rng.randrange(-1, 2)))
        elif u < 0.75:
            op.append(b"*" if key in future else b"%d" % (top + rng.randrange(-1, 3)))
        else:
            op.append(random_id(rng, ids))
        for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 3, 0])):
            op += [rng.choice([b"f", b"g", b"", b"field\x00x"]), rng.choice([b"v", b"", b"1" * 50])]
        if rng.random() < 0.05:
            op.append(b"odd")
        return op
    if r < 0.45:
        return [b"XLEN", key]
    if r < 0.6:
        cmd = rng.choice([b"XRANGE", b"XREVRANGE"])
        op = [cmd, key, random_id(rng, ids), random_id(rng, ids)]
        if rng.random() < 0.3:
            op += [b"COUNT", b"%d" % rng.randrange(-1, 5)]
        if rng.random() < 0.03:
            op += [b"COUNT"]
        return op
    if r < 0.75:
        keys = rng.sample(KEYS, rng.randrange(1, 4))
        op = [b"XREAD"]
        if rng.random() < 0.4:
            op += [b"COUNT", b"%d" % rng.randrange(0, 4)]
        op.append(b"STREAMS")
        op += keys
        op += [rng.choice([b"$", b"0", random_id(rng, ids)]) for _ in keys]
        return op
    if r < 0.85:
        n = rng.randrange(1, 4)
        return [b"XDEL", key] + [random_id(rng, ids) for _ in range(n)]
    if r < 0.93:
        op = [b"XTRIM", key]
        if rng.random() < 0.5:
            op += [b"MAXLEN", b"%d" % rng.randrange(0, 8)]
        else:
            op += [b"MINID", random_id(rng, ids)]
        if rng.random() < 0.15 and lens.get(key, 0) < 80:
            op.insert(3, b"~")
            if rng.random() < 0.5:
                op += [b"LIMIT", b"%d" % rng.randrange(0, 100)]
        return op
    if r < 0.95:
        return [rng.choice([b"TYPE", b"EXISTS", b"GET"]), key]
    if r < 0.955:
        return [b"DEL", key]
    if r < 0.985:
        return [b"SET", b"str", b"v"]
    # A stream with IDs in the future, where `*` is deterministic.
    return [b"XADD", b"s3", b"%d-0" % (FUTURE + rng.randrange(1000)), b"f", b"v"]


def run_raw(client, op):
    try:
        if op[0] == b"KEYS-SORTED":
            return ("ok", sorted(client.execute_command(b"KEYS", *op[1:])))
        return ("ok", client.execute_command(*op))
    except redis.exceptions.ResponseError as e:
        return ("err", str(e))


def compare_random(shoal, real, rng, n):
    mismatches = []
    lens, ids, future, tops = {}, [], set(), {}
    for i in range(n):
        op = gen_op(rng, lens, ids, future, tops)
        a, b = run_raw(shoal, op), run_raw(real, op)
        if a != b:
            mismatches.append(("random #%d" % i, op, a, b))
        if op[0] == b"XADD" and b[0] == "ok" and b[1]:
            ms, seq = b[1].split(b"-")
            ids.append((int(ms), int(seq)))
            del ids[:-200]
            if int(ms) >= FUTURE:
                future.add(op[1])
            else:
                tops[op[1]] = max(tops.get(op[1], 0), int(ms))
        if op[0] == b"DEL":
            future.discard(op[1])
            tops.pop(op[1], None)
        if op[0] in (b"XADD", b"XDEL", b"XTRIM", b"DEL"):
            got = run_raw(real, [b"TYPE", op[1]])
            lens[op[1]] = real.xlen(op[1]) if got == ("ok", b"stream") or got == ("ok", "stream") else 0
    return n, mismatches


# ------------------------------------------------------------ blocking

def blocking(shoal_port, redis_port, protocol):
    """XREAD BLOCK: a timeout, and readers woken by another client's XADD."""
    results = []
    for port in (shoal_port, redis_port):
        r = connect(port, protocol)
        w = connect(port, protocol)
        r.delete("bl")
        got = []
        got.append(outcome(lambda: r.xread({"bl": "$"}, block=100)))
        got.append(outcome(lambda: r.xread({"bl": "0", "bl2": "$"}, block=100, count=5)))

        def later(entries):
            time.sleep(0.3)
            for e in entries:
                w.xadd("bl", {"k": e}, id="%s-0" % e)

        t = threading.Thread(target=later, args=(["10"],))
        t.start()
        started = time.time()
        got.append(outcome(lambda: r.xread({"bl": "$"}, block=5000)))
        waited = time.time() - started
        t.join()
        got.append(("waited enough", 0.2 < waited < 4))
        t = threading.Thread(target=later, args=(["11"],))
        t.start()
        got.append(outcome(lambda: r.xread({"bl": "10-0"}, block=0, count=1)))
        t.join()
        got.append(outcome(lambda: r.xread({"bl": "10-0"}, block=100)))
        w.delete("bl")
        r.close()
        w.close()
        results.append(got)
    a, b = results
    return [("blocking %d" % i, "XREAD BLOCK", x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y], len(a)


def compare(shoal_port, redis_port, seed, n, protocol):
    shoal, real = connect(shoal_port, protocol), connect(redis_port, protocol)
    for c in (shoal, real):
        c.flushall()
    mismatches, total = [], 0
    a, b = api_scenario(shoal), api_scenario(real)
    total += len(a)
    mismatches += [("api #%d" % i, "redis-py", x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    for i, op in enumerate(edge_ops()):
        x, y = run_raw(shoal, op), run_raw(real, op)
        total += 1
        if x != y:
            mismatches.append(("edge #%d" % i, op, x, y))
    # MULTI: a stream command queued is refused in Shoal (docs/streams.md),
    # so only checked for having no effect there.
    pipe = shoal.pipeline(transaction=True)
    pipe.xadd("tx", {"a": "b"}, id="1-1")
    try:
        pipe.execute()
        mismatches.append(("multi", "XADD in MULTI", "accepted", "refused (documented)"))
    except redis.exceptions.ResponseError:
        pass
    if shoal.exists("tx"):
        mismatches.append(("multi", "XADD in MULTI", "applied", "nothing applied"))
    total += 1
    for c in (shoal, real):
        c.flushall()
    k, m = compare_random(shoal, real, random.Random(seed), n)
    total += k
    mismatches += m
    m, k = blocking(shoal_port, redis_port, protocol)
    total += k
    mismatches += m
    shoal.close()
    real.close()
    return total, mismatches


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--redis-port", type=int)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--ops", type=int, default=2000)
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
    for protocol, where, op, a, b in failed[:30]:
        print("RESP%d %s %r\n  shoal: %r\n  redis: %r" % (protocol, where, op, a, b))
    print("resp_stream_compat: %d replies compared (seed %d), %d differences" % (total, args.seed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The server and number commands issue 15 added last (INCRBYFLOAT, CLIENT,
SLOWLOG, LATENCY, CONFIG SET, COMMAND DOCS, MONITOR) against Shoal and a
real Redis through redis-py: every reply compared, errors included.

* INCRBYFLOAT: many random values and increments (decimal with up to 25
  digits and exponents across the whole 80-bit range, hexadecimal, special
  and malformed texts, sums that cancel), each set then incremented; the
  reply and the stored text must be Redis's.
* COMMAND DOCS: the argument structure of every command both have (what
  redis-cli's hints are made of), and COMMAND LIST FILTERBY.
* The rest: fixed scenarios whose replies do not depend on timing or on
  the server's identity; where a reply holds such fields (ids, addresses,
  ages, durations) its shape is compared and the field values that must
  agree (names, flags, counts) are compared exactly.

Usage: resp_server_compat.py --shoal-port PORT [--redis-server PATH]
                             [--floats N] [--seed N]
"""

import argparse
import random
import socket
import sys
import time

import redis

from resp_compat import start_redis


def outcome(fn):
    try:
        return ("ok", fn())
    except redis.exceptions.ResponseError as e:
        return ("err", str(e))


# ---------------------------------------------------------------- floats

def decimal(rng, digits, exp_range):
    d = "".join(rng.choice("0123456789") for _ in range(digits))
    if rng.random() < 0.5 and digits > 1:
        p = rng.randrange(digits + 1)
        d = d[:p] + "." + d[p:]
    if rng.random() < 0.5:
        d += rng.choice("eE") + str(rng.randrange(*exp_range))
    return (rng.choice(["", "-", "+"]) if rng.random() < 0.5 else "") + d


def random_float(rng):
    r = rng.random()
    if r < 0.35:
        return decimal(rng, rng.randrange(1, 8), (-6, 7))
    if r < 0.55:
        return decimal(rng, rng.randrange(1, 26), (-40, 41))
    if r < 0.65:
        return decimal(rng, rng.randrange(1, 30), (-4960, 4940))
    if r < 0.72:
        return str(rng.randrange(-10 ** 20, 10 ** 20))
    if r < 0.8:
        mant = "%x" % rng.randrange(1, 1 << rng.randrange(1, 70))
        return "%s0x%s.%xp%d" % (rng.choice(["", "-"]), mant, rng.randrange(256), rng.randrange(-16500, 16400))
    if r < 0.9:
        return "%.*g" % (rng.randrange(1, 18), rng.uniform(-1e6, 1e6))
    return rng.choice(["inf", "-inf", "Infinity", "nan", "", " 1", "1 ", "1e", "0x", ".", "1..2", "1e5000",
                       "1e-5000", "0e99999", "-0", "0.000", "1" * 200, "0." + "0" * 300 + "1"])


def check_floats(shoal, real, rng, n):
    """Sets a key to a random number, increments it by another (or by its own
    negation, to cancel), reads it back: (checks, mismatches)."""
    cases = []
    for _ in range(n):
        a = random_float(rng)
        b = random_float(rng)
        if rng.random() < 0.05:
            b = a[1:] if a.startswith("-") else "-" + a
        cases.append((a, b))
    results = []
    for client in (shoal, real):
        pipe = client.pipeline(transaction=False)
        for a, b in cases:
            pipe.set("f", a)
            pipe.execute_command("INCRBYFLOAT", "f", b)
            pipe.get("f")
        replies = pipe.execute(raise_on_error=False)
        results.append([r if not isinstance(r, Exception) else ("err", str(r)) for r in replies])
    mismatches = []
    for i, (x, y) in enumerate(zip(*results)):
        if x != y:
            mismatches.append(("INCRBYFLOAT", cases[i // 3], x, y))
    return len(results[0]), mismatches


# ------------------------------------------------------------- scenarios

def scenario(c):
    """Replies to compare exactly, as (label, outcome)."""
    out = []
    ex = lambda *a: outcome(lambda: c.execute_command(*a))
    for args in [
        ("CLIENT", "SETNAME", "compat"), ("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "bad name"),
        ("CLIENT", "SETNAME", ""), ("CLIENT", "GETNAME"), ("CLIENT", "NOSUCH"),
        ("CLIENT", "KILL", "ID", "999999"), ("CLIENT", "KILL", "ID", "x"), ("CLIENT", "KILL", "1.2.3.4:5"),
        ("CLIENT", "KILL", "ADDR", "1.2.3.4:5"), ("CLIENT", "KILL", "LADDR", "1.2.3.4:5"),
        ("CLIENT", "KILL", "USER", "nobody"), ("CLIENT", "KILL", "SKIPME", "maybe"), ("CLIENT", "KILL", "ID"),
        ("CLIENT", "KILL", "FOO", "bar"), ("CLIENT", "KILL", "TYPE", "pubsub"), ("CLIENT", "KILL", "TYPE", "x"),
        ("CLIENT", "KILL", "MAXAGE", "1000000"),
        ("CLIENT", "LIST", "TYPE", "x"), ("CLIENT", "LIST", "ID", "x"), ("CLIENT", "LIST", "ID", "999999"),
        ("CLIENT", "LIST", "FOO"), ("CLIENT", "INFO", "x"), ("CLIENT", "ID", "x"),
        ("CONFIG", "SET", "slowlog-log-slower-than", "x"), ("CONFIG", "SET", "nosuch", "1"),
        ("CONFIG", "SET", "io-threads", "2"), ("CONFIG", "SET", "databases", "1"), ("CONFIG", "SET", "timeout", "-1"),
        ("CONFIG", "SET", "slowlog-max-len", "-1"), ("CONFIG", "SET", "latency-monitor-threshold", "abc"),
        ("CONFIG", "SET", "slowlog-max-len", "5", "slowlog-max-len", "6"),
        ("CONFIG", "SET", "slowlog-max-len", "5", "nosuch", "6"), ("CONFIG", "GET", "slowlog-max-len"),
        ("CONFIG", "SET", "slowlog-max-len", "10", "timeout", "0"),
        ("CONFIG", "GET", "slowlog-*"), ("CONFIG", "GET", "latency-monitor-threshold"), ("CONFIG", "GET", "timeout"),
        ("CONFIG", "SET", "slowlog-log-slower-than", "0"), ("CONFIG", "SET", "latency-monitor-threshold", "0"),
        ("SLOWLOG", "RESET"), ("SLOWLOG", "LEN"), ("SLOWLOG", "GET", "x"), ("SLOWLOG", "GET", "-2"),
        ("SLOWLOG", "NOSUCH"), ("SLOWLOG", "LEN", "x"),
        ("LATENCY", "LATEST"), ("LATENCY", "HISTORY", "command"), ("LATENCY", "RESET"), ("LATENCY", "NOSUCH"),
        ("LATENCY", "HISTORY"),
        ("INCRBYFLOAT", "fl", "1.5"), ("INCRBYFLOAT", "fl"), ("SET", "fl", "abc"), ("INCRBYFLOAT", "fl", "1"),
    ]:
        r = ex(*args)
        if args[:2] == ("CONFIG", "GET") and r[0] == "ok":
            # Redis lists parameters in its hash table's order.
            r = ("ok", sorted(zip(r[1][::2], r[1][1::2])))
        out.append((args, r))
    # The slow log with a threshold of 0 records every command: the last
    # entries' arguments (ids and times differ).
    c.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "0")
    c.execute_command("SLOWLOG", "RESET")
    c.execute_command("SET", "slow", "x" * 200)
    c.execute_command("GET", "slow")
    c.execute_command("MGET", *["a%d" % i for i in range(40)])
    entries = c.execute_command("SLOWLOG", "GET", "3")
    out.append(("SLOWLOG GET 3 args", [e[3] for e in entries]))
    out.append(("SLOWLOG GET 3 shape", [(len(e), e[0] >= 0, e[2] >= 0) for e in entries]))
    out.append(("SLOWLOG LEN", c.execute_command("SLOWLOG", "LEN") >= 4))
    c.execute_command("CONFIG", "SET", "slowlog-max-len", "2")
    c.execute_command("PING")
    out.append(("SLOWLOG LEN after max-len 2", c.execute_command("SLOWLOG", "LEN")))
    out.append(("SLOWLOG GET -1 count", len(c.execute_command("SLOWLOG", "GET", "-1"))))
    out.append(("SLOWLOG GET 0", c.execute_command("SLOWLOG", "GET", "0")))
    c.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    c.execute_command("SLOWLOG", "RESET")
    c.execute_command("GET", "slow")
    out.append(("SLOWLOG off", c.execute_command("SLOWLOG", "LEN")))
    c.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "10000", "slowlog-max-len", "128")
    # CLIENT LIST / INFO: the fields and the values that must agree.
    c.execute_command("CLIENT", "SETNAME", "lister")
    info = c.execute_command("CLIENT", "INFO")
    out.append(("CLIENT INFO fields", parse_fields(info)))
    lst = c.execute_command("CLIENT", "LIST", "ID", c.execute_command("CLIENT", "ID"))
    out.append(("CLIENT LIST ID fields", parse_fields(lst)))
    # Killing another connection by id, by address, and the old form.
    for how in ("ID", "ADDR", "OLD", "SKIPME"):
        victim = redis.Redis(host="127.0.0.1", port=c.connection_pool.connection_kwargs["port"], protocol=2,
                             single_connection_client=True)
        victim.execute_command("CLIENT", "SETNAME", "victim")
        vid = victim.execute_command("CLIENT", "ID")
        vaddr = parse_fields(victim.execute_command("CLIENT", "INFO"))["addr"]
        if how == "ID":
            r = ex("CLIENT", "KILL", "ID", vid)
        elif how == "ADDR":
            r = ex("CLIENT", "KILL", "ADDR", vaddr, "SKIPME", "yes")
        elif how == "OLD":
            r = ex("CLIENT", "KILL", vaddr)
        else:
            me = parse_fields(info)["addr"]
            r = ex("CLIENT", "KILL", "ADDR", me, "SKIPME", "yes")
        out.append(("CLIENT KILL " + how, r))
        gone = outcome(lambda: victim.execute_command("PING"))
        out.append(("victim after KILL " + how, gone[0] if how != "SKIPME" else gone))
        victim.close()
    out += monitor_scenario(c)
    return out


def monitor_scenario(c):
    """MONITOR over a raw socket: the lines other connections' commands
    produce, timestamp and client address masked."""
    port = c.connection_pool.connection_kwargs["port"]
    mon = socket.create_connection(("127.0.0.1", port), timeout=5)
    mon.sendall(b"MONITOR\r\n")
    buf = b""
    while not buf.endswith(b"\r\n"):
        buf += mon.recv(4096)
    out = [("MONITOR reply", buf)]
    c.execute_command("SELECT", "2")
    c.execute_command("SET", "a b", "x\ny\"z\\\x01\xff")
    c.execute_command("INCRBYFLOAT", "n", "1.5")
    # AUTH over a raw socket (redis-py retries a failed AUTH).
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"AUTH secret\r\nHELLO 2 AUTH default secret\r\n")
        time.sleep(0.2)
    c.execute_command("CONFIG", "GET", "timeout")
    c.execute_command("SELECT", "0")
    pipe = c.pipeline(transaction=True)
    pipe.set("t", "1").incr("t")
    pipe.execute()
    c.execute_command("PING")
    lines, buf = [], b""
    deadline = time.time() + 5
    while not any(l.endswith(b'"PING"') for l in lines) and time.time() < deadline:
        buf += mon.recv(4096)
        *done, buf = buf.split(b"\r\n")
        lines += done
    mon.close()
    masked = []
    for line in lines:
        stamp, rest = line.split(b" ", 1)
        db, rest = rest.split(b" ", 1)
        addr, rest = rest.split(b"]", 1)
        masked.append((stamp[:1], stamp.count(b"."), len(stamp.split(b".")[1]), db, rest))
    out.append(("MONITOR lines", masked))
    return out


# ------------------------------------------------------------ COMMAND DOCS

def text(x):
    return x.decode() if isinstance(x, bytes) else x


def arg_shape(args):
    """Arguments as (type, token, optional/multiple flags, nested): what
    redis-cli builds its hints from (names and Redis's extra fields such as
    display_text are left out)."""
    shape = []
    for a in args or []:
        a = {text(k): v for k, v in (a.items() if isinstance(a, dict) else zip(a[::2], a[1::2]))}
        flags = tuple(sorted(f for f in map(text, a.get("flags", [])) if f in ("optional", "multiple")))
        shape.append((text(a["type"]), text(a.get("token")), flags, arg_shape(a.get("arguments"))))
    return tuple(shape)


def command_docs(port):
    """Per command and subcommand name: its argument shape."""
    conn = redis.Connection(host="127.0.0.1", port=port, protocol=3)
    conn.send_command("COMMAND", "DOCS")
    docs = conn.read_response()
    shapes = {}

    def walk(name, doc):
        doc = {text(k): v for k, v in doc.items()}
        shapes[text(name)] = arg_shape(doc.get("arguments"))
        for sub, sub_doc in (doc.get("subcommands") or {}).items():
            walk(sub, sub_doc)

    for name, doc in docs.items():
        walk(name, doc)
    conn.disconnect()
    return shapes


def compare_docs(shoal_port, redis_port):
    """COMMAND DOCS argument shapes of every command both servers have (the
    ones only Shoal has, SHOAL.* and CLIENT SETINFO from Redis 7.2, are
    left out), and COMMAND LIST FILTERBY restricted to Shoal's commands."""
    shoal, real = command_docs(shoal_port), command_docs(redis_port)
    mismatches = []
    common = sorted(n for n in shoal if n in real)
    for n in common:
        if shoal[n] != real[n]:
            mismatches.append(("COMMAND DOCS " + n, shoal[n], real[n]))
    checks = len(common)
    # Raw connections: redis-py would parse COMMAND replies its own way.
    clients = [redis.Connection(host="127.0.0.1", port=p, protocol=2) for p in (shoal_port, redis_port)]

    def raw(conn, *args):
        conn.send_command(*args)
        try:
            return ("ok", conn.read_response())
        except redis.exceptions.ResponseError as e:
            return ("err", str(e))
    for f in [("PATTERN", "c*"), ("PATTERN", "*|help"), ("ACLCAT", "string"), ("ACLCAT", "admin"), ("ACLCAT", "nosuch"),
              ("MODULE", "x")]:
        got = [raw(c, "COMMAND", "LIST", "FILTERBY", *f) for c in clients]
        got = [(g[0], sorted(text(x) for x in g[1] if text(x) in common)) if g[0] == "ok" else g for g in got]
        checks += 1
        if got[0] != got[1]:
            mismatches.append(("COMMAND LIST FILTERBY %s %s" % f, got[0], got[1]))
    for args in [("COMMAND", "LIST", "FOO"), ("COMMAND", "LIST", "FILTERBY", "FOO", "x")]:
        got = [raw(c, *args) for c in clients]
        checks += 1
        if got[0] != got[1]:
            mismatches.append((" ".join(args), got[0], got[1]))
    for c in clients:
        c.disconnect()
    return checks, mismatches


def parse_fields(line):
    if isinstance(line, bytes):
        line = line.decode()
    if isinstance(line, list):
        line = line[0]
    fields = dict(f.split("=", 1) for f in line.strip().split(" ") if "=" in f)
    # Values that differ by identity or timing: only their presence counts.
    for k in ("id", "addr", "laddr", "fd", "age", "idle", "qbuf", "qbuf-free", "argv-mem", "obl", "oll", "omem",
              "tot-mem", "events", "multi-mem", "rbs", "rbp", "ssub", "lib-name", "lib-ver", "redir", "resp",
              "user", "sub", "psub", "watch", "multi"):
        if k in fields:
            fields[k] = "*"
    return fields


def compare_scenarios(shoal_port, redis_port):
    results = []
    for port in (shoal_port, redis_port):
        c = redis.Redis(host="127.0.0.1", port=port, protocol=2, single_connection_client=True, lib_name=None, lib_version=None)
        c.execute_command("FLUSHALL")
        results.append(scenario(c))
        c.close()
    mismatches = [(a[0], a[1], b[1]) for a, b in zip(*results) if a != b]
    return len(results[0]), mismatches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--floats", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--only", choices=["floats", "scenarios"])
    args = ap.parse_args()
    proc, redis_port = start_redis(args.redis_server)
    checks, mismatches = 0, []
    try:
        if args.only != "scenarios":
            shoal = redis.Redis(host="127.0.0.1", port=args.shoal_port, protocol=2, single_connection_client=True)
            real = redis.Redis(host="127.0.0.1", port=redis_port, protocol=2, single_connection_client=True)
            n, m = check_floats(shoal, real, random.Random(args.seed), args.floats)
            checks += n
            mismatches += m
        if args.only != "floats":
            for compare in (compare_scenarios, compare_docs):
                n, m = compare(args.shoal_port, redis_port)
                checks += n
                mismatches += m
    finally:
        proc.kill()
        proc.wait()
    for m in mismatches[:30]:
        print("%r\n  shoal: %r\n  redis: %r" % m)
    print("resp_server_compat: %d checks, %d differences" % (checks, len(mismatches)))
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()

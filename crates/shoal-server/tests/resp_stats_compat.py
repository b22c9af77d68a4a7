#!/usr/bin/env python3
"""INFO commandstats, errorstats and total_error_replies: the same commands
against Shoal and a real Redis, through redis-py, must leave the same
counts (calls, rejected_calls, failed_calls per command; error replies per
error code). Run times (usec) are not compared.

Usage: resp_stats_compat.py --shoal-port PORT [--redis-server PATH]
"""

import argparse
import sys

import redis

from resp_compat import start_redis

# Commands whose counters are compared (Redis counts subcommands such as
# CLIENT SETINFO under their own names; those are left out).
COMPARED = ["get", "set", "incr", "incrby", "mget", "mset", "del", "exists", "append", "multi", "exec",
            "discard", "select", "expire", "ttl", "getrange", "rename", "copy", "echo"]

SEQUENCE = [
    ["SET", "a", "1"], ["GET", "a"], ["GET"], ["GET", "a", "b"], ["INCR", "a"], ["SET", "s", "x"], ["INCR", "s"],
    ["INCRBY", "a", "notanumber"], ["MGET", "a", "s", "zz"], ["MSET", "k1", "v1", "k2"], ["DEL", "k1", "zz"],
    ["EXISTS", "a"], ["APPEND", "s", "y"], ["SELECT", "99"], ["SELECT", "1"], ["SELECT", "0"],
    ["EXPIRE", "a", "100"], ["EXPIRE", "a", "x"], ["TTL", "a"], ["GETRANGE", "s", "0", "x"],
    ["RENAME", "nosuch", "b"], ["RENAME", "s", "s2"], ["COPY", "s2", "s3"], ["COPY", "s2", "s3", "BAD"],
    ["ECHO", "hi"], ["NOSUCHCOMMAND", "x"],
    ["MULTI"], ["SET", "t", "1"], ["INCR", "t"], ["EXEC"],
    ["MULTI"], ["SET", "t"], ["GET", "t"], ["EXEC"],
    ["MULTI"], ["NOSUCH"], ["EXEC"],
    ["MULTI"], ["GET", "t"], ["DISCARD"], ["EXEC"], ["DISCARD"],
    ["MULTI"], ["SET", "t", "x"], ["INCR", "t"], ["EXEC"],
]


def figures(client):
    info = client.execute_command("INFO", "commandstats")
    cmds = {}
    for name, v in info.items():
        if name.startswith("cmdstat_"):
            cmds[name[len("cmdstat_"):]] = (v["calls"], v.get("rejected_calls", 0), v.get("failed_calls", 0))
    errors = {k: v["count"] for k, v in client.execute_command("INFO", "errorstats").items()}
    total = client.execute_command("INFO", "stats")["total_error_replies"]
    return cmds, errors, total


def run(port):
    """The counters the sequence added (what other connections did before,
    such as a health check, is subtracted)."""
    c = redis.Redis(port=port, protocol=2, lib_name=None, lib_version=None)
    before = figures(c)
    for cmd in SEQUENCE:
        try:
            c.execute_command(*cmd)
        except redis.exceptions.ResponseError:
            pass
    after = figures(c)
    cmds = {}
    for name, (calls, rejected, failed) in after[0].items():
        b = before[0].get(name, (0, 0, 0))
        cmds[name] = (calls - b[0], rejected - b[1], failed - b[2])
    errors = {k: v - before[1].get(k, 0) for k, v in after[1].items() if v != before[1].get(k, 0)}
    return cmds, errors, after[2] - before[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--redis-server", default="redis-server")
    args = ap.parse_args()
    proc, redis_port = start_redis(args.redis_server)
    try:
        shoal, real = run(args.shoal_port), run(redis_port)
    finally:
        proc.kill()
    diffs = 0
    for name in COMPARED:
        a, b = shoal[0].get(name, (0, 0, 0)), real[0].get(name, (0, 0, 0))
        if a != b:
            diffs += 1
            print(f"cmdstat_{name} (calls, rejected, failed): shoal {a}, redis {b}")
    if shoal[1] != real[1]:
        diffs += 1
        print(f"errorstats: shoal {shoal[1]}, redis {real[1]}")
    if shoal[2] != real[2]:
        diffs += 1
        print(f"total_error_replies: shoal {shoal[2]}, redis {real[2]}")
    print(f"resp_stats_compat: {len(SEQUENCE)} commands, {len(COMPARED)} commands' counters compared, {diffs} differences")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""redis-py's RedisCluster against a Shoal cluster in Redis Cluster mode.

Connects to one server, lets the client read the slot map (CLUSTER SLOTS)
and drives every key through the client's own routing: SET/GET/INCR/DEL,
keys with a shared hash tag in one MGET/MSET, a cluster pipeline, expiry,
and DBSIZE of every master adding up to the keys written. Exits non-zero on any wrong answer.
The caller checks Shoal's forwarded_requests counters: the client must have
sent every key to its master.
"""
import argparse
import sys

from redis.cluster import RedisCluster


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", type=int, default=500)
    args = ap.parse_args()
    rc = RedisCluster(host="127.0.0.1", port=args.port, socket_timeout=10)
    nodes = rc.get_primaries()
    if len(nodes) < 2:
        sys.exit(f"expected several masters, got {nodes}")
    n = args.keys
    # DBSIZE per master: each counts only its own keys, as in Redis Cluster.
    before = sum(rc.dbsize(target_nodes=node) for node in nodes)
    for i in range(n):
        assert rc.set(f"k:{i}", str(i)) is True
    for i in range(n):
        got = rc.get(f"k:{i}")
        assert got == str(i).encode(), (i, got)
    for i in range(0, n, 5):
        assert rc.incr(f"k:{i}") == i + 1
    # One slot: multi-key commands go to its master as one request.
    assert rc.mset({"{user:7}:name": "ann", "{user:7}:mail": "a@x"}) is True
    assert rc.mget("{user:7}:name", "{user:7}:mail") == [b"ann", b"a@x"]
    # Several slots: redis-py splits them itself.
    assert rc.mget_nonatomic([f"k:{i}" for i in range(1, 40, 5)]) == [str(i).encode() for i in range(1, 40, 5)]
    pipe = rc.pipeline()
    for i in range(50):
        pipe.set(f"p:{i}", i)
    for i in range(50):
        pipe.get(f"p:{i}")
    replies = pipe.execute()
    assert replies[:50] == [True] * 50 and replies[50:] == [str(i).encode() for i in range(50)], replies
    assert rc.set("ttl:k", "v", ex=100) is True
    ttl = rc.ttl("ttl:k")
    assert 0 < ttl <= 100, ttl
    assert rc.delete("ttl:k") == 1
    total = sum(rc.dbsize(target_nodes=node) for node in nodes) - before
    expected = n + 2 + 50
    assert total == expected, (total, expected)
    print(f"redis-py RedisCluster: {n} keys over {len(nodes)} masters, {total} new keys in the masters' DBSIZE")
    rc.close()


if __name__ == "__main__":
    main()

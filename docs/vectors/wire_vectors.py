#!/usr/bin/env python3
"""Independent reference encoder for docs/wire-format.md (pure Python, no
dependencies). Prints the test vectors that the Rust tests also check
(crates/shoal-proto/tests/vectors.rs)."""
import struct

MAGIC = 0x53
VERSION = 1
RESPONSE = 0x01

OP = {
    "ping": 1, "read": 2, "write": 3, "remove": 4, "increment": 5,
    "multi_read": 6, "multi_write": 7, "multi_remove": 8, "enumerate": 9,
    "write_ttl": 10, "read_ttl": 11, "chunk_create": 12, "chunk_get": 13, "chunk_put": 14,
    "chunk_remove": 15, "create_table": 16, "drop_table": 17, "get_table_id": 18, "stats": 19, "auth": 20, "create_chunk_table": 21,
    "create_stream": 22, "produce": 23, "consume": 24, "describe_stream": 25,
    "chunk_lock": 27, "chunk_unlock": 28, "chunk_renew": 29, "chunk_put_locked": 30,
    "claim_group": 31, "consume_claimed": 32, "commit_group": 33,
}

STATUS = {
    "ok": 0, "unknown_table": 1, "key_too_large": 2, "value_too_large": 3,
    "object_doesnt_exist": 4, "object_exists": 5, "wrong_version": 6,
    "not_an_integer": 7, "overflow": 8, "out_of_memory": 9,
    "unknown_table_name": 10, "unknown_tablet": 11, "retry": 12,
    "not_authenticated": 13, "auth_failed": 14,
    "malformed_request": 16, "unknown_opcode": 17, "frame_too_large": 18,
    "unsupported_version": 19, "lock_busy": 20, "lock_not_held": 21, "lock_lost": 22,
    "lock_table_full": 23, "lock_owner_limit": 24,
}


def frame(op, request_id, body, response=False):
    flags = RESPONSE if response else 0
    return struct.pack("<BBBBQI", MAGIC, VERSION, OP[op], flags, request_id, len(body)) + body


def rules(doesnt_exist=False, exists=False, le=False, ne=False, given=0):
    flags = (1 if doesnt_exist else 0) | (2 if exists else 0) | (4 if le else 0) | (8 if ne else 0)
    return struct.pack("<BQ", flags, given)


def key_op(table, key, r):
    return struct.pack("<Q", table) + r + struct.pack("<I", len(key)) + key


def write_op(table, key, value, r):
    return struct.pack("<Q", table) + r + struct.pack("<II", len(key), len(value)) + key + value


def name(s):
    b = s.encode()
    return struct.pack("<H", len(b)) + b


def ok(payload=b""):
    return bytes([STATUS["ok"]]) + payload


def hexs(b):
    return " ".join(f"{x:02x}" for x in b)


VECTORS = [
    ("ping request (id 1)", frame("ping", 1, b"")),
    ("read request (id 2, table 7, key `k`)", frame("read", 2, key_op(7, b"k", rules()))),
    ("write request (id 3, table 7, key `k`, value `v1`, only if version is 5)",
     frame("write", 3, write_op(7, b"k", b"v1", rules(doesnt_exist=True, ne=True, given=5)))),
    ("increment request (id 4, table 1, key `n`, delta -2)",
     frame("increment", 4, struct.pack("<Q", 1) + rules() + struct.pack("<qI", -2, 1) + b"n")),
    ("multi-read request (id 5, table 1, keys `a` and `bc`)",
     frame("multi_read", 5, struct.pack("<I", 2) + struct.pack("<QI", 1, 1) + b"a" + struct.pack("<QI", 1, 2) + b"bc")),
    ("enumerate request (id 6, table 3, cursor 0, max 100)",
     frame("enumerate", 6, struct.pack("<QQI", 3, 0, 100))),
    ("create-table request (id 7, name `users`)", frame("create_table", 7, name("users"))),
    ("read response (id 2, version 9, value `hello`)",
     frame("read", 2, ok(struct.pack("<QI", 9, 5) + b"hello"), response=True)),
    ("write response: wrong version (id 3, current version 6)",
     frame("write", 3, bytes([STATUS["wrong_version"]]) + struct.pack("<Q", 6), response=True)),
    ("multi-read response (id 5; `a` at version 3 is `x`, `bc` does not exist)",
     frame("multi_read", 5, ok(struct.pack("<I", 2) + bytes([0]) + struct.pack("<QI", 3, 1) + b"x"
                                 + bytes([STATUS["object_doesnt_exist"]])), response=True)),
    ("enumerate response (id 6; object `k`=`v` version 2; more from cursor 0x100)",
     frame("enumerate", 6, ok(struct.pack("<BQI", 1, 0x100, 1) + struct.pack("<QII", 2, 1, 1) + b"kv"),
           response=True)),
    ("create-table response (id 7, table 4)", frame("create_table", 7, ok(struct.pack("<Q", 4)), response=True)),
    ("stats response (id 8; objects=3, log_utilisation=0.5)",
     frame("stats", 8, ok(struct.pack("<H", 2) + bytes([7]) + b"objects" + bytes([0]) + struct.pack("<Q", 3)
                          + bytes([15]) + b"log_utilisation" + bytes([1]) + struct.pack("<d", 0.5)),
           response=True)),
    ("unknown-table response to a read (id 9, table 42)",
     frame("read", 9, bytes([STATUS["unknown_table"]]) + struct.pack("<Q", 42), response=True)),
    ("auth request (id 10, user `default`, password `s3cret`)",
     frame("auth", 10, struct.pack("<HH", 7, 6) + b"default" + b"s3cret")),
    ("auth response (id 10)", frame("auth", 10, ok(), response=True)),
    ("auth response: auth failed (id 10)", frame("auth", 10, bytes([STATUS["auth_failed"]]), response=True)),
    ("not-authenticated response to a read (id 11)",
     frame("read", 11, bytes([STATUS["not_authenticated"]]), response=True)),
    ("write-ttl request (id 12, table 7, key `k`, value `v`, ttl 60000 ms)",
     frame("write_ttl", 12, struct.pack("<Q", 7) + rules() + struct.pack("<QII", 60000, 1, 1) + b"k" + b"v")),
    ("write-ttl response (id 12, version 3)", frame("write_ttl", 12, ok(struct.pack("<Q", 3)), response=True)),
    ("read-ttl request (id 13, table 7, key `k`)", frame("read_ttl", 13, key_op(7, b"k", rules()))),
    ("read-ttl response (id 13, version 3, expires at 1700000060000, 59000 ms left)",
     frame("read_ttl", 13, ok(struct.pack("<QQQ", 3, 1700000060000, 59000)), response=True)),
    ("read-ttl response (id 14, version 2, no expiry)",
     frame("read_ttl", 14, ok(struct.pack("<QQQ", 2, 0, 0)), response=True)),
    ("create-chunk-table request (id 15, name `graph`)", frame("create_chunk_table", 15, name("graph"))),
    ("chunk-create request (id 16, table 5, payloads `ab` and empty)",
     frame("chunk_create", 16, struct.pack("<QI", 5, 2) + struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0))),
    ("chunk-create response (id 16, chunks 0x1000000000001 and 0x1000000000002)",
     frame("chunk_create", 16, ok(struct.pack("<IQQ", 2, (1 << 48) | 1, (1 << 48) | 2)), response=True)),
    ("chunk-get request (id 17, table 5, chunk 0x1000000000001)",
     frame("chunk_get", 17, struct.pack("<QIQ", 5, 1, (1 << 48) | 1))),
    ("chunk-get response (id 17; version 1 is `ab`)",
     frame("chunk_get", 17, ok(struct.pack("<I", 1) + bytes([0]) + struct.pack("<QI", 1, 2) + b"ab"), response=True)),
    ("chunk-put request (id 18, table 5, chunk 0x1000000000001, payload `xyz`)",
     frame("chunk_put", 18, struct.pack("<QIQI", 5, 1, (1 << 48) | 1, 3) + b"xyz")),
    ("chunk-remove response (id 19; version 2; second chunk does not exist)",
     frame("chunk_remove", 19, ok(struct.pack("<I", 2) + bytes([0]) + struct.pack("<Q", 2)
                                   + bytes([STATUS["object_doesnt_exist"]])), response=True)),
    ("create-stream request (id 20, name `clicks`, 4 streamlets, server's default logs, 1 MiB segments, 4 per group, no timeout)",
     frame("create_stream", 20, name("clicks") + struct.pack("<IIIIQ", 4, 0, 1 << 20, 4, 0))),
    ("create-stream response (id 20, table 6; 4 streamlets, 2 logs, 1 MiB segments, 4 per group, no timeout)",
     frame("create_stream", 20, ok(struct.pack("<QIIIIQ", 6, 4, 2, 1 << 20, 4, 0)), response=True)),
    ("produce request (id 21, table 6, streamlet 1, producer 9, records `a` and `bc`)",
     frame("produce", 21, struct.pack("<QIQI", 6, 1, 9, 2) + struct.pack("<I", 1) + b"a" + struct.pack("<I", 2) + b"bc")),
    ("produce response (id 21, first record at group 3, segment 0, position 7; 2 records)",
     frame("produce", 21, ok(struct.pack("<QIII", 3, 0, 7, 2)), response=True)),
    ("consume request (id 22, table 6, streamlet 1, group 3, segment 0, position 7, max 65536 bytes)",
     frame("consume", 22, struct.pack("<QIQIII", 6, 1, 3, 0, 7, 65536))),
    ("consume response (id 22, next group 3, segment 0, position 9, end of group; records `a` and `bc`)",
     frame("consume", 22, ok(struct.pack("<QIIBI", 3, 0, 9, 1, 2) + struct.pack("<I", 1) + b"a"
                             + struct.pack("<I", 2) + b"bc"), response=True)),
    ("describe-stream request (id 23, table 6, streamlet 1, groups from 0, at most 100)",
     frame("describe_stream", 23, struct.pack("<QIQI", 6, 1, 0, 100))),
    ("describe-stream response (id 23, the shape above; group 3 of log 1: 1 segment, 9 records, 20 bytes, closed)",
     frame("describe_stream", 23, ok(struct.pack("<IIIIQ", 4, 2, 1 << 20, 4, 0) + struct.pack("<I", 1)
                                     + struct.pack("<QIIQQB", 3, 1, 1, 9, 20, 1)), response=True)),
    ("chunk-lock request (id 24, table 5, chunk 0x1000000000001, owner 9, exclusive, wait, lease 5000 ms)",
     frame("chunk_lock", 24, struct.pack("<QQQBBI", 5, (1 << 48) | 1, 9, 1, 1, 5000))),
    ("chunk-lock response (id 24, token 0x1a2b3c4d5e6f7081, lease 5000 ms)",
     frame("chunk_lock", 24, ok(struct.pack("<QI", 0x1a2b3c4d5e6f7081, 5000)), response=True)),
    ("chunk-lock response (id 25, busy: retry after 20000 us)",
     frame("chunk_lock", 25, bytes([STATUS["lock_busy"]]) + struct.pack("<I", 20000), response=True)),
    ("chunk-unlock request (id 26, table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081)",
     frame("chunk_unlock", 26, struct.pack("<QQQQ", 5, (1 << 48) | 1, 9, 0x1a2b3c4d5e6f7081))),
    ("chunk-unlock response (id 26, lock lost)",
     frame("chunk_unlock", 26, bytes([STATUS["lock_lost"]]), response=True)),
    ("chunk-renew request (id 27, table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081, lease 3000 ms)",
     frame("chunk_renew", 27, struct.pack("<QQQQI", 5, (1 << 48) | 1, 9, 0x1a2b3c4d5e6f7081, 3000))),
    ("chunk-renew response (id 27, lease 3000 ms)",
     frame("chunk_renew", 27, ok(struct.pack("<I", 3000)), response=True)),
    ("chunk-put-locked request (id 28, table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081, payload `xy`)",
     frame("chunk_put_locked", 28, struct.pack("<QQQQI", 5, (1 << 48) | 1, 9, 0x1a2b3c4d5e6f7081, 2) + b"xy")),
    ("chunk-put-locked response (id 28, version 4)",
     frame("chunk_put_locked", 28, ok(struct.pack("<Q", 4)), response=True)),
    ("chunk-lock response (id 29, lock table full: limit 100000)",
     frame("chunk_lock", 29, bytes([STATUS["lock_table_full"]]) + struct.pack("<I", 100000), response=True)),
    ("chunk-lock response (id 30, owner limit: limit 10000)",
     frame("chunk_lock", 30, bytes([STATUS["lock_owner_limit"]]) + struct.pack("<I", 10000), response=True)),
    ("claim-group request (id 31, table 6, streamlet 1, instance 5, lease 3000 ms, consumer `billing`)",
     frame("claim_group", 31, struct.pack("<QIQI", 6, 1, 5, 3000) + name("billing"))),
    ("claim-group response (id 31, granted: log 2, from group 3, segment 1, position 4; lease 3000 ms)",
     frame("claim_group", 31, ok(struct.pack("<BIQIII", 1, 2, 3, 1, 4, 3000)), response=True)),
    ("claim-group response (id 32, no group free now)",
     frame("claim_group", 32, ok(bytes(25)), response=True)),
    ("consume-claimed request (id 33, table 6, streamlet 1, instance 5, lease 3000 ms, group 3, segment 1, position 4, max 4096 bytes, consumer `billing`)",
     frame("consume_claimed", 33, struct.pack("<QIQIQIII", 6, 1, 5, 3000, 3, 1, 4, 4096) + name("billing"))),
    ("consume-claimed response (id 33, lease not held)",
     frame("consume_claimed", 33, bytes([STATUS["lock_lost"]]), response=True)),
    ("commit-group request (id 34, table 6, streamlet 1, instance 5, lease 3000 ms, group 3, segment 1, position 9, release, consumer `billing`)",
     frame("commit_group", 34, struct.pack("<QIQIQIIB", 6, 1, 5, 3000, 3, 1, 9, 1) + name("billing"))),
    ("commit-group response (id 34, done)",
     frame("commit_group", 34, ok(bytes([1])), response=True)),
]

if __name__ == "__main__":
    for label, b in VECTORS:
        print(f"{label}\n    {hexs(b)}")

#!/usr/bin/env python3
"""Independent reference encoder for docs/log-format.md (pure Python, no
dependencies). Prints the test vectors that the Rust tests also check."""
import struct


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def header(t, body_len):
    n = 1 if body_len < 1 << 8 else 2 if body_len < 1 << 16 else 3
    return bytes([t | (n << 5)]) + body_len.to_bytes(n, "little")


def structured(t, rest):
    h = header(t, 4 + len(rest))
    return h + struct.pack("<I", crc32c(rest, crc32c(h))) + rest


def obj(table, version, key, value):
    return structured(2, varint(table) + varint(version) + varint(len(key)) + key + value)


def obj_expiring(table, version, expiry_ms, key, value):
    return structured(7, varint(table) + varint(version) + varint(expiry_ms) + varint(len(key)) + key + value)


def tombstone(table, version, segment, key):
    return structured(3, varint(table) + varint(version) + varint(segment) + key)


FORMAT_VERSION = 5


def chunk(table, node, local, version, payload):
    return structured(8, varint(table) + varint(node) + varint(local) + varint(version) + payload)


def chunk_tombstone(table, node, local, version, segment):
    return structured(9, varint(table) + varint(node) + varint(local) + varint(version) + varint(segment))


def chunk_run(table, node, version, records):
    """records: (local id, payload), ids ascending, payloads of one length."""
    first, last = records[0][0], records[-1][0]
    span = last - first
    width = 0 if span == len(records) - 1 else (span.bit_length() + 7) // 8
    body = b"".join(varint(v) for v in (table, node, version, len(records[0][1]), len(records), first))
    body += bytes([width])
    if width:
        body += b"".join((local - first).to_bytes(width, "little") for local, _ in records)
    body += b"".join(p for _, p in records)
    return structured(11, body)


def stream_batch(table, streamlet, log, group, segment, index, records):
    place = b"".join(varint(v) for v in (table, streamlet, log, group, segment, index))
    body = varint(len(records)) + b"".join(varint(len(r)) + r for r in records)
    return structured(10, place + body)


def segment_header(log, segment, capacity):
    return structured(1, bytes([FORMAT_VERSION]) + struct.pack("<QQI", log, segment, capacity))


def digest(ids):
    return structured(4, struct.pack("<I", len(ids)) + b"".join(struct.pack("<Q", i) for i in ids))


def safe_version(v):
    return structured(5, struct.pack("<Q", v))


def hexs(b):
    return " ".join(f"{x:02x}" for x in b)


if __name__ == "__main__":
    print("object      ", hexs(obj(1, 1, b"key", b"value")))
    print("obj expiring", hexs(obj_expiring(1, 1, 1700000000000, b"key", b"value")))
    print("tombstone   ", hexs(tombstone(1, 1, 3, b"key")))
    print("chunk       ", hexs(chunk(1, 2, 5, 1, b"payload")))
    print("chunk big id", hexs(chunk(1, 0xFFFF, (1 << 48) - 1, 300, bytes(range(16)))))
    print("chunk tomb  ", hexs(chunk_tombstone(1, 2, 5, 1, 3)))
    print("chunk run   ", hexs(chunk_run(1, 2, 1, [(5, b"ab"), (6, b"cd"), (7, b"ef")])))
    print("run sparse  ", hexs(chunk_run(1, 2, 3, [(5, b"ab"), (9, b"cd"), (300, b"ef")])))
    print("batch       ", hexs(stream_batch(1, 0, 1, 2, 0, 3, [b"ab", b"", b"cde"])))
    big = stream_batch(5, 300, 2, 70000, 1, 0, [bytes([i]) * 100 for i in range(3)])
    print("batch big   ", hexs(big[:16]), "...", len(big), "bytes")
    print("safe version", hexs(safe_version(7)))
    print("digest      ", hexs(digest([1, 2])))
    print("seg header  ", hexs(segment_header(9, 2, 8 << 20)))
    seg = segment_header(9, 2, 8 << 20) + obj(1, 1, b"key", b"value")
    running = crc32c(seg[0:2])
    running = crc32c(seg[27:29], running)
    running = crc32c(bytes([6]), running)
    print("checksum    ", hexs(bytes([6]) + struct.pack("<I", running or 1)))

#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/)
from the documented test vectors: docs/vectors/*.py (the native wire
format and the log format), the JSON examples of docs/coordinator.md, and
a few frames of each other format built here from the layouts of
docs/replication.md and backup/files.rs. Run from anywhere; rewrites the
corpora (small: a few dozen files in all)."""
import hashlib
import json
import os
import re
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs", "vectors"))
import log_vectors as lv  # noqa: E402

CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def vectors(script):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "vectors", script)],
                         capture_output=True, text=True, check=True).stdout
    label = None
    for line in out.splitlines():
        if re.fullmatch(r"\s+([0-9a-f]{2} ?)+", line):
            yield label, bytes.fromhex(line)
        else:
            m = re.match(r"^(.*?)\s{2,}(([0-9a-f]{2} ?)+)$", line)
            if m:
                yield m.group(1), bytes.fromhex(m.group(2))
            else:
                label = line


# Native protocol: the wire vectors.
for label, b in vectors("wire_vectors.py"):
    put("native_request" if "request" in label else "native_response", b)

# Log entries and segments: the log vectors, raw (mode 0) and resealed (mode 1).
entries = [b for _, b in vectors("log_vectors.py")]
seg = lv.segment_header(9, 2, 8 << 20) + lv.obj(1, 1, b"key", b"value")
head_crc = 0
for e in (seg[0:2], seg[27:29], b"\x06"):
    head_crc = lv.crc32c(e, head_crc)
seg += struct.pack("<BI", 6, head_crc or 1)
for mode in (0, 1):
    for e in entries + [seg]:
        put("log_entry", bytes([mode]) + e)
    put("replica_scan", bytes([mode]) + seg)
    put("replica_scan", bytes([mode]) + seg + lv.tombstone(1, 2, 2, b"key") + lv.safe_version(3) + b"\x06\0\0\0\0")

# RESP: requests as clients send them.
def multibulk(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out

resp = [
    multibulk(b"SET", b"k", b"v"), multibulk(b"GET", b"k"), multibulk(b"INCRBY", b"n", b"-2"),
    multibulk(b"MSET", b"a", b"1", b"b", b"2") + multibulk(b"MGET", b"a", b"b", b"c"),
    multibulk(b"SET", b"k", b"v", b"EX", b"10", b"NX", b"GET"), multibulk(b"HELLO", b"3") + multibulk(b"SCAN", b"0"),
    multibulk(b"APPEND", b"k", b"xy") + multibulk(b"STRLEN", b"k") + multibulk(b"GETSET", b"k", b"z"),
    multibulk(b"CLIENT", b"SETNAME", b"me") + multibulk(b"CONFIG", b"GET", b"maxmemory"),
    multibulk(b"COMMAND", b"DOCS", b"get") + multibulk(b"INFO", b"server"),
    multibulk(b"SELECT", b"3") + multibulk(b"DEL", b"a", b"b") + multibulk(b"EXISTS", b"a") + multibulk(b"DBSIZE"),
    b"PING\r\n", b"set \"a b\\x41\" 'it\\'s'\r\n", b"*0\r\n*-1\r\n\r\n", b"ECHO hi\nQUIT\r\n",
]
for r in resp:
    put("resp_frame", r)
    put("resp_command", r)

# memcached's text protocol: command lines (and data blocks) as clients send them.
memcached = [
    b"get a b c\r\n", b"set k 5 100 3 noreply\r\nabc\r\n", b"cas k 0 0 1 42\r\nx\r\ngets k\r\n",
    b"mg k v k c f t s q O123 T30\r\nms k 2 T0 F7 C1 MA q\r\nhi\r\nmd k q C3\r\nma k N0 J5 D2 MD v\r\nmn\r\n",
    b"incr n 5\r\ndecr n 1 noreply\r\ntouch k 10\r\ngat 10 a b\r\ndelete k 0 noreply\r\n",
    b"flush_all 10 noreply\r\nstats\r\nverbosity 1\r\nversion\r\nquit\r\n",
]
for r in memcached:
    put("memcached_frame", r)

# Replication frames (docs/replication.md).
def rframe(kind, segment, body):
    return struct.pack("<B3xIQ", kind, len(body), segment) + body

repl = [
    rframe(0x01, 0, b"SHRB" + struct.pack("<HBxQQQ", 2, 0, 3, 7, 2)),
    rframe(0x02, 5, struct.pack("<IB3xQ", 1 << 20, 1, 7)),
    rframe(0x03, 5, struct.pack("<I", 0) + seg),
    rframe(0x06, 5, struct.pack("<I", 27) + seg[27:]),
    rframe(0x04, 5, struct.pack("<II", len(seg), head_crc)),
    rframe(0x05, 5, b""), rframe(0x80, 0, b""),
    rframe(0x81, 5, struct.pack("<I", 100)), rframe(0x07, 0, struct.pack("<Q", 7)),
    rframe(0x0b, 5, struct.pack("<Q", 3)),
    rframe(0x86, 0, struct.pack("<I", 2) + struct.pack("<QQIIB7xQ", 1, 1, 10, 5, 2, 3)
           + struct.pack("<QQIIB7xQ", 2, 1, 3, 0, 1, 1)),
    rframe(0x87, 4, struct.pack("<QB3xI", 2, 2, len(seg)) + seg),
    rframe(0x0a, 3, struct.pack("<QI4x", 7, 2) + struct.pack("<QQQ", 1, 0, 99) + struct.pack("<QQQ", 2, 5, 2**64 - 1)),
    rframe(0x89, 3, struct.pack("<QB3xIIIIQ4x", 4, 2, 1000, 0xdeadbeef, 1, 0, 77) + lv.obj(1, 1, b"key", b"value")),
    rframe(0x8f, 0, b"no such replica"),
]
for r in repl:
    put("replication_frame", r)

# Control frames: the JSON examples of docs/coordinator.md.
doc = open(os.path.join(ROOT, "docs", "coordinator.md")).read()
blocks = re.findall(r"```json\n(.*?)```", doc, re.S)
msgs = [line for line in doc.splitlines() if line.startswith(('{"op"', '{"reply"')) and '"..."' not in line]
cluster_map = json.loads(blocks[0])
cluster_map.update(json.loads("{" + blocks[1].strip() + "}"))
msgs.append(json.dumps({"reply": "map", "map": cluster_map}))
msgs.append(json.dumps({"reply": "enlisted", "server": 2, "log": 3, "recover": [2], "map": cluster_map}))
msgs.append(json.dumps({"reply": "stats", "stats": {"servers": 2, "load": 0.5, "names": ["a"], "x": None}}))
for m in msgs:
    body = m.encode()
    put("control_frame", struct.pack("<I", len(body)) + body)

# Backup files: segment file headers (versions 3, 2, 1) and buffer metadata.
def file_header(version, log, log_version, segment, length, checksum, epoch):
    b = b"SHSG" + struct.pack("<HxxQQQII4x", version, log, log_version, segment, length, checksum)
    if version == 3:
        b += struct.pack("<Q", epoch)
    return b + struct.pack("<I", lv.crc32c(b))

def meta(version, state, log, log_version, segment, size, length, checksum, epoch):
    b = b"SHBF" + struct.pack("<HBxQQQIII", version, state, log, log_version, segment, size, length, checksum)
    if version == 2:
        b += struct.pack("<Q", epoch)
    return b + struct.pack("<I", lv.crc32c(b))

data = seg
for mode in (8, 15):
    v3 = file_header(3, 4, 2, 9, len(data), head_crc, 3)
    put("backup_files", bytes([mode]) + v3 + bytes(4096 - len(v3)) + data)
    v2 = file_header(2, 4, 2, 9, len(data), head_crc, 1)
    put("backup_files", bytes([mode]) + v2 + bytes(4096 - len(v2)) + data)
    put("backup_files", bytes([mode]) + file_header(1, 4, 2, 9, len(data), head_crc, 1) + data)
put("backup_files", bytes([7]) + file_header(3, 4, 2, 9, len(data), head_crc, 3) + data)
put("backup_files", bytes([0]) + meta(2, 1, 4, 2, 9, 1 << 20, 0, 0, 3))
put("backup_files", bytes([0]) + meta(2, 2, 4, 2, 9, 1 << 20, 44, head_crc, 3))
put("backup_files", bytes([0]) + meta(1, 2, 4, 2, 9, 1 << 20, 44, head_crc, 1))

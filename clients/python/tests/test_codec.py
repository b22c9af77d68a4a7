"""The codec against the test vectors of docs/wire-format.md: every row of
its "Test vectors" and "Key hash" tables is parsed from the document itself,
so a vector added there without a case here fails."""
from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from shoalkv import errors, protocol as p
from shoalkv.hashing import hash_tag, key_hash, key_slot
from shoalkv.protocol import IncrementResult, Object, Page, ReadResult, RejectRules, Ttl

DOC = Path(__file__).resolve().parents[3] / "docs" / "wire-format.md"


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def vector_rows() -> List[Tuple[str, bytes]]:
    rows = []
    for line in section("Test vectors").splitlines():
        m = re.match(r"^\| (.+?) \| `([0-9a-f ]+)` \|$", line)
        if m:
            rows.append((m.group(1), bytes.fromhex(m.group(2))))
    return rows


def req(opcode: int, rid: int, body: bytes) -> bytes:
    return p.frame(opcode, rid, body)


# What our codec encodes for each request vector.
REQUESTS: Dict[str, Callable[[], bytes]] = {
    "PING request, id 1": lambda: req(p.PING, 1, b""),
    "READ request, id 2, table 7, key `k`": lambda: req(p.READ, 2, p.key_op(7, b"k")),
    "WRITE request, id 3, table 7, key `k`, value `v1`, only if version is 5":
        lambda: req(p.WRITE, 3, p.write_op(7, b"k", b"v1", RejectRules.if_version(5))),
    "INCREMENT request, id 4, table 1, key `n`, delta -2": lambda: req(p.INCREMENT, 4, p.increment_op(1, b"n", -2)),
    "MULTI_READ request, id 5, table 1, keys `a` and `bc`":
        lambda: req(p.MULTI_READ, 5, p.multi([p.read_item(1, b"a"), p.read_item(1, b"bc")])),
    "ENUMERATE request, id 6, table 3, cursor 0, max 100": lambda: req(p.ENUMERATE, 6, p.enumerate_op(3, 0, 100)),
    "CREATE_TABLE request, id 7, name `users`": lambda: req(p.CREATE_TABLE, 7, p.name_op(b"users")),
    "AUTH request, id 10, user `default`, password `s3cret`": lambda: req(p.AUTH, 10, p.auth_op(b"default", b"s3cret")),
    "WRITE_TTL request, id 12, table 7, key `k`, value `v`, ttl 60000 ms":
        lambda: req(p.WRITE_TTL, 12, p.write_ttl_op(7, b"k", b"v", 60000)),
    "READ_TTL request, id 13, table 7, key `k`": lambda: req(p.READ_TTL, 13, p.key_op(7, b"k")),
}

# What our codec decodes each response vector to: (opcode, request id, result).
RESPONSES: Dict[str, Tuple[int, int, object]] = {
    "READ response, id 2, version 9, value `hello`": (p.READ, 2, ReadResult(b"hello", 9)),
    "WRITE response WRONG_VERSION, id 3, current version 6": (p.WRITE, 3, errors.WrongVersion(6)),
    "MULTI_READ response, id 5: `a` version 3 is `x`; `bc` OBJECT_DOESNT_EXIST":
        (p.MULTI_READ, 5, [ReadResult(b"x", 3), errors.ObjectDoesntExist()]),
    "ENUMERATE response, id 6: `k`=`v` version 2, more from cursor 0x100":
        (p.ENUMERATE, 6, Page([Object(b"k", b"v", 2)], 0x100)),
    "CREATE_TABLE response, id 7, table 4": (p.CREATE_TABLE, 7, 4),
    "STATS response, id 8: `objects` = 3 (u64), `log_utilisation` = 0.5 (f64)":
        (p.STATS, 8, {"objects": 3, "log_utilisation": 0.5}),
    "READ response UNKNOWN_TABLE, id 9, table 42": (p.READ, 9, errors.UnknownTable(42)),
    "AUTH response, id 10": (p.AUTH, 10, None),
    "AUTH response AUTH_FAILED, id 10": (p.AUTH, 10, errors.AuthFailed()),
    "READ response NOT_AUTHENTICATED, id 11": (p.READ, 11, errors.NotAuthenticated()),
    "WRITE_TTL response, id 12, version 3": (p.WRITE_TTL, 12, 3),
    "READ_TTL response, id 13, version 3, expires at 1700000060000, 59000 ms left":
        (p.READ_TTL, 13, Ttl(3, 1700000060000, 59000)),
    "READ_TTL response, id 14, version 2, no expiry": (p.READ_TTL, 14, Ttl(2, None, None)),
    # The chunk lock statuses (docs/chunks.md, "Locks"): this client speaks
    # no chunk operations, but decodes every status of the wire format.
    "CHUNK_LOCK response, id 25: busy: retry after 20000 us": (27, 25, errors.LockBusy(20000)),
    "CHUNK_UNLOCK response, id 26: lock lost": (28, 26, errors.LockLost()),
    "CHUNK_LOCK response, id 29: lock table full: limit 100000": (27, 29, errors.LockTableFull(100000)),
    "CHUNK_LOCK response, id 30: owner limit: limit 10000": (27, 30, errors.LockOwnerLimit(10000)),
}


# The chunk and stream operations (docs/chunks.md, docs/streams.md), which
# this client does not speak:
# their vectors are checked as frames (opcode, direction, id, length).
FRAMES_ONLY = {
    "CREATE_CHUNK_TABLE request, id 15, name `graph`": (21, 15, False),
    "CHUNK_CREATE request, id 16, table 5, payloads `ab` and empty": (12, 16, False),
    "CHUNK_CREATE response, id 16, chunks 0x1000000000001 and 0x1000000000002": (12, 16, True),
    "CHUNK_GET request, id 17, table 5, chunk 0x1000000000001": (13, 17, False),
    "CHUNK_GET response, id 17: version 1 is `ab`": (13, 17, True),
    "CHUNK_PUT request, id 18, table 5, chunk 0x1000000000001, payload `xyz`": (14, 18, False),
    "CHUNK_REMOVE response, id 19: version 2; the second chunk does not exist": (15, 19, True),
    # The stream operations (docs/streams.md), not spoken by this client either.
    "CREATE_STREAM request, id 20, name `clicks`: 4 streamlets, the server's default logs, 1 MiB segments, "
    "4 per group, no timeout": (22, 20, False),
    "CREATE_STREAM response, id 20: table 6; 4 streamlets, 2 logs, 1 MiB segments, 4 per group, no timeout":
        (22, 20, True),
    "PRODUCE request, id 21: table 6, streamlet 1, producer 9, records `a` and `bc`": (23, 21, False),
    "PRODUCE response, id 21: first record at group 3, segment 0, position 7; 2 records": (23, 21, True),
    "CONSUME request, id 22: table 6, streamlet 1, from group 3, segment 0, position 7, at most 65536 bytes":
        (24, 22, False),
    "CONSUME response, id 22: next group 3, segment 0, position 9, end of group; records `a` and `bc`":
        (24, 22, True),
    "DESCRIBE_STREAM request, id 23: table 6, streamlet 1, groups from 0, at most 100": (25, 23, False),
    "DESCRIBE_STREAM response, id 23: the shape above; group 3 of log 1, 1 segment, 9 records, 20 bytes, closed":
        (25, 23, True),
    # The chunk locks (docs/chunks.md, "Locks"), not spoken by this client
    # either (their error statuses are decoded: RESPONSES above).
    "CHUNK_LOCK request, id 24: table 5, chunk 0x1000000000001, owner 9, exclusive, wait, lease 5000 ms":
        (27, 24, False),
    "CHUNK_LOCK response, id 24: token 0x1a2b3c4d5e6f7081, lease 5000 ms":
        (27, 24, True),
    "CHUNK_UNLOCK request, id 26: table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081":
        (28, 26, False),
    "CHUNK_RENEW request, id 27: table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081, lease 3000 ms":
        (29, 27, False),
    "CHUNK_RENEW response, id 27: lease 3000 ms":
        (29, 27, True),
    "CHUNK_PUT_LOCKED request, id 28: table 5, chunk 0x1000000000001, owner 9, token 0x1a2b3c4d5e6f7081, payload `xy`":
        (30, 28, False),
    "CHUNK_PUT_LOCKED response, id 28: version 4":
        (30, 28, True),
    # The consumer names (docs/streams.md, "Consumer names"), not spoken by
    # this client either.
    "CLAIM_GROUP request, id 31: table 6, streamlet 1, instance 5, lease 3000 ms, consumer `billing`":
        (31, 31, False),
    "CLAIM_GROUP response, id 31: granted: log 2, from group 3, segment 1, position 4; lease 3000 ms":
        (31, 31, True),
    "CLAIM_GROUP response, id 32: no group free now":
        (31, 32, True),
    "CONSUME_CLAIMED request, id 33: table 6, streamlet 1, instance 5, lease 3000 ms, group 3, segment 1, "
    "position 4, max 4096 bytes, consumer `billing`":
        (32, 33, False),
    "CONSUME_CLAIMED response, id 33: lease not held":
        (32, 33, True),
    "COMMIT_GROUP request, id 34: table 6, streamlet 1, instance 5, lease 3000 ms, group 3, segment 1, "
    "position 9, release, consumer `billing`":
        (33, 34, False),
    "COMMIT_GROUP response, id 34: done":
        (33, 34, True),
}


def test_the_document_has_vectors_and_each_is_covered() -> None:
    rows = vector_rows()
    assert len(rows) >= 20
    labels = {label for label, _ in rows}
    assert labels == set(REQUESTS) | set(RESPONSES) | set(FRAMES_ONLY), "a vector of docs/wire-format.md has no case here"


@pytest.mark.parametrize("label,wire", [r for r in vector_rows() if r[0] in FRAMES_ONLY])
def test_frame_only_vector_is_a_well_formed_frame(label: str, wire: bytes) -> None:
    opcode, rid, response = FRAMES_ONLY[label]
    assert wire[0] == 0x53 and wire[1] == 1, "magic and version"
    assert wire[2] == opcode
    assert wire[3] == (p.FLAG_RESPONSE if response else 0)
    assert int.from_bytes(wire[4:12], "little") == rid
    assert int.from_bytes(wire[12:16], "little") == len(wire) - p.HEADER_LEN


@pytest.mark.parametrize("label,expected", [r for r in vector_rows() if r[0] in REQUESTS])
def test_request_encodes_to_the_vector(label: str, expected: bytes) -> None:
    assert REQUESTS[label]().hex(" ") == expected.hex(" ")


@pytest.mark.parametrize("label,wire", [r for r in vector_rows() if r[0] in RESPONSES])
def test_response_vector_decodes(label: str, wire: bytes) -> None:
    opcode, rid, result = RESPONSES[label]
    h = p.check_frame(wire)
    assert h is not None and h.request_id == rid and h.opcode == opcode
    assert h.flags == p.FLAG_RESPONSE and h.body_len == len(wire) - p.HEADER_LEN
    got = p.decode_response(h.opcode, wire[p.HEADER_LEN:])
    assert got == result
    if isinstance(result, errors.StatusError):
        assert vars(got) == vars(result)  # the detail too (version, table)


def hash_rows() -> List[Tuple[int, bytes, int]]:
    out = []
    for line in section("Key hash").splitlines():
        m = re.match(r"^\| (2\^\d+|\d+)[^|]*\| ([^|]+?) \| `0x([0-9a-f]{16})` \|$", line)
        if not m:
            continue
        t = m.group(1)
        table = 2 ** int(t[2:]) if t.startswith("2^") else int(t)
        k = m.group(2).strip()
        if k == "(empty)":
            key = b""
        elif "bytes)" in k:
            key = bytes.fromhex(re.match(r"`([0-9a-f ]+)`", k).group(1))  # type: ignore[union-attr]
        else:
            key = re.match(r"`([^`]*)`", k).group(1).encode()  # type: ignore[union-attr]
        out.append((table, key, int(m.group(3), 16)))
    return out


def test_key_hash_vectors() -> None:
    rows = hash_rows()
    assert len(rows) == 6
    for table, key, h in rows:
        assert key_hash(table, key) == h, (table, key)


def test_slots_follow_redis_cluster() -> None:
    # CLUSTER KEYSLOT values of Redis's documentation and the doc's table.
    assert key_slot(b"foo") == 12182
    assert key_slot(b"{user1000}.following") == key_slot(b"{user1000}.followers") == 3443
    # Redis's hash-tag examples: an empty tag hashes the whole key; the
    # first "{" and the first "}" after it delimit the tag.
    assert hash_tag(b"foo{}{bar}") == b"foo{}{bar}"
    assert hash_tag(b"foo{{bar}}zap") == b"{bar"
    assert hash_tag(b"foo{bar}{zap}") == b"bar"
    assert key_slot(b"123456789") == 0x31C3 % 16384  # CRC16/XMODEM check value
    assert key_hash(65, b"foo") >> 50 == 12182


def test_decode_rejects_what_is_not_the_format() -> None:
    with pytest.raises(errors.ProtocolError, match="trailing"):
        p.decode_response(p.WRITE, bytes([0]) + struct.pack("<Q", 1) + b"x")
    with pytest.raises(errors.ProtocolError, match="truncated"):
        p.decode_response(p.READ, bytes([0]) + struct.pack("<QI", 1, 5) + b"abc")
    with pytest.raises(errors.ProtocolError, match="unknown status"):
        p.decode_response(p.READ, bytes([99]))
    with pytest.raises(errors.ProtocolError, match="count"):
        p.decode_response(p.MULTI_WRITE, bytes([0]) + struct.pack("<I", 1000))
    with pytest.raises(errors.ProtocolError, match="not a Shoal frame"):
        p.check_frame(b"\x00" * 16)
    with pytest.raises(errors.ProtocolError, match="version"):
        p.check_frame(bytes([0x53, 2]) + bytes(14))
    with pytest.raises(errors.ProtocolError, match="limit"):
        p.check_frame(p.frame(p.PING, 1, b"x" * 100), max_body=10)
    assert p.check_frame(p.frame(p.PING, 1, b"abc")[:18]) is None


def test_statuses_decode_with_their_details() -> None:
    too = p.decode_response(p.WRITE, bytes([3]) + struct.pack("<II", 2000000, 1048576))
    assert isinstance(too, errors.ValueTooLarge) and (too.length, too.limit) == (2000000, 1048576)
    assert isinstance(too, errors.LimitError)
    retry = p.decode_response(p.READ, bytes([12]) + struct.pack("<I", 500))
    assert isinstance(retry, errors.Retry) and retry.delay_us == 500 and isinstance(retry, errors.RoutingError)
    bad = p.decode_response(p.READ, bytes([16]) + struct.pack("<H", 3) + b"why")
    assert isinstance(bad, errors.MalformedRequest) and bad.reason == "why"
    exists = p.decode_response(p.WRITE, bytes([5]) + struct.pack("<Q", 7))
    assert isinstance(exists, errors.ObjectExists) and exists.version == 7
    assert isinstance(exists, errors.RejectedError)
    assert p.decode_response(p.INCREMENT, bytes([0]) + struct.pack("<qQ", -5, 2)) == IncrementResult(-5, 2)
    assert p.decode_response(p.REMOVE, bytes([0]) + struct.pack("<Q", 0)) is None
    assert p.decode_response(p.MULTI_REMOVE, bytes([0]) + struct.pack("<I", 2) + bytes([0]) + bytes(8)
                             + bytes([6]) + struct.pack("<Q", 4)) == [None, errors.WrongVersion(4)]
    busy = p.decode_response(27, bytes([20]) + struct.pack("<I", 20000))
    assert isinstance(busy, errors.LockBusy) and busy.delay_us == 20000 and isinstance(busy, errors.LockError)
    full = p.decode_response(27, bytes([23]) + struct.pack("<I", 5))
    assert isinstance(full, errors.LockTableFull) and full.limit == 5
    capped = p.decode_response(27, bytes([24]) + struct.pack("<I", 2))
    assert isinstance(capped, errors.LockOwnerLimit) and capped.limit == 2 and "LOCK_OWNER_LIMIT" in str(capped)
    assert p.decode_response(28, bytes([21])) == errors.LockNotHeld()
    assert p.decode_response(30, bytes([22])) == errors.LockLost()
    with pytest.raises(errors.ProtocolError, match="truncated"):
        p.decode_response(27, bytes([24, 1, 0]))
    for code, cls in errors.BY_STATUS.items():
        assert cls.status == code
    assert set(errors.BY_STATUS) == set(range(1, 15)) | set(range(16, 25)), "every status of the wire format"


def test_reject_rule_flags() -> None:
    assert RejectRules().flags() == 0
    assert RejectRules.if_version(5) == RejectRules(doesnt_exist=True, version_ne=True, given=5)
    assert RejectRules.if_version(5).flags() == 0b1001
    assert RejectRules.if_absent().flags() == 0b0010
    assert RejectRules.if_newer_than(3).flags() == 0b0100
    with pytest.raises(ValueError):
        p.write_ttl_op(1, b"k", b"v", 0)

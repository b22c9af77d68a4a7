"""The codec of Shoal's native wire format, version 1 (``docs/wire-format.md``),
shared by the sync and asyncio clients. Pure functions over ``bytes``: request
bodies are encoded without a request id (:func:`frame` adds the 16-byte
header when the request is sent, so a retried request gets a new id), and
response bodies are decoded by opcode into result values, or into a
:class:`~shoalkv.errors.StatusError` instance for a status other than OK.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import errors
from .errors import ProtocolError, StatusError

MAGIC = 0x53
VERSION = 1
FLAG_RESPONSE = 0x01
HEADER_LEN = 16
#: The receiver's default limit on a frame body (``DEFAULT_MAX_BODY_BYTES``).
DEFAULT_MAX_BODY = 16 << 20
MAX_KEY_LEN_FIELD = 0xFFFFFFFF

PING, READ, WRITE, REMOVE, INCREMENT = 1, 2, 3, 4, 5
MULTI_READ, MULTI_WRITE, MULTI_REMOVE, ENUMERATE = 6, 7, 8, 9
WRITE_TTL, READ_TTL = 10, 11
CREATE_TABLE, DROP_TABLE, GET_TABLE_ID, STATS, AUTH = 16, 17, 18, 19, 20

OPCODE_NAMES = {
    PING: "PING", READ: "READ", WRITE: "WRITE", REMOVE: "REMOVE", INCREMENT: "INCREMENT",
    MULTI_READ: "MULTI_READ", MULTI_WRITE: "MULTI_WRITE", MULTI_REMOVE: "MULTI_REMOVE",
    ENUMERATE: "ENUMERATE", WRITE_TTL: "WRITE_TTL", READ_TTL: "READ_TTL",
    CREATE_TABLE: "CREATE_TABLE", DROP_TABLE: "DROP_TABLE", GET_TABLE_ID: "GET_TABLE_ID",
    STATS: "STATS", AUTH: "AUTH",
}

#: Requests that change something: one whose connection breaks while it is in
#: flight may have been applied, so the client does not resend it.
MUTATING = frozenset({WRITE, WRITE_TTL, REMOVE, INCREMENT, MULTI_WRITE, MULTI_REMOVE, CREATE_TABLE, DROP_TABLE})

_HEADER = struct.Struct("<BBBBQI")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U64U32 = struct.Struct("<QI")
_QQ = struct.Struct("<QQ")
_QQQ = struct.Struct("<QQQ")
_QII = struct.Struct("<QII")
_QBQI = struct.Struct("<QBQI")
_QBQII = struct.Struct("<QBQII")
_QBQQII = struct.Struct("<QBQQII")
_QBQqI = struct.Struct("<QBQqI")
_QQI = struct.Struct("<QQI")
_BQI = struct.Struct("<BQI")
_qQ = struct.Struct("<qQ")
_HH = struct.Struct("<HH")
_II = struct.Struct("<II")

Bytes = Union[bytes, bytearray, memoryview, str]


def as_bytes(b: Bytes) -> bytes:
    """Keys, values and names may be given as ``str`` (sent as UTF-8)."""
    if isinstance(b, str):
        return b.encode()
    return bytes(b)


# -- result types -------------------------------------------------------------


class RejectRules(NamedTuple):
    """Conditions that refuse an operation (``docs/wire-format.md``, "Reject
    rules"), checked in this order: ``doesnt_exist`` (-> ObjectDoesntExist),
    ``exists`` (-> ObjectExists), ``version_le`` and ``version_ne`` against
    ``given`` (-> WrongVersion)."""

    doesnt_exist: bool = False
    exists: bool = False
    version_le: bool = False
    version_ne: bool = False
    given: int = 0

    @classmethod
    def if_version(cls, version: int) -> "RejectRules":
        """Compare-and-swap: only if the object exists at exactly ``version``."""
        return cls(doesnt_exist=True, version_ne=True, given=version)

    @classmethod
    def if_absent(cls) -> "RejectRules":
        """Only if the object does not exist (create)."""
        return cls(exists=True)

    @classmethod
    def if_present(cls) -> "RejectRules":
        """Only if the object exists (update)."""
        return cls(doesnt_exist=True)

    @classmethod
    def if_newer_than(cls, version: int) -> "RejectRules":
        """Only if the object's version is above ``version``."""
        return cls(version_le=True, given=version)

    def flags(self) -> int:
        return (self.doesnt_exist and 1 or 0) | (self.exists and 2 or 0) | (self.version_le and 4 or 0) | (
            self.version_ne and 8 or 0
        )


NO_RULES = RejectRules()


class ReadResult(NamedTuple):
    value: bytes
    version: int


class IncrementResult(NamedTuple):
    value: int
    version: int


class Object(NamedTuple):
    key: bytes
    value: bytes
    version: int


class Page(NamedTuple):
    """One page of an enumeration: ``next_cursor`` is ``None`` when the table is done."""

    objects: List[Object]
    next_cursor: Optional[int]


class Ttl(NamedTuple):
    """An object's version and expiry: ``expires_at_ms`` (ms since the Unix
    epoch) and ``remaining_ms`` are ``None`` for an object that never expires."""

    version: int
    expires_at_ms: Optional[int]
    remaining_ms: Optional[int]


class WriteItem(NamedTuple):
    table: int
    key: Bytes
    value: Bytes
    rules: RejectRules = NO_RULES


class RemoveItem(NamedTuple):
    table: int
    key: Bytes
    rules: RejectRules = NO_RULES


# -- frames -------------------------------------------------------------------


def frame(opcode: int, request_id: int, body: bytes) -> bytes:
    """A request frame: header and body."""
    return _HEADER.pack(MAGIC, VERSION, opcode, 0, request_id, len(body)) + body


def response_frame(opcode: int, request_id: int, body: bytes) -> bytes:
    """A response frame (for tests and fakes)."""
    return _HEADER.pack(MAGIC, VERSION, opcode, FLAG_RESPONSE, request_id, len(body)) + body


class Header(NamedTuple):
    opcode: int
    flags: int
    request_id: int
    body_len: int


def check_frame(buf: Union[bytes, bytearray, memoryview], start: int = 0,
                max_body: int = DEFAULT_MAX_BODY) -> Optional[Header]:
    """The header of the frame at ``buf[start:]`` if the whole frame is there,
    ``None`` if more bytes are needed; :class:`ProtocolError` if the bytes
    are not a Shoal frame (wrong magic or version, body over ``max_body``)."""
    have = len(buf) - start
    if have < 1:
        return None
    if buf[start] != MAGIC:
        raise ProtocolError(f"not a Shoal frame: first byte {buf[start]:#04x}")
    if have < HEADER_LEN:
        return None
    _, version, opcode, flags, rid, length = _HEADER.unpack_from(buf, start)
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version}")
    if length > max_body:
        raise ProtocolError(f"frame body of {length} bytes over the limit of {max_body}")
    if have < HEADER_LEN + length:
        return None
    return Header(opcode, flags, rid, length)


# -- request bodies -----------------------------------------------------------


def _rules(r: RejectRules) -> Tuple[int, int]:
    return r.flags(), r.given


def key_op(table: int, key: bytes, rules: RejectRules = NO_RULES) -> bytes:
    f, g = _rules(rules)
    return _QBQI.pack(table, f, g, len(key)) + key


def write_op(table: int, key: bytes, value: bytes, rules: RejectRules = NO_RULES) -> bytes:
    f, g = _rules(rules)
    return _QBQII.pack(table, f, g, len(key), len(value)) + key + value


def write_ttl_op(table: int, key: bytes, value: bytes, ttl_ms: int, rules: RejectRules = NO_RULES) -> bytes:
    if ttl_ms < 1:
        raise ValueError("a time to live is at least 1 ms")
    f, g = _rules(rules)
    return _QBQQII.pack(table, f, g, min(ttl_ms, 2**64 - 1), len(key), len(value)) + key + value


def increment_op(table: int, key: bytes, delta: int, rules: RejectRules = NO_RULES) -> bytes:
    f, g = _rules(rules)
    return _QBQqI.pack(table, f, g, delta, len(key)) + key


def read_item(table: int, key: bytes) -> bytes:
    return _U64U32.pack(table, len(key)) + key


def multi(items: Iterable[bytes]) -> bytes:
    """A multi-op body from its encoded items."""
    items = list(items)
    return _U32.pack(len(items)) + b"".join(items)


def enumerate_op(table: int, cursor: int, max_count: int) -> bytes:
    return _QQI.pack(table, cursor, max_count)


def name_op(name: bytes) -> bytes:
    if not 0 < len(name) <= 0xFFFF:
        raise ValueError("a table name is 1 to 65535 bytes")
    return _U16.pack(len(name)) + name


def auth_op(user: bytes, password: bytes) -> bytes:
    if len(user) > 0xFFFF or len(password) > 0xFFFF:
        raise ValueError("user and password are at most 65535 bytes each")
    return _HH.pack(len(user), len(password)) + user + password


# -- response bodies ----------------------------------------------------------


def _need(body: Any, pos: int, n: int) -> None:
    if pos + n > len(body):
        raise ProtocolError(f"truncated response: {n} bytes needed at offset {pos}, {len(body) - pos} left")


def decode_status(body: Any, pos: int) -> Tuple[Optional[StatusError], int]:
    """The status at ``body[pos]`` and its detail: ``(None, next)`` for OK,
    else ``(exception, next)``."""
    _need(body, pos, 1)
    code = body[pos]
    pos += 1
    if code == 0:
        return None, pos
    if code in (1, 5, 6):
        _need(body, pos, 8)
        (v,) = _U64.unpack_from(body, pos)
        return errors.BY_STATUS[code](v), pos + 8
    if code in (2, 3, 18):
        _need(body, pos, 8)
        a, b = _II.unpack_from(body, pos)
        return errors.BY_STATUS[code](a, b), pos + 8  # type: ignore[call-arg]
    if code in (12, 20, 23, 24):  # RETRY, LOCK_BUSY: a delay; LOCK_TABLE_FULL, LOCK_OWNER_LIMIT: a limit
        _need(body, pos, 4)
        (d,) = _U32.unpack_from(body, pos)
        return errors.BY_STATUS[code](d), pos + 4  # type: ignore[call-arg]
    if code == 16:
        _need(body, pos, 2)
        (n,) = _U16.unpack_from(body, pos)
        _need(body, pos + 2, n)
        try:
            reason = bytes(body[pos + 2:pos + 2 + n]).decode()
        except UnicodeDecodeError as e:
            raise ProtocolError(f"MALFORMED_REQUEST reason is not UTF-8: {e}") from None
        return errors.MalformedRequest(reason), pos + 2 + n
    cls = errors.BY_STATUS.get(code)
    if cls is None:
        raise ProtocolError(f"unknown status {code}")
    return cls(), pos


def _end(body: Any, pos: int) -> None:
    if pos != len(body):
        raise ProtocolError(f"{len(body) - pos} trailing bytes after the response")


def _read_result(body: Any, pos: int) -> Tuple[ReadResult, int]:
    _need(body, pos, 12)
    version, n = _U64U32.unpack_from(body, pos)
    pos += 12
    _need(body, pos, n)
    return ReadResult(bytes(body[pos:pos + n]), version), pos + n


def _count(body: Any, pos: int, min_item: int) -> Tuple[int, int]:
    _need(body, pos, 4)
    (n,) = _U32.unpack_from(body, pos)
    if n * min_item > len(body) - pos - 4:
        raise ProtocolError(f"count {n} larger than the response can hold")
    return n, pos + 4


def _items(body: Any, pos: int, ok: Any) -> List[Any]:
    n, pos = _count(body, pos, 1)
    out: List[Any] = []
    for _ in range(n):
        st, pos = decode_status(body, pos)
        if st is not None:
            out.append(st)
        else:
            v, pos = ok(body, pos)
            out.append(v)
    _end(body, pos)
    return out


def _version(body: Any, pos: int) -> Tuple[int, int]:
    _need(body, pos, 8)
    return _U64.unpack_from(body, pos)[0], pos + 8


def _removed(body: Any, pos: int) -> Tuple[Optional[int], int]:
    v, pos = _version(body, pos)
    return (v or None), pos


def _ok_read(body: Any, pos: int) -> ReadResult:
    r, pos = _read_result(body, pos)
    _end(body, pos)
    return r


def _ok_version(body: Any, pos: int) -> int:
    v, pos = _version(body, pos)
    _end(body, pos)
    return v


def _ok_removed(body: Any, pos: int) -> Optional[int]:
    return _ok_version(body, pos) or None


def _ok_empty(body: Any, pos: int) -> None:
    _end(body, pos)


def _ok_increment(body: Any, pos: int) -> IncrementResult:
    _need(body, pos, 16)
    value, version = _qQ.unpack_from(body, pos)
    _end(body, pos + 16)
    return IncrementResult(value, version)


def _ok_ttl(body: Any, pos: int) -> Ttl:
    _need(body, pos, 24)
    version, at, left = _QQQ.unpack_from(body, pos)
    _end(body, pos + 24)
    return Ttl(version, at or None, left if at else None)


def _ok_enumerate(body: Any, pos: int) -> Page:
    _need(body, pos, 13)
    flags, cursor, n = _BQI.unpack_from(body, pos)
    pos += 13
    if flags & ~1:
        raise ProtocolError(f"unknown enumerate flags {flags:#x}")
    if n * 16 > len(body) - pos:
        raise ProtocolError(f"count {n} larger than the response can hold")
    objects = []
    for _ in range(n):
        _need(body, pos, 16)
        version, kl, vl = _QII.unpack_from(body, pos)
        pos += 16
        _need(body, pos, kl + vl)
        objects.append(Object(bytes(body[pos:pos + kl]), bytes(body[pos + kl:pos + kl + vl]), version))
        pos += kl + vl
    _end(body, pos)
    return Page(objects, cursor if flags & 1 else None)


def _ok_stats(body: Any, pos: int) -> Dict[str, Union[int, float]]:
    _need(body, pos, 2)
    (n,) = _U16.unpack_from(body, pos)
    pos += 2
    out: Dict[str, Union[int, float]] = {}
    for _ in range(n):
        _need(body, pos, 1)
        ln = body[pos]
        _need(body, pos + 1, ln + 9)
        name = bytes(body[pos + 1:pos + 1 + ln]).decode()
        kind = body[pos + 1 + ln]
        raw = bytes(body[pos + 2 + ln:pos + 10 + ln])
        if kind == 0:
            out[name] = _U64.unpack(raw)[0]
        elif kind == 1:
            out[name] = struct.unpack("<d", raw)[0]
        else:
            raise ProtocolError(f"unknown statistic kind {kind}")
        pos += 10 + ln
    _end(body, pos)
    return out


_DECODERS = {
    PING: _ok_empty,
    READ: _ok_read,
    WRITE: _ok_version,
    WRITE_TTL: _ok_version,
    REMOVE: _ok_removed,
    INCREMENT: _ok_increment,
    MULTI_READ: lambda b, p: _items(b, p, _read_result),
    MULTI_WRITE: lambda b, p: _items(b, p, _version),
    MULTI_REMOVE: lambda b, p: _items(b, p, _removed),
    ENUMERATE: _ok_enumerate,
    READ_TTL: _ok_ttl,
    CREATE_TABLE: _ok_version,
    GET_TABLE_ID: _ok_version,
    DROP_TABLE: _ok_empty,
    STATS: _ok_stats,
    AUTH: _ok_empty,
}


def decode_response(opcode: int, body: Union[bytes, bytearray, memoryview]) -> Any:
    """The result of an OK response to ``opcode``, or the
    :class:`~shoalkv.errors.StatusError` the server answered (returned, not
    raised). Multi-op results are lists holding a result or an exception
    per item. :class:`ProtocolError` if the body does not parse."""
    if opcode == READ and len(body) >= 13 and body[0] == 0:  # the common case, inline
        version, n = _U64U32.unpack_from(body, 1)
        if 13 + n == len(body):
            return ReadResult(bytes(body[13:]), version)
    status, pos = decode_status(body, 0)
    if status is not None:
        _end(body, pos)
        return status
    dec = _DECODERS.get(opcode)
    if dec is None:
        raise ProtocolError(f"response with unknown opcode {opcode}")
    return dec(body, pos)

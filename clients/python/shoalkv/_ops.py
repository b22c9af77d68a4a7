"""Request builders shared by every client and pipeline: each turns an
operation's arguments into a routed :class:`~shoalkv.routing.Req` (or, for a
multi-op, routed items)."""
from __future__ import annotations

from typing import Iterable, List, Optional, Tuple, Union

from . import protocol as p
from .hashing import key_hash
from .protocol import NO_RULES, Bytes, RejectRules, RemoveItem, WriteItem, as_bytes
from .routing import MultiItem, Req


def ttl_ms(ttl: float) -> int:
    """A time to live in seconds as whole milliseconds, rounded up, at least 1."""
    if ttl <= 0:
        raise ValueError("a time to live must be positive")
    ms = int(ttl * 1000)
    return max(1, ms + (1 if ms < ttl * 1000 else 0))


def ping() -> Req:
    return Req(p.PING, b"", None)


def stats() -> Req:
    return Req(p.STATS, b"", None)


def read(table: int, key: Bytes, rules: RejectRules = NO_RULES) -> Req:
    k = as_bytes(key)
    return Req(p.READ, p.key_op(table, k, rules), (table, key_hash(table, k)))


def read_ttl(table: int, key: Bytes, rules: RejectRules = NO_RULES) -> Req:
    k = as_bytes(key)
    return Req(p.READ_TTL, p.key_op(table, k, rules), (table, key_hash(table, k)))


def write(table: int, key: Bytes, value: Bytes, rules: RejectRules = NO_RULES, ttl: Optional[float] = None) -> Req:
    k, v = as_bytes(key), as_bytes(value)
    if ttl is None:
        return Req(p.WRITE, p.write_op(table, k, v, rules), (table, key_hash(table, k)))
    return Req(p.WRITE_TTL, p.write_ttl_op(table, k, v, ttl_ms(ttl), rules), (table, key_hash(table, k)))


def remove(table: int, key: Bytes, rules: RejectRules = NO_RULES) -> Req:
    k = as_bytes(key)
    return Req(p.REMOVE, p.key_op(table, k, rules), (table, key_hash(table, k)))


def increment(table: int, key: Bytes, delta: int = 1, rules: RejectRules = NO_RULES) -> Req:
    if not -(2**63) <= delta < 2**63:
        raise ValueError("delta must fit a signed 64-bit integer")
    k = as_bytes(key)
    return Req(p.INCREMENT, p.increment_op(table, k, delta, rules), (table, key_hash(table, k)))


def enumerate_page(table: int, cursor: int = 0, max_count: int = 0) -> Req:
    # The cursor is a key-hash position: the tablet holding it answers.
    return Req(p.ENUMERATE, p.enumerate_op(table, cursor, max_count), (table, cursor))


def create_table(name: Bytes) -> Req:
    return Req(p.CREATE_TABLE, p.name_op(as_bytes(name)), None)


def drop_table(name: Bytes) -> Req:
    return Req(p.DROP_TABLE, p.name_op(as_bytes(name)), None)


def table_id(name: Bytes) -> Req:
    return Req(p.GET_TABLE_ID, p.name_op(as_bytes(name)), None)


def multi_read_items(items: Iterable[Tuple[int, Bytes]]) -> List[MultiItem]:
    out = []
    for table, key in items:
        k = as_bytes(key)
        out.append(MultiItem(table, key_hash(table, k), p.read_item(table, k)))
    return out


def multi_write_items(items: Iterable[Union[WriteItem, Tuple[int, Bytes, Bytes]]]) -> List[MultiItem]:
    out = []
    for it in items:
        w = WriteItem(*it)
        k = as_bytes(w.key)
        out.append(MultiItem(w.table, key_hash(w.table, k), p.write_op(w.table, k, as_bytes(w.value), w.rules)))
    return out


def multi_remove_items(items: Iterable[Union[RemoveItem, Tuple[int, Bytes]]]) -> List[MultiItem]:
    out = []
    for it in items:
        r = RemoveItem(*it)
        k = as_bytes(r.key)
        out.append(MultiItem(r.table, key_hash(r.table, k), p.key_op(r.table, k, r.rules)))
    return out

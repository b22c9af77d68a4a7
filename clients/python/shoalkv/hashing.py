"""The key hash that routes a key to its tablet (``docs/wire-format.md``,
"Key hash"): XXH3-64, seed 0, of the table id as 8 little-endian bytes
followed by the key. A *slot-hashed* table (bit 6 of its id set: the Redis
databases of a cluster, ``docs/redis-cluster.md``) puts the key's Redis
Cluster slot in the top 14 bits, above the top 50 bits of that XXH3."""
from __future__ import annotations

import binascii
import struct

import xxhash

#: The flag bit of a slot-hashed table's id.
SLOT_HASHED = 1 << 6
SLOTS = 16384
_SLOT_SHIFT = 50
_U64 = struct.Struct("<Q")
_xxh3 = xxhash.xxh3_64_intdigest


def is_slot_hashed(table: int) -> bool:
    return bool(table & SLOT_HASHED)


def hash_tag(key: bytes) -> bytes:
    """The part of ``key`` Redis Cluster hashes: the bytes between the first
    ``{`` and the first ``}`` after it, if not empty; else the whole key."""
    open_ = key.find(b"{")
    if open_ >= 0:
        close = key.find(b"}", open_ + 1)
        if close > open_ + 1:
            return key[open_ + 1:close]
    return key


def key_slot(key: bytes) -> int:
    """``CLUSTER KEYSLOT``: CRC16/XMODEM of the hash tag, modulo 16384
    (``binascii.crc_hqx`` with initial value 0 is CRC16/XMODEM)."""
    return binascii.crc_hqx(hash_tag(key), 0) % SLOTS


def key_hash(table: int, key: bytes) -> int:
    """The key hash of ``key`` in ``table``, as a server computes it."""
    h = _xxh3(_U64.pack(table) + key)
    if table & SLOT_HASHED:
        return (key_slot(key) << _SLOT_SHIFT) | (h >> (64 - _SLOT_SHIFT))
    return h

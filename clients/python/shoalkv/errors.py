"""Typed exceptions: one class per status of the wire format, grouped in one
base class per status family, plus the client's own failures (connection,
cluster, protocol, retries spent).

Every server status is a :class:`StatusError` with ``.status`` (the code of
``docs/wire-format.md``) and its detail as attributes. Multi-op results hold
these exceptions as values (one per failed item) rather than raising them.
"""
from __future__ import annotations

from typing import Dict, Optional, Type


class ShoalError(Exception):
    """Base of every exception this package raises."""


class ShoalConnectionError(ShoalError, ConnectionError):
    """A server could not be reached or the connection broke.

    ``sent`` tells whether the request had been written: if it had, a write
    may or may not have been applied.
    """

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class ClusterError(ShoalError):
    """The coordinator could not be reached or gave an unexpected answer."""


class ProtocolError(ShoalError):
    """A response that does not follow the wire format (a client or server bug)."""


class RequestTooLarge(ShoalError):
    """A request over the client's frame limit; nothing was sent."""


class StatusError(ShoalError):
    """A status other than OK answered by a server."""

    status: int = -1
    name: str = "?"

    def __init__(self, message: Optional[str] = None) -> None:
        super().__init__(message or self.name)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.args == self.args

    def __hash__(self) -> int:
        return hash((type(self), self.args))


# -- families ---------------------------------------------------------------


class TableError(StatusError):
    """Family: the table named by id or by name does not exist."""


class LimitError(StatusError):
    """Family: a key, value or frame over the server's limit."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"{self.name}: {length} bytes, limit {limit}")
        self.length = length
        self.limit = limit


class RejectedError(StatusError):
    """Family: the object's state refused the operation (missing object,
    reject rules). Nothing changed."""


class CounterError(StatusError):
    """Family: an INCREMENT that cannot be applied."""


class CapacityError(StatusError):
    """Family: the server is out of memory for live data."""


class RoutingError(StatusError):
    """Family: the server cannot serve this key now (another owner, a
    tablet being recovered). The client retries these itself; they reach the
    caller only in multi-op results once retries are spent."""


class AuthError(StatusError):
    """Family: authentication is needed or failed."""


class RequestError(StatusError):
    """Family: the server could not parse or does not know the request."""


class LockError(StatusError):
    """Family: a chunk lock operation was refused (``docs/chunks.md``,
    "Locks"). Only the chunk lock opcodes answer these."""


# -- one class per status ----------------------------------------------------


class UnknownTable(TableError):
    status, name = 1, "UNKNOWN_TABLE"

    def __init__(self, table: int) -> None:
        super().__init__(f"UNKNOWN_TABLE: no table {table}")
        self.table = table


class UnknownTableName(TableError):
    status, name = 10, "UNKNOWN_TABLE_NAME"


class KeyTooLarge(LimitError):
    status, name = 2, "KEY_TOO_LARGE"


class ValueTooLarge(LimitError):
    status, name = 3, "VALUE_TOO_LARGE"


class FrameTooLarge(LimitError):
    status, name = 18, "FRAME_TOO_LARGE"


class ObjectDoesntExist(RejectedError, KeyError):
    status, name = 4, "OBJECT_DOESNT_EXIST"

    def __str__(self) -> str:  # KeyError would quote the message
        return self.name


class ObjectExists(RejectedError):
    status, name = 5, "OBJECT_EXISTS"

    def __init__(self, version: int) -> None:
        super().__init__(f"OBJECT_EXISTS: current version {version}")
        self.version = version


class WrongVersion(RejectedError):
    status, name = 6, "WRONG_VERSION"

    def __init__(self, version: int) -> None:
        super().__init__(f"WRONG_VERSION: current version {version}")
        self.version = version


class NotAnInteger(CounterError):
    status, name = 7, "NOT_AN_INTEGER"


class Overflow(CounterError):
    status, name = 8, "OVERFLOW"


class OutOfMemory(CapacityError):
    status, name = 9, "OUT_OF_MEMORY"


class UnknownTablet(RoutingError):
    status, name = 11, "UNKNOWN_TABLET"


class Retry(RoutingError):
    status, name = 12, "RETRY"

    def __init__(self, delay_us: int) -> None:
        super().__init__(f"RETRY after {delay_us} us")
        self.delay_us = delay_us


class NotAuthenticated(AuthError):
    status, name = 13, "NOT_AUTHENTICATED"


class AuthFailed(AuthError):
    status, name = 14, "AUTH_FAILED"


class MalformedRequest(RequestError):
    status, name = 16, "MALFORMED_REQUEST"

    def __init__(self, reason: str) -> None:
        super().__init__(f"MALFORMED_REQUEST: {reason}")
        self.reason = reason


class UnknownOpcode(RequestError):
    status, name = 17, "UNKNOWN_OPCODE"


class UnsupportedVersion(RequestError):
    status, name = 19, "UNSUPPORTED_VERSION"


class LockBusy(LockError):
    """The lock is held in a conflicting mode, others are queued first, or
    the chunk was taken over in a crash recovery less than the longest lease
    ago: try again after ``delay_us``."""

    status, name = 20, "LOCK_BUSY"

    def __init__(self, delay_us: int) -> None:
        super().__init__(f"LOCK_BUSY: try again after {delay_us} us")
        self.delay_us = delay_us


class LockNotHeld(LockError):
    """No server granted this token (a wrong token, or a lock never taken)."""

    status, name = 21, "LOCK_NOT_HELD"


class LockLost(LockError):
    """The token was granted but its lock is not held any more: its lease ran
    out, it was unlocked, its chunk went (removed, evicted, table dropped),
    or a crash recovery released it. The token must not be used again."""

    status, name = 22, "LOCK_LOST"


class LockTableFull(LockError):
    """The server holds its maximum of locks and queued requests
    (``--chunk-lock-limit``)."""

    status, name = 23, "LOCK_TABLE_FULL"

    def __init__(self, limit: int) -> None:
        super().__init__(f"LOCK_TABLE_FULL: the server holds its maximum of {limit} locks and waiters")
        self.limit = limit


class LockOwnerLimit(LockError):
    """This lock owner holds its maximum of locks and queued requests on the
    server (``--chunk-lock-owner-limit``): unlock some first."""

    status, name = 24, "LOCK_OWNER_LIMIT"

    def __init__(self, limit: int) -> None:
        super().__init__(f"LOCK_OWNER_LIMIT: this owner holds its maximum of {limit} locks and waiters")
        self.limit = limit


class UnavailableError(ShoalError):
    """Retries spent: the key's tablet kept answering UNKNOWN_TABLET or RETRY,
    or its server stayed unreachable. ``last`` is the last failure seen."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"unavailable after {attempts} attempts; last: {last}")
        self.attempts = attempts
        self.last = last


#: Status code -> exception class.
BY_STATUS: Dict[int, Type[StatusError]] = {
    c.status: c
    for c in (
        UnknownTable, KeyTooLarge, ValueTooLarge, ObjectDoesntExist, ObjectExists, WrongVersion,
        NotAnInteger, Overflow, OutOfMemory, UnknownTableName, UnknownTablet, Retry,
        NotAuthenticated, AuthFailed, MalformedRequest, UnknownOpcode, FrameTooLarge, UnsupportedVersion,
        LockBusy, LockNotHeld, LockLost, LockTableFull, LockOwnerLimit,
    )
}

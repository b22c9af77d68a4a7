"""Routing and retries, shared by the sync and asyncio clients.

* :class:`TabletMap`: which server owns which key-hash range of which table,
  built from the coordinator's cluster map (or one catch-all entry for a
  single server).
* The coordinator's control protocol (``docs/coordinator.md``): a 4-byte
  little-endian length and a JSON body each way; the client only sends
  ``get_map``, which needs no cluster handshake.
* The retry policy as generators (:func:`run_requests`, :func:`run_multi`):
  they yield :class:`Send`, :class:`Refresh` and :class:`Sleep` actions that
  the sync client performs with blocking sockets and the asyncio client with
  ``await``, so both clients route, refresh and retry the same way.

The policy is the Rust client's (``crates/shoal-client/src/ops.rs``): a key
is sent to the master of its tablet; ``UNKNOWN_TABLET`` (and ``UNKNOWN_TABLE``
for a table the client's map names: a server behind the coordinator) refresh
the map and resend; ``RETRY`` waits its delay (at most 100 ms) and resends; a
server that cannot be reached is skipped after a refresh (the request was
never sent); a connection that breaks with a request in flight resends reads
only, since a write's outcome is then unknown.
"""
from __future__ import annotations

import bisect
import json
import struct
from typing import Any, Callable, Dict, Generator, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import protocol as p
from .errors import ClusterError, ProtocolError, Retry, ShoalConnectionError, StatusError, UnavailableError
from .errors import UnknownTable, UnknownTablet

Address = Tuple[str, int]

#: Attempts of one request before it is reported unavailable (with delays
#: of up to MAX_RETRY_DELAY, about 20 s: a tablet being recovered).
MAX_ATTEMPTS = 200
MAX_RETRY_DELAY = 0.1
UNREACHABLE_DELAY = 0.05
#: Largest body of a control frame either side accepts.
MAX_CONTROL_FRAME = 16 << 20


def parse_address(text: str) -> Address:
    """``"host:port"`` or ``"[v6]:port"`` as a (host, port) pair."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {text!r}")
    return host.strip("[]"), int(port)


class TabletMap:
    """The client's copy of the tablet map. ``admin`` is where table
    management, statistics and pings go (the first server up)."""

    def __init__(self, tablets: Sequence[Tuple[int, int, int, Address]], admin: Address, version: int = 0,
                 catch_all: Optional[Address] = None, tables: Optional[Dict[str, int]] = None) -> None:
        self.version = version
        self.admin = admin
        self.catch_all = catch_all
        self.tables = dict(tables or {})
        by_table: Dict[int, List[Tuple[int, int, Address]]] = {}
        for table, start, end, addr in tablets:
            by_table.setdefault(table, []).append((start, end, addr))
        self._starts: Dict[int, List[int]] = {}
        self._ranges: Dict[int, List[Tuple[int, int, Address]]] = {}
        for table, ranges in by_table.items():
            ranges.sort()
            self._ranges[table] = ranges
            self._starts[table] = [r[0] for r in ranges]

    @classmethod
    def single(cls, addr: Address) -> "TabletMap":
        """Every key of every table on one server."""
        return cls([], addr, catch_all=addr)

    @classmethod
    def from_cluster_map(cls, m: Dict[str, Any]) -> "TabletMap":
        """From the coordinator's ``ClusterMap`` (JSON). :class:`ClusterError`
        if no server is up."""
        servers = {s["id"]: s for s in m.get("servers", [])}
        up = sorted(s["id"] for s in servers.values() if s.get("state") == "up")
        if not up:
            raise ClusterError("the cluster has no servers up")
        tablets = []
        for t in m.get("tablets", []):
            s = servers.get(t["master"])
            if s is not None:
                tablets.append((t["table"], t["start_hash"], t["end_hash"], parse_address(s["native"])))
        tables = {t["name"]: t["id"] for t in m.get("tables", [])}
        return cls(tablets, parse_address(servers[up[0]]["native"]), m.get("version", 0), tables=tables)

    def locate(self, table: int, hash_: int) -> Optional[Address]:
        starts = self._starts.get(table)
        if starts is not None:
            i = bisect.bisect_right(starts, hash_) - 1
            if i >= 0:
                start, end, addr = self._ranges[table][i]
                if start <= hash_ <= end:
                    return addr
        return self.catch_all

    def names_table(self, table: int) -> bool:
        """Whether a tablet of this map names ``table`` (a cluster's map does;
        a single server's catch-all names none)."""
        return table in self._ranges

    def servers(self) -> List[Address]:
        """Every address the map sends keys to."""
        out = {a for rs in self._ranges.values() for _, _, a in rs}
        if self.catch_all:
            out.add(self.catch_all)
        return sorted(out)


# -- the control protocol -----------------------------------------------------


def control_frame(request: Dict[str, Any]) -> bytes:
    body = json.dumps(request, separators=(",", ":")).encode()
    return struct.pack("<I", len(body)) + body


def control_length(head: bytes) -> int:
    n: int = struct.unpack("<I", head)[0]
    if n > MAX_CONTROL_FRAME:
        raise ClusterError(f"control frame of {n} bytes over the limit")
    return n


def map_from_reply(body: bytes) -> TabletMap:
    try:
        reply = json.loads(body)
    except ValueError as e:
        raise ClusterError(f"malformed answer from the coordinator: {e}") from None
    if reply.get("reply") == "error":
        raise ClusterError(f"coordinator refused: {reply.get('code')}: {reply.get('message')}")
    if reply.get("reply") != "map":
        raise ClusterError(f"unexpected answer from the coordinator: {reply.get('reply')!r}")
    return TabletMap.from_cluster_map(reply["map"])


GET_MAP = control_frame({"op": "get_map"})


# -- actions ------------------------------------------------------------------


class Req(NamedTuple):
    """A request: its opcode, encoded body and route (``(table, hash)`` or
    ``None`` for the admin server)."""

    opcode: int
    body: bytes
    route: Optional[Tuple[int, int]]


class Send(NamedTuple):
    """Send every ``(address, opcode, body)``, pipelined; the driver answers
    one outcome per request: ``(opcode, body)`` of the response, or the
    :class:`ShoalConnectionError` that stopped it."""

    requests: List[Tuple[Address, int, bytes]]


class Refresh(NamedTuple):
    pass


class Sleep(NamedTuple):
    seconds: float


Outcome = Union[Tuple[int, bytes], ShoalConnectionError]
Action = Union[Send, Refresh, Sleep]
Plan = Generator[Action, Any, Any]
REFRESH = Refresh()


class _Round:
    """What one round of sends learned: each result filed as final or to be
    sent again, and whether to refresh the map or wait first."""

    def __init__(self, results: List[Any], last: Dict[int, BaseException]) -> None:
        self.results = results
        self.last = last
        self.pending: List[int] = []
        self.refresh = False
        self.delay = 0.0

    def file(self, i: int, result: Any, names_table: Callable[[int], bool], mutating: bool, admin: bool) -> None:
        """Files request ``i``'s result: final, or pending again."""
        if self.retryable(result, names_table, mutating, admin):
            self.pending.append(i)
            self.last[i] = result
        else:
            self.results[i] = result

    def retryable(self, result: Any, names_table: Callable[[int], bool], mutating: bool, admin: bool) -> bool:
        """Whether ``result`` (a decoded result, a status, or a connection
        failure) is to be retried; notes the refresh or delay it needs."""
        if isinstance(result, ShoalConnectionError):
            if admin or (result.sent and mutating):
                return False
            self.refresh = True
            self.delay = max(self.delay, UNREACHABLE_DELAY)
            return True
        if isinstance(result, UnknownTablet) or (isinstance(result, UnknownTable) and names_table(result.table)):
            self.refresh = True
            return True
        if isinstance(result, Retry):
            self.delay = max(self.delay, min(result.delay_us / 1e6, MAX_RETRY_DELAY))
            return True
        return False

    def actions(self, attempt: int) -> List[Action]:
        """What to do before the next round (nothing after the last one)."""
        out: List[Action] = []
        if self.pending and attempt + 1 < MAX_ATTEMPTS:
            if self.refresh:
                out.append(REFRESH)
            if self.delay:
                out.append(Sleep(self.delay))
        return out


def _give_up(results: List[Any], pending: List[int], last: Dict[int, BaseException]) -> List[Any]:
    for i in pending:
        results[i] = UnavailableError(MAX_ATTEMPTS, last.get(i, UnknownTablet()))
    return results


def _decode(req_opcode: int, outcome: Outcome) -> Any:
    if isinstance(outcome, ShoalConnectionError):
        return outcome
    opcode, body = outcome
    if opcode != req_opcode:
        raise ProtocolError(f"response opcode {opcode} to a request of opcode {req_opcode}")
    return p.decode_response(opcode, body)


def run_requests(get_map: Callable[[], TabletMap], reqs: Sequence[Req]) -> Plan:
    """Sends independent requests (one operation, or a pipeline), retrying
    each as the policy says; returns one result per request, a
    :class:`ShoalError` instance for a failed one."""
    results: List[Any] = [None] * len(reqs)
    pending = list(range(len(reqs)))
    last: Dict[int, BaseException] = {}
    refreshed_for_route = False
    for attempt in range(MAX_ATTEMPTS):
        if not pending:
            break
        m = get_map()
        sends, sent_idx, unrouted = [], [], []
        for i in pending:
            r = reqs[i]
            addr = m.admin if r.route is None else m.locate(*r.route)
            if addr is None:
                unrouted.append(i)
            else:
                sends.append((addr, r.opcode, r.body))
                sent_idx.append(i)
        rnd = _Round(results, last)
        if unrouted:
            # A table created since the map was fetched: refresh once.
            if refreshed_for_route:
                for i in unrouted:
                    results[i] = UnknownTable(reqs[i].route[0])  # type: ignore[index]
            else:
                rnd.refresh = refreshed_for_route = True
                rnd.pending.extend(unrouted)
        outcomes = (yield Send(sends)) if sends else []
        for i, outcome in zip(sent_idx, outcomes):
            r = reqs[i]
            rnd.file(i, _decode(r.opcode, outcome), m.names_table, r.opcode in p.MUTATING, r.route is None)
        pending = rnd.pending
        yield from rnd.actions(attempt)
    return _give_up(results, pending, last)


class MultiItem(NamedTuple):
    table: int
    hash: int
    encoded: bytes


def run_multi(get_map: Callable[[], TabletMap], opcode: int, items: Sequence[MultiItem], budget: int) -> Plan:
    """A multi-op: items grouped into one request per server (several if
    they exceed ``budget`` bytes), every group sent before any answer is
    awaited; items answered UNKNOWN_TABLET or RETRY are routed and sent
    again. Returns one result (or exception instance) per item, in order."""
    results: List[Any] = [None] * len(items)
    pending = list(range(len(items)))
    last: Dict[int, BaseException] = {}
    refreshed_for_route = False
    mutating = opcode in p.MUTATING
    for attempt in range(MAX_ATTEMPTS):
        if not pending:
            break
        m = get_map()
        groups: Dict[Address, List[List[int]]] = {}
        sizes: Dict[Address, int] = {}
        unrouted = []
        for i in pending:
            it = items[i]
            addr = m.locate(it.table, it.hash)
            if addr is None:
                unrouted.append(i)
                continue
            size = len(it.encoded)
            gs = groups.setdefault(addr, [[]])
            if gs[-1] and sizes[addr] + size > budget:
                gs.append([])
                sizes[addr] = 0
            gs[-1].append(i)
            sizes[addr] = sizes.get(addr, 0) + size
        rnd = _Round(results, last)
        if unrouted:
            if refreshed_for_route:
                for i in unrouted:
                    results[i] = UnknownTable(items[i].table)
            else:
                rnd.refresh = refreshed_for_route = True
                rnd.pending.extend(unrouted)
        batches = [(addr, g) for addr, gs in groups.items() for g in gs]
        sends = [(addr, opcode, p.multi(items[i].encoded for i in g)) for addr, g in batches]
        outcomes = (yield Send(sends)) if sends else []
        for (addr, g), outcome in zip(batches, outcomes):
            res = _decode(opcode, outcome)
            if isinstance(res, list):
                if len(res) != len(g):
                    raise ProtocolError(f"{len(res)} results for {len(g)} items")
                per_item = res
            else:  # the whole request failed: each item has that failure
                per_item = [res] * len(g)
            for i, r in zip(g, per_item):
                rnd.file(i, r, m.names_table, mutating, False)
        pending = rnd.pending
        yield from rnd.actions(attempt)
    return _give_up(results, pending, last)

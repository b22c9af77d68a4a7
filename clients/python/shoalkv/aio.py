"""The asyncio client: connections opened with ``asyncio.open_connection``,
each multiplexed (any number of requests from any number of tasks in flight,
responses matched by request id by a reader task), the same codec and the
same routing and retry plans as the sync client (:mod:`shoalkv.routing`).
"""
from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from . import _ops
from . import protocol as p
from .client import Coordinators, Options, PipelineBase, address, check_login, coordinator_list, coordinator_order, unwrap
from .errors import ClusterError, ObjectDoesntExist, ProtocolError, RequestTooLarge, ShoalConnectionError, ShoalError
from .protocol import NO_RULES, Bytes, IncrementResult, Object, Page, ReadResult, RejectRules, RemoveItem, Ttl
from .protocol import WriteItem
from .routing import GET_MAP, Address, Plan, Refresh, Req, Send, Sleep, TabletMap, control_length
from .routing import map_from_reply, run_multi, run_requests


class AsyncConnection:
    """One multiplexed connection: :meth:`send` writes frames and returns a
    future per request; a reader task resolves them as responses arrive."""

    def __init__(self, addr: Address, opts: Options) -> None:
        self.addr = addr
        self.opts = opts
        self.closed = False
        self._ids = itertools.count(1)
        self._waiters: Dict[int, "asyncio.Future[Tuple[int, bytes]]"] = {}
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task: Optional["asyncio.Task[None]"] = None

    async def connect(self) -> None:
        host, port = self.addr
        try:
            coro = asyncio.open_connection(host, port, ssl=self.opts.ssl_context,
                                           server_hostname=(self.opts.server_hostname or host)
                                           if self.opts.ssl_context else None)
            self._reader, self._writer = await asyncio.wait_for(coro, self.opts.timeout)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as e:
            raise ShoalConnectionError(f"cannot connect to {host}:{port}: {e!r}") from None
        self._task = asyncio.ensure_future(self._read_loop())
        if self.opts.auth is not None:
            try:
                (fut,) = self.send([(p.AUTH, self.opts.auth)])
                check_login(*await self._wait(fut))
            except BaseException:
                self.close()
                raise

    def close(self, why: str = "connection closed") -> None:
        if self.closed:
            return
        self.closed = True
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        err = ShoalConnectionError(f"{self.addr[0]}:{self.addr[1]}: {why}", sent=True)
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(err)
        self._waiters.clear()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        buf = bytearray()
        why = "the server closed the connection"
        try:
            while True:
                chunk = await self._reader.read(256 << 10)
                if not chunk:
                    break
                buf += chunk
                start = 0
                while True:
                    h = p.check_frame(buf, start, self.opts.max_body)
                    if h is None:
                        break
                    end = start + p.HEADER_LEN + h.body_len
                    fut = self._waiters.pop(h.request_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result((h.opcode, bytes(buf[start + p.HEADER_LEN:end])))
                    start = end
                if start:
                    del buf[:start]
        except (OSError, ssl.SSLError, ProtocolError) as e:
            why = repr(e)
        except asyncio.CancelledError:
            why = "closed by the client"
        self.close(why)

    def send(self, reqs: List[Tuple[int, bytes]]) -> List["asyncio.Future[Tuple[int, bytes]]"]:
        if self.closed or self._writer is None:
            raise ShoalConnectionError(f"connection to {self.addr[0]}:{self.addr[1]} is closed")
        loop = asyncio.get_running_loop()
        parts, futs = [], []
        for opcode, body in reqs:
            if len(body) > self.opts.max_body:
                raise RequestTooLarge(f"request body of {len(body)} bytes over the limit of {self.opts.max_body}")
        for opcode, body in reqs:
            rid = next(self._ids)
            fut = loop.create_future()
            self._waiters[rid] = fut
            futs.append(fut)
            parts.append(p.frame(opcode, rid, body))
        self._writer.write(b"".join(parts))
        return futs

    async def _wait(self, fut: "asyncio.Future[Tuple[int, bytes]]") -> Tuple[int, bytes]:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.opts.timeout)
        except asyncio.TimeoutError:
            self.close("no response in time")
            raise ShoalConnectionError(f"{self.addr[0]}:{self.addr[1]}: no response in time", sent=True) from None

    async def drain(self) -> None:
        """Waits while the transport's write buffer is over its high mark."""
        if self._writer is not None and not self.closed:
            try:
                await self._writer.drain()
            except (OSError, ssl.SSLError) as e:
                self.close(repr(e))


class AsyncClient:
    """The asyncio twin of :class:`shoalkv.Client`: the same operations as
    coroutines. Create it with ``await AsyncClient.connect(addr)`` or
    ``await AsyncClient.connect_cluster(coordinator)``; each server gets
    ``connections`` multiplexed connections, used in turn."""

    def __init__(self, address_: Union[str, Address, None] = None, *, coordinator: Optional[Coordinators] = None,
                 password: Optional[Union[str, bytes]] = None, user: Union[str, bytes] = "default",
                 ssl_context: Optional[ssl.SSLContext] = None, server_hostname: Optional[str] = None,
                 timeout: Optional[float] = 10.0, connections: int = 1, max_body: int = p.DEFAULT_MAX_BODY,
                 multi_budget: int = 1 << 20) -> None:
        if (address_ is None) == (coordinator is None):
            raise ValueError("give a server address or a coordinator, not both")
        self.opts = Options(timeout=timeout, ssl_context=ssl_context, server_hostname=server_hostname, user=user,
                            password=password, max_body=max_body)
        self.connections = max(1, connections)
        self.multi_budget = multi_budget
        #: Every coordinator address given; ``coordinator`` is the one that
        #: answered last.
        self.coordinators = [] if coordinator is None else coordinator_list(coordinator)
        self.coordinator: Optional[Address] = self.coordinators[0] if self.coordinators else None
        self._map = TabletMap.single(address(address_)) if address_ is not None else None
        self._conns: Dict[Address, List[Optional[AsyncConnection]]] = {}
        self._turn: Dict[Address, int] = {}
        self._locks: Dict[Address, asyncio.Lock] = {}

    @classmethod
    async def connect(cls, address_: Union[str, Address], **kwargs: Any) -> "AsyncClient":
        """A client of one server (connected, and pinged, before it returns)."""
        c = cls(address_, **kwargs)
        await c.ping()
        return c

    @classmethod
    async def connect_cluster(cls, coordinator: Coordinators, **kwargs: Any) -> "AsyncClient":
        """A client of the cluster of ``coordinator`` (one address, or a
        leader and its standbys; its map fetched)."""
        c = cls(coordinator=coordinator, **kwargs)
        c._map = await c.fetch_map()
        return c

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        for conns in self._conns.values():
            for c in conns:
                if c is not None:
                    c.close("closed by the client")
        self._conns.clear()
        await asyncio.sleep(0)

    # -- routing -------------------------------------------------------------

    @property
    def tablet_map(self) -> TabletMap:
        assert self._map is not None, "connect_cluster() fetches the map"
        return self._map

    async def fetch_map(self) -> TabletMap:
        """The map, from the first coordinator address that answers (see
        :meth:`shoalkv.Client.fetch_map`)."""
        assert self.coordinator is not None
        wait = self.opts.timeout or 10.0
        failed = []
        for host, port in coordinator_order(self.coordinators, self.coordinator):
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, port), wait)
                try:
                    w.write(GET_MAP)
                    head = await asyncio.wait_for(r.readexactly(4), wait)
                    body = await asyncio.wait_for(r.readexactly(control_length(head)), wait)
                finally:
                    w.close()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                failed.append(f"{host}:{port}: {e!r}")
                continue
            self.coordinator = (host, port)
            return map_from_reply(body)
        raise ClusterError("cannot reach the coordinator at " + "; ".join(failed))

    async def refresh_map(self) -> None:
        if self.coordinator is None:
            return
        try:
            self._map = await self.fetch_map()
        except ClusterError:
            pass

    async def connection(self, addr: Address) -> AsyncConnection:
        """A connection to ``addr`` (the next of its connections in turn),
        opened if needed."""
        conns = self._conns.setdefault(addr, [None] * self.connections)
        turn = self._turn.get(addr, 0)
        self._turn[addr] = (turn + 1) % self.connections
        c = conns[turn]
        if c is not None and not c.closed:
            return c
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            c = conns[turn]
            if c is None or c.closed:
                c = AsyncConnection(addr, self.opts)
                await c.connect()
                conns[turn] = c
        return c

    async def _send(self, requests: List[Tuple[Address, int, bytes]]) -> List[Any]:
        outcomes: List[Any] = [None] * len(requests)
        by_addr: Dict[Address, List[int]] = {}
        for i, (addr, _, _) in enumerate(requests):
            by_addr.setdefault(addr, []).append(i)
        waits = []
        for addr, idx in by_addr.items():
            try:
                conn = await self.connection(addr)
                futs = conn.send([(requests[i][1], requests[i][2]) for i in idx])
            except ShoalConnectionError as e:
                for i in idx:
                    outcomes[i] = e
                continue
            waits.append((conn, idx, futs))
        for conn, _, _ in waits:
            await conn.drain()
        futs = [f for _, _, fs in waits for f in fs]
        if futs:
            _, late = await asyncio.wait(futs, timeout=self.opts.timeout)
            for conn, _, fs in waits:
                if any(f in late for f in fs):
                    conn.close("no response in time")  # fails its waiters
        for conn, idx, fs in waits:
            for i, fut in zip(idx, fs):
                exc = fut.exception()
                outcomes[i] = exc if exc is not None else fut.result()
                if exc is not None and not isinstance(exc, ShoalConnectionError):
                    raise exc
        return outcomes

    async def _drive(self, plan: Plan) -> Any:
        try:
            action = next(plan)
            while True:
                if isinstance(action, Send):
                    reply: Any = await self._send(action.requests)
                else:
                    reply = None
                    if isinstance(action, Refresh):
                        await self.refresh_map()
                    elif isinstance(action, Sleep):
                        await asyncio.sleep(action.seconds)
                action = plan.send(reply)
        except StopIteration as done:
            return done.value

    def _get_map(self) -> TabletMap:
        return self.tablet_map

    async def execute(self, reqs: List[Req]) -> List[Any]:
        """Sends routed requests (pipelined); one result or exception each."""
        return await self._drive(run_requests(self._get_map, reqs))  # type: ignore[no-any-return]

    async def _one(self, req: Req) -> Any:
        return unwrap((await self.execute([req]))[0])

    async def _multi(self, opcode: int, items: List[Any]) -> List[Any]:
        if not items:
            return []
        return await self._drive(run_multi(self._get_map, opcode, items, self.multi_budget))  # type: ignore[no-any-return]

    # -- operations (see shoalkv.Client for what each does) ---------------------

    async def ping(self) -> None:
        await self._one(_ops.ping())

    async def create_table(self, name: Bytes) -> int:
        table = await self._one(_ops.create_table(name))
        if not self.tablet_map.names_table(table):
            await self.refresh_map()
        return table  # type: ignore[no-any-return]

    async def drop_table(self, name: Bytes) -> None:
        await self._one(_ops.drop_table(name))
        await self.refresh_map()

    async def table_id(self, name: Bytes) -> int:
        return await self._one(_ops.table_id(name))  # type: ignore[no-any-return]

    async def read(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> ReadResult:
        return await self._one(_ops.read(table, key, rules))  # type: ignore[no-any-return]

    async def get(self, table: int, key: Bytes) -> Optional[bytes]:
        res = (await self.execute([_ops.read(table, key)]))[0]
        return None if isinstance(res, ObjectDoesntExist) else unwrap(res).value

    async def write(self, table: int, key: Bytes, value: Bytes, rules: RejectRules = NO_RULES,
                    ttl: Optional[float] = None) -> int:
        return await self._one(_ops.write(table, key, value, rules, ttl))  # type: ignore[no-any-return]

    async def ttl(self, table: int, key: Bytes) -> Ttl:
        return await self._one(_ops.read_ttl(table, key))  # type: ignore[no-any-return]

    async def remove(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> Optional[int]:
        return await self._one(_ops.remove(table, key, rules))  # type: ignore[no-any-return]

    async def increment(self, table: int, key: Bytes, delta: int = 1,
                        rules: RejectRules = NO_RULES) -> IncrementResult:
        return await self._one(_ops.increment(table, key, delta, rules))  # type: ignore[no-any-return]

    async def enumerate(self, table: int, cursor: int = 0, max_count: int = 0) -> Page:
        return await self._one(_ops.enumerate_page(table, cursor, max_count))  # type: ignore[no-any-return]

    async def scan_all(self, table: int, page_size: int = 1000) -> List[Object]:
        """Every object of the table (all pages)."""
        out: List[Object] = []
        cursor: Optional[int] = 0
        while cursor is not None:
            page = await self.enumerate(table, cursor, page_size)
            out.extend(page.objects)
            cursor = page.next_cursor
        return out

    async def stats(self) -> Dict[str, Union[int, float]]:
        return await self._one(_ops.stats())  # type: ignore[no-any-return]

    async def multi_read(self, items: Iterable[Tuple[int, Bytes]]) -> List[Union[ReadResult, ShoalError]]:
        return await self._multi(p.MULTI_READ, _ops.multi_read_items(items))

    async def multi_write(self, items: Iterable[Union[WriteItem, Tuple[int, Bytes, Bytes]]]
                          ) -> List[Union[int, ShoalError]]:
        return await self._multi(p.MULTI_WRITE, _ops.multi_write_items(items))

    async def multi_remove(self, items: Iterable[Union[RemoveItem, Tuple[int, Bytes]]]
                           ) -> List[Union[Optional[int], ShoalError]]:
        return await self._multi(p.MULTI_REMOVE, _ops.multi_remove_items(items))

    def pipeline(self) -> "AsyncPipeline":
        return AsyncPipeline(self)


class AsyncPipeline(PipelineBase):
    """Queued operations of an :class:`AsyncClient`; ``await execute()``."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__()
        self.client = client

    async def execute(self, raise_on_error: bool = False) -> List[Any]:
        return self._results(await self.client.execute(self._take()), raise_on_error)

"""The synchronous client: blocking sockets, a pool of connections per
server, pipelining on each connection, routing by the cluster's tablet map.

A :class:`Client` is safe to share between threads: each operation borrows
a connection of its server's pool for the duration of the call (so threads
do not wait on each other's round trips), and a pipeline or multi-op writes
all its requests to each server's connection before reading any response,
matching responses to requests by request id.
"""
from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _ops
from . import protocol as p
from .errors import ObjectDoesntExist, ClusterError, ProtocolError, RequestTooLarge, ShoalConnectionError
from .errors import ShoalError, StatusError
from .protocol import NO_RULES, Bytes, IncrementResult, Object, Page, ReadResult, RejectRules, RemoveItem, Ttl
from .protocol import WriteItem
from .routing import GET_MAP, Address, Plan, Refresh, Req, Send, Sleep, TabletMap, control_length
from .routing import map_from_reply, parse_address, run_multi, run_requests

# Requests larger than this are written with the socket non-blocking while
# responses are read, so that neither side can fill the other's buffers.
_DRAIN_THRESHOLD = 256 << 10
_RECV = 256 << 10


def address(a: Union[str, Address]) -> Address:
    return parse_address(a) if isinstance(a, str) else (a[0], int(a[1]))


#: One coordinator address, several separated by commas, or a list of them.
Coordinators = Union[str, Address, Sequence[Union[str, Address]]]


def coordinator_list(c: Coordinators) -> List[Address]:
    """The coordinator addresses ``c`` names: a leader and its standbys
    (``"10.0.0.1:7600,10.0.0.2:7600"``, or a list). Only the leader
    listens, so a client tries them in turn and keeps the one that answered."""
    if isinstance(c, str):
        parts: List[Union[str, Address]] = [x.strip() for x in c.split(",") if x.strip()]
    elif isinstance(c, tuple) and len(c) == 2 and isinstance(c[1], int):
        parts = [c]
    else:
        parts = list(c)  # type: ignore[arg-type]
    if not parts:
        raise ValueError("no coordinator address")
    return [address(x) for x in parts]


def coordinator_order(addrs: List[Address], last: Optional[Address]) -> List[Address]:
    """``addrs`` starting from ``last`` (the one that answered last)."""
    i = addrs.index(last) if last in addrs else 0
    return addrs[i:] + addrs[:i]


def tls_context(ca: Optional[str] = None, cert: Optional[str] = None, key: Optional[str] = None) -> ssl.SSLContext:
    """A client TLS context trusting ``ca`` (PEM; the system's CAs if None),
    presenting ``cert``/``key`` if given (mutual TLS)."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def unwrap(result: Any) -> Any:
    """A result, or raise it if it is an exception."""
    if isinstance(result, BaseException):
        raise result
    return result


class Options:
    """Connection settings shared by every connection of a client."""

    def __init__(self, *, timeout: Optional[float] = 10.0, ssl_context: Optional[ssl.SSLContext] = None,
                 server_hostname: Optional[str] = None, user: Union[str, bytes] = "default",
                 password: Optional[Union[str, bytes]] = None, max_body: int = p.DEFAULT_MAX_BODY) -> None:
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.auth = None if password is None else p.auth_op(p.as_bytes(user), p.as_bytes(password))
        self.max_body = max_body


def check_login(opcode: int, body: bytes) -> None:
    """The answer to a connection's AUTH: raises the refusal."""
    res = p.decode_response(opcode, body)
    if isinstance(res, StatusError):
        raise res  # AuthFailed; MalformedRequest from a TLS port spoken to in clear text


class Connection:
    """One connection to one server, with any number of requests in flight:
    :meth:`send` writes frames and returns their request ids, :meth:`wait`
    reads until the response to an id is there (buffering others)."""

    def __init__(self, addr: Address, opts: Options) -> None:
        self.addr = addr
        self.opts = opts
        self.broken = False
        self._next_id = 1
        self._buf = bytearray()
        self._ready: Dict[int, Tuple[int, bytes]] = {}
        try:
            sock = socket.create_connection(addr, timeout=opts.timeout)
        except OSError as e:
            raise ShoalConnectionError(f"cannot connect to {addr[0]}:{addr[1]}: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if opts.ssl_context is not None:
            try:
                sock = opts.ssl_context.wrap_socket(sock, server_hostname=opts.server_hostname or addr[0])
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise ShoalConnectionError(f"TLS handshake with {addr[0]}:{addr[1]} failed: {e}") from None
        self.sock = sock
        if opts.auth is not None:
            try:
                (rid,) = self.send([(p.AUTH, opts.auth)])
                check_login(*self.wait(rid))
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, reqs: Sequence[Tuple[int, bytes]]) -> List[int]:
        """Writes the requests in one go; returns their request ids."""
        if self.broken:
            raise ShoalConnectionError(f"connection to {self.addr[0]}:{self.addr[1]} is closed")
        ids = []
        parts = []
        for opcode, body in reqs:
            if len(body) > self.opts.max_body:
                raise RequestTooLarge(f"request body of {len(body)} bytes over the limit of {self.opts.max_body}")
            rid = self._next_id
            self._next_id += 1
            ids.append(rid)
            parts.append(p.frame(opcode, rid, body))
        data = b"".join(parts)
        try:
            if len(data) <= _DRAIN_THRESHOLD:
                self.sock.sendall(data)
            else:
                self._send_draining(data)
        except (OSError, ssl.SSLError) as e:
            self.close()
            raise ShoalConnectionError(f"sending to {self.addr[0]}:{self.addr[1]}: {e}", sent=True) from None
        return ids

    def _send_draining(self, data: bytes) -> None:
        view = memoryview(data)
        sent = 0
        deadline = None if self.opts.timeout is None else time.monotonic() + self.opts.timeout
        self.sock.setblocking(False)
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
                while sent < len(view):
                    events = sel.select(timeout=1.0)
                    if not events and deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError("timed out writing a pipeline")
                    for _, mask in events:
                        if mask & selectors.EVENT_READ:
                            self._recv_some()
                        if mask & selectors.EVENT_WRITE:
                            try:
                                sent += self.sock.send(view[sent:sent + _RECV])
                            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                                pass
        finally:
            self.sock.settimeout(self.opts.timeout)

    def _recv_some(self) -> None:
        try:
            chunk = self.sock.recv(_RECV)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self._buf += chunk
        self._split()

    def _split(self) -> None:
        buf = self._buf
        start = 0
        while True:
            h = p.check_frame(buf, start, self.opts.max_body)
            if h is None:
                break
            if not h.flags & p.FLAG_RESPONSE:
                raise ProtocolError("a request frame from the server")
            end = start + p.HEADER_LEN + h.body_len
            self._ready[h.request_id] = (h.opcode, bytes(buf[start + p.HEADER_LEN:end]))
            start = end
        if start:
            del buf[:start]

    def wait(self, rid: int) -> Tuple[int, bytes]:
        """The response (opcode, body) to request ``rid``."""
        ready = self._ready
        try:
            while rid not in ready:
                if self.broken:
                    raise ConnectionResetError("connection closed")
                self._recv_some()
        except (OSError, ssl.SSLError, ProtocolError) as e:
            self.close()
            raise ShoalConnectionError(f"waiting for {self.addr[0]}:{self.addr[1]}: {e}", sent=True) from None
        return ready.pop(rid)


class ConnectionPool:
    """Up to ``max_size`` connections to one server, reused: a thread borrows
    one for a call and gives it back (a broken one is dropped)."""

    def __init__(self, addr: Address, opts: Options, max_size: int = 8) -> None:
        self.addr = addr
        self.opts = opts
        self.max_size = max(1, max_size)
        self._idle: List[Connection] = []
        self._open = 0
        self._cond = threading.Condition()
        self._closed = False

    def acquire(self) -> Connection:
        with self._cond:
            deadline = None if self.opts.timeout is None else time.monotonic() + self.opts.timeout
            while not self._idle and self._open >= self.max_size:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ShoalConnectionError(f"no free connection to {self.addr[0]}:{self.addr[1]} in time")
                self._cond.wait(left)
            if self._idle:
                return self._idle.pop()
            self._open += 1
        try:
            return Connection(self.addr, self.opts)
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def release(self, conn: Connection) -> None:
        with self._cond:
            if conn.broken or self._closed:
                conn.close()
                self._open -= 1
            else:
                self._idle.append(conn)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for c in self._idle:
                c.close()
            self._open -= len(self._idle)
            self._idle.clear()

    @property
    def size(self) -> int:
        """Connections open (idle or borrowed)."""
        return self._open


class Client:
    """A client of one Shoal server (``Client("127.0.0.1:7700")``) or of a
    cluster (``Client.cluster("127.0.0.1:7600")``: the tablet map comes from
    the coordinator and is fetched again when a server answers that a key is
    not its own).

    Keys, values and table names are ``bytes`` (``str`` is sent as UTF-8).
    Every operation raises a :class:`~shoalkv.errors.ShoalError` subclass on
    failure; multi-ops and pipelines return exceptions as values instead.
    """

    def __init__(self, address_: Union[str, Address, None] = None, *, coordinator: Optional[Coordinators] = None,
                 password: Optional[Union[str, bytes]] = None, user: Union[str, bytes] = "default",
                 ssl_context: Optional[ssl.SSLContext] = None, server_hostname: Optional[str] = None,
                 timeout: Optional[float] = 10.0, pool_size: int = 8, max_body: int = p.DEFAULT_MAX_BODY,
                 multi_budget: int = 1 << 20) -> None:
        if (address_ is None) == (coordinator is None):
            raise ValueError("give a server address or a coordinator, not both")
        self.opts = Options(timeout=timeout, ssl_context=ssl_context, server_hostname=server_hostname, user=user,
                            password=password, max_body=max_body)
        self.pool_size = pool_size
        self.multi_budget = multi_budget
        self._pools: Dict[Address, ConnectionPool] = {}
        self._lock = threading.Lock()
        #: Every coordinator address given; ``coordinator`` is the one that
        #: answered last (the leader, as far as this client knows).
        self.coordinators = [] if coordinator is None else coordinator_list(coordinator)
        self.coordinator: Optional[Address] = self.coordinators[0] if self.coordinators else None
        if self.coordinator is None:
            self._map = TabletMap.single(address(address_))  # type: ignore[arg-type]
        else:
            self._map = self.fetch_map()

    @classmethod
    def cluster(cls, coordinator: Coordinators, **kwargs: Any) -> "Client":
        """A client of the cluster whose coordinator is at ``coordinator``
        (one address, or a leader and its standbys: see
        :func:`coordinator_list`)."""
        return cls(coordinator=coordinator, **kwargs)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    # -- routing -------------------------------------------------------------

    @property
    def tablet_map(self) -> TabletMap:
        return self._map

    def fetch_map(self) -> TabletMap:
        """The coordinator's current map (:class:`ClusterError` if it cannot
        be had), from the first coordinator address that answers, starting
        with the one that answered last: only the leader listens, so this
        follows the leader across a fail-over."""
        assert self.coordinator is not None
        failed = []
        for addr in coordinator_order(self.coordinators, self.coordinator):
            try:
                with socket.create_connection(addr, timeout=self.opts.timeout or 10.0) as s:
                    s.sendall(GET_MAP)
                    f = s.makefile("rb")
                    head = f.read(4)
                    body = f.read(control_length(head)) if len(head) == 4 else b""
            except OSError as e:
                failed.append(f"{addr[0]}:{addr[1]}: {e}")
                continue
            if len(head) != 4:
                failed.append(f"{addr[0]}:{addr[1]}: the coordinator closed the connection")
                continue
            self.coordinator = addr
            return map_from_reply(body)
        raise ClusterError("cannot reach the coordinator at " + "; ".join(failed))

    def refresh_map(self) -> None:
        """Fetches the map again; keeps the one held if the coordinator
        cannot be reached or has no server up."""
        if self.coordinator is None:
            return
        try:
            self._map = self.fetch_map()
        except ClusterError:
            pass

    def pool(self, addr: Address) -> ConnectionPool:
        pool = self._pools.get(addr)
        if pool is None:
            with self._lock:
                pool = self._pools.get(addr)
                if pool is None:
                    pool = self._pools[addr] = ConnectionPool(addr, self.opts, self.pool_size)
        return pool

    def _send(self, requests: List[Tuple[Address, int, bytes]]) -> List[Any]:
        """Performs a :class:`Send`: every server's requests are written
        before any response is read."""
        outcomes: List[Any] = [None] * len(requests)
        by_addr: Dict[Address, List[int]] = {}
        for i, (addr, _, _) in enumerate(requests):
            by_addr.setdefault(addr, []).append(i)
        inflight: List[Tuple[ConnectionPool, Connection, List[int], Optional[List[int]]]] = []
        try:
            for addr, idx in by_addr.items():
                pool = self.pool(addr)
                try:
                    conn = pool.acquire()
                except ShoalConnectionError as e:
                    for i in idx:
                        outcomes[i] = e
                    continue
                inflight.append((pool, conn, idx, None))
                try:
                    ids = conn.send([(requests[i][1], requests[i][2]) for i in idx])
                    inflight[-1] = (pool, conn, idx, ids)
                except ShoalConnectionError as e:
                    for i in idx:
                        outcomes[i] = e
            for _, conn, idx, sent in inflight:
                for i, rid in zip(idx, sent or []):
                    try:
                        outcomes[i] = conn.wait(rid)
                    except ShoalConnectionError as e:
                        outcomes[i] = e
        finally:
            for pool, conn, _, _ in inflight:
                pool.release(conn)
        return outcomes

    def _drive(self, plan: Plan) -> Any:
        """Runs a routing plan: sends, refreshes and sleeps as it asks."""
        try:
            action = next(plan)
            while True:
                if isinstance(action, Send):
                    reply: Any = self._send(action.requests)
                else:
                    reply = None
                    if isinstance(action, Refresh):
                        self.refresh_map()
                    elif isinstance(action, Sleep):
                        time.sleep(action.seconds)
                action = plan.send(reply)
        except StopIteration as done:
            return done.value

    def _get_map(self) -> TabletMap:
        return self._map

    def execute(self, reqs: Sequence[Req]) -> List[Any]:
        """Sends routed requests (pipelined); one result or exception each."""
        return self._drive(run_requests(self._get_map, reqs))  # type: ignore[no-any-return]

    def _one(self, req: Req) -> Any:
        return unwrap(self.execute((req,))[0])

    def _multi(self, opcode: int, items: List[Any]) -> List[Any]:
        if not items:
            return []
        return self._drive(run_multi(self._get_map, opcode, items, self.multi_budget))  # type: ignore[no-any-return]

    # -- operations ------------------------------------------------------------

    def ping(self) -> None:
        """Pings the admin server (the first server up)."""
        self._one(_ops.ping())

    def create_table(self, name: Bytes) -> int:
        """Creates a table (through the coordinator in a cluster); returns its
        id, that of the existing table if the name is taken."""
        table = self._one(_ops.create_table(name))
        if not self._map.names_table(table):
            self.refresh_map()
        return table  # type: ignore[no-any-return]

    def drop_table(self, name: Bytes) -> None:
        """Drops a table and its objects (UnknownTableName if none)."""
        self._one(_ops.drop_table(name))
        self.refresh_map()

    def table_id(self, name: Bytes) -> int:
        """The id of the table called ``name`` (UnknownTableName if none)."""
        return self._one(_ops.table_id(name))  # type: ignore[no-any-return]

    def read(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> ReadResult:
        """The object's value and version (ObjectDoesntExist if missing)."""
        return self._one(_ops.read(table, key, rules))  # type: ignore[no-any-return]

    def get(self, table: int, key: Bytes) -> Optional[bytes]:
        """The object's value, or None if it does not exist."""
        res = self.execute((_ops.read(table, key),))[0]
        return None if isinstance(res, ObjectDoesntExist) else unwrap(res).value

    def write(self, table: int, key: Bytes, value: Bytes, rules: RejectRules = NO_RULES,
              ttl: Optional[float] = None) -> int:
        """Creates or overwrites an object (expiring ``ttl`` seconds after the
        server applies it, if given); returns its new version."""
        return self._one(_ops.write(table, key, value, rules, ttl))  # type: ignore[no-any-return]

    def ttl(self, table: int, key: Bytes) -> Ttl:
        """The object's version and expiry, without its value."""
        return self._one(_ops.read_ttl(table, key))  # type: ignore[no-any-return]

    def remove(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> Optional[int]:
        """Removes an object; returns the version it had (None: it did not exist)."""
        return self._one(_ops.remove(table, key, rules))  # type: ignore[no-any-return]

    def increment(self, table: int, key: Bytes, delta: int = 1, rules: RejectRules = NO_RULES) -> IncrementResult:
        """Adds ``delta`` to a counter (a decimal integer value; missing: 0);
        returns the new value and version."""
        return self._one(_ops.increment(table, key, delta, rules))  # type: ignore[no-any-return]

    def enumerate(self, table: int, cursor: int = 0, max_count: int = 0) -> Page:
        """One page of the table's objects from ``cursor`` (0 to start)."""
        return self._one(_ops.enumerate_page(table, cursor, max_count))  # type: ignore[no-any-return]

    def scan(self, table: int, page_size: int = 1000) -> Iterator[Object]:
        """Every object of the table, page by page."""
        cursor: Optional[int] = 0
        while cursor is not None:
            page = self.enumerate(table, cursor, page_size)
            yield from page.objects
            cursor = page.next_cursor

    def stats(self) -> Dict[str, Union[int, float]]:
        """The admin server's statistics by name."""
        return self._one(_ops.stats())  # type: ignore[no-any-return]

    def multi_read(self, items: Iterable[Tuple[int, Bytes]]) -> List[Union[ReadResult, ShoalError]]:
        """Reads several objects (one request per server); per item a
        ReadResult or the exception it failed with (ObjectDoesntExist...)."""
        return self._multi(p.MULTI_READ, _ops.multi_read_items(items))

    def multi_write(self, items: Iterable[Union[WriteItem, Tuple[int, Bytes, Bytes]]]) -> List[Union[int, ShoalError]]:
        """Writes several objects; per item its new version or an exception."""
        return self._multi(p.MULTI_WRITE, _ops.multi_write_items(items))

    def multi_remove(self, items: Iterable[Union[RemoveItem, Tuple[int, Bytes]]]) -> List[Union[Optional[int], ShoalError]]:
        """Removes several objects; per item the version it had (None: did
        not exist) or an exception."""
        return self._multi(p.MULTI_REMOVE, _ops.multi_remove_items(items))

    def pipeline(self) -> "Pipeline":
        """A pipeline: queue operations, then :meth:`Pipeline.execute` sends
        them all at once (one write per server) and returns their results."""
        return Pipeline(self)


class PipelineBase:
    """Queued operations. Each method returns the pipeline, for chaining."""

    def __init__(self) -> None:
        self.requests: List[Req] = []

    def __len__(self) -> int:
        return len(self.requests)

    def _add(self, req: Req) -> "PipelineBase":
        self.requests.append(req)
        return self

    def ping(self) -> "PipelineBase":
        return self._add(_ops.ping())

    def read(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> "PipelineBase":
        return self._add(_ops.read(table, key, rules))

    def write(self, table: int, key: Bytes, value: Bytes, rules: RejectRules = NO_RULES,
              ttl: Optional[float] = None) -> "PipelineBase":
        return self._add(_ops.write(table, key, value, rules, ttl))

    def ttl(self, table: int, key: Bytes) -> "PipelineBase":
        return self._add(_ops.read_ttl(table, key))

    def remove(self, table: int, key: Bytes, rules: RejectRules = NO_RULES) -> "PipelineBase":
        return self._add(_ops.remove(table, key, rules))

    def increment(self, table: int, key: Bytes, delta: int = 1, rules: RejectRules = NO_RULES) -> "PipelineBase":
        return self._add(_ops.increment(table, key, delta, rules))

    def enumerate(self, table: int, cursor: int = 0, max_count: int = 0) -> "PipelineBase":
        return self._add(_ops.enumerate_page(table, cursor, max_count))

    def table_id(self, name: Bytes) -> "PipelineBase":
        return self._add(_ops.table_id(name))

    def _take(self) -> List[Req]:
        reqs, self.requests = self.requests, []
        return reqs

    @staticmethod
    def _results(results: List[Any], raise_on_error: bool) -> List[Any]:
        if raise_on_error:
            for r in results:
                unwrap(r)
        return results


class Pipeline(PipelineBase):
    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client

    def execute(self, raise_on_error: bool = False) -> List[Any]:
        """Sends every queued operation and empties the pipeline; returns one
        result per operation, in order: its value, or the exception it
        failed with (raised instead, the first one, if ``raise_on_error``)."""
        return self._results(self.client.execute(self._take()), raise_on_error)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.requests.clear()

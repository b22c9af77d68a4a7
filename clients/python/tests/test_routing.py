"""The routing and retry plans driven by a scripted fake cluster: which
server each request goes to, when the map is refreshed, what is resent."""
from __future__ import annotations

import struct
from typing import Any, Callable, List, Tuple

from shoalkv import _ops, errors, protocol as p
from shoalkv.hashing import key_hash
from shoalkv.routing import MAX_ATTEMPTS, Refresh, Send, Sleep, TabletMap, run_multi, run_requests

A, B = ("127.0.0.1", 1), ("127.0.0.1", 2)
HALF = 1 << 63


def two_servers(first: Tuple[str, int] = A, second: Tuple[str, int] = B) -> TabletMap:
    return TabletMap([(5, 0, HALF - 1, first), (5, HALF, 2**64 - 1, second)], admin=first, version=1)


def key_on(half: int) -> bytes:
    """A key of table 5 whose hash is in the given half."""
    for i in range(1000):
        k = b"key%d" % i
        if (key_hash(5, k) >= HALF) == bool(half):
            return k
    raise AssertionError("no key found")


def drive(plan: Any, answer: Callable[[Tuple[str, int], int, bytes], Any], on_refresh: Callable[[], None]) -> Tuple[Any, List[Any]]:
    """Runs a plan; ``answer`` plays the servers. Returns the result and the
    actions the plan asked for."""
    log: List[Any] = []
    try:
        action = next(plan)
        while True:
            log.append(action)
            reply = None
            if isinstance(action, Send):
                reply = [answer(*r) for r in action.requests]
            elif isinstance(action, Refresh):
                on_refresh()
            action = plan.send(reply)
    except StopIteration as done:
        return done.value, log


def ok_write(version: int) -> Tuple[int, bytes]:
    return p.WRITE, bytes([0]) + struct.pack("<Q", version)


def test_locate_by_table_and_hash() -> None:
    m = two_servers()
    assert m.locate(5, 0) == A and m.locate(5, HALF - 1) == A
    assert m.locate(5, HALF) == B and m.locate(5, 2**64 - 1) == B
    assert m.locate(6, 0) is None
    assert m.names_table(5) and not m.names_table(6)
    single = TabletMap.single(A)
    assert single.locate(6, 123) == A and not single.names_table(6)


def test_cluster_map_json() -> None:
    m = TabletMap.from_cluster_map({
        "version": 9,
        "servers": [
            {"id": 2, "native": "127.0.0.1:2", "state": "up"},
            {"id": 1, "native": "127.0.0.1:1", "state": "down"},
            {"id": 3, "native": "[::1]:3", "state": "up"},
        ],
        "tables": [{"id": 5, "name": "t"}],
        "tablets": [
            {"table": 5, "start_hash": 0, "end_hash": 99, "master": 3},
            {"table": 5, "start_hash": 100, "end_hash": 2**64 - 1, "master": 2},
        ],
    })
    assert m.version == 9 and m.admin == ("127.0.0.1", 2) and m.tables == {"t": 5}
    assert m.locate(5, 50) == ("::1", 3) and m.locate(5, 100) == ("127.0.0.1", 2)


def test_unknown_tablet_refreshes_the_map_and_resends_to_the_new_owner() -> None:
    maps = [two_servers(A, A)]  # stale: the client thinks A owns everything
    key = key_on(1)
    sent_to = []

    def answer(addr: Tuple[str, int], opcode: int, body: bytes) -> Any:
        sent_to.append(addr)
        return (p.WRITE, bytes([11])) if addr == A else ok_write(7)

    result, log = drive(run_requests(lambda: maps[-1], [_ops.write(5, key, b"v")]), answer,
                        lambda: maps.append(two_servers()))
    assert result == [7]
    assert sent_to == [A, B]
    assert [type(a) for a in log] == [Send, Refresh, Send]


def test_retry_waits_at_most_100ms_and_resends() -> None:
    answers = [(p.READ, bytes([12]) + struct.pack("<I", 5_000_000)),
               (p.READ, bytes([0]) + struct.pack("<QI", 3, 1) + b"x")]
    result, log = drive(run_requests(two_servers, [_ops.read(5, b"k")]), lambda *_: answers.pop(0), lambda: None)
    assert result == [p.ReadResult(b"x", 3)]
    assert [a for a in log if isinstance(a, Sleep)] == [Sleep(0.1)]


def test_a_write_in_flight_on_a_broken_connection_is_not_resent_but_a_read_is() -> None:
    broken = errors.ShoalConnectionError("reset", sent=True)
    calls = []

    def answer(addr: Tuple[str, int], opcode: int, body: bytes) -> Any:
        calls.append(opcode)
        if len(calls) <= 2:
            return broken
        return p.READ, bytes([0]) + struct.pack("<QI", 1, 0)

    reqs = [_ops.write(5, b"k", b"v"), _ops.read(5, b"k")]
    result, _ = drive(run_requests(two_servers, reqs), answer, lambda: None)
    assert result[0] is broken
    assert result[1] == p.ReadResult(b"", 1)
    assert calls == [p.WRITE, p.READ, p.READ]


def test_an_unreachable_server_is_retried_then_reported_unavailable() -> None:
    never = errors.ShoalConnectionError("refused", sent=False)
    refreshes = []
    result, log = drive(run_requests(two_servers, [_ops.write(5, b"k", b"v")]), lambda *_: never,
                        lambda: refreshes.append(1))
    assert isinstance(result[0], errors.UnavailableError) and result[0].last is never
    assert sum(isinstance(a, Send) for a in log) == MAX_ATTEMPTS
    assert len(refreshes) == MAX_ATTEMPTS - 1


def test_final_statuses_are_results_not_retries() -> None:
    result, log = drive(run_requests(two_servers, [_ops.read(5, b"k")]),
                        lambda *_: (p.READ, bytes([4])), lambda: None)
    assert result == [errors.ObjectDoesntExist()] and len(log) == 1


def test_a_table_missing_from_the_map_is_looked_up_once_then_unknown() -> None:
    result, log = drive(run_requests(two_servers, [_ops.read(6, b"k")]), lambda *_: None, lambda: None)
    assert result == [errors.UnknownTable(6)]
    assert [type(a) for a in log] == [Refresh]


def test_multi_op_splits_by_server_and_resends_only_refused_items() -> None:
    k0, k1 = key_on(0), key_on(1)
    others = [b"k%d" % i for i in range(100) if key_hash(5, b"k%d" % i) < HALF]
    items = _ops.multi_write_items([(5, k0, b"a"), (5, k1, b"b"), (5, others[0], b"c")])
    first_round: List[Tuple[str, int]] = []

    def answer(addr: Tuple[str, int], opcode: int, body: bytes) -> Any:
        (n,) = struct.unpack_from("<I", body)
        recovering = addr == B and B not in first_round  # B is recovering the first time
        first_round.append(addr)
        item = bytes([12]) + struct.pack("<I", 10) if recovering else bytes([0]) + struct.pack("<Q", 2)
        return p.MULTI_WRITE, bytes([0]) + struct.pack("<I", n) + item * n

    result, log = drive(run_multi(two_servers, p.MULTI_WRITE, items, budget=1 << 20), answer, lambda: None)
    assert result == [2, 2, 2]
    sends = [[(addr, struct.unpack_from("<I", body)[0]) for addr, _, body in a.requests]
             for a in log if isinstance(a, Send)]
    assert sorted(sends[0]) == [(A, 2), (B, 1)]
    assert sends[1:] == [[(B, 1)]]
    assert Sleep(10e-6) in log


def test_multi_op_groups_respect_the_budget() -> None:
    items = _ops.multi_write_items([(5, b"k%d" % i, b"v" * 100) for i in range(10)])
    plan = run_multi(lambda: TabletMap.single(A), p.MULTI_WRITE, items, budget=300)
    action = next(plan)
    assert isinstance(action, Send)
    counts = [struct.unpack_from("<I", body)[0] for _, _, body in action.requests]
    assert sum(counts) == 10 and max(counts) == 2

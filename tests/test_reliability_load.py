"""Load: bursts complete without failures, and many requests leak neither sockets nor threads."""

from __future__ import annotations

import time

import psutil

from tests.conftest import StartServer
from tests.envelopes import max_concurrency
from tests.lab_server import LabServer, copies, get, get_many


def test_100_concurrent_async_requests(server: LabServer) -> None:
    replies = get_many(copies(f"{server.url}/async?delay=5", 100))
    assert [r.status for r in replies] == [200] * 100
    calls = [r.json()["result"]["calls"][0] for r in replies]
    assert max_concurrency([(c["started"], c["finished"]) for c in calls]) == 100  # all waited together


def test_200_concurrent_pings(server: LabServer) -> None:
    replies = get_many([f"{server.url}/ping"] * 200)
    assert [r.status for r in replies] == [200] * 200


def _footprint(pid: int) -> tuple[int, int]:
    """Open fds and threads, each the least seen over half a second.

    The GIL meter's sampling thread comes and goes (gilknocker starts one for
    each 10 ms sample, every 60 ms): a single reading may or may not catch it.
    A leak only grows, so the least of many readings still shows one.
    """
    process = psutil.Process(pid)
    readings = []
    for _ in range(50):
        readings.append((process.num_fds(), process.num_threads()))
        time.sleep(0.01)
    return min(fds for fds, _ in readings), min(threads for _, threads in readings)


def test_1000_sequential_requests_leak_nothing(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "2", "--no-access-log")
    paths = ["/ping", "/blocking?n=10", "/threading?n=10", "/processing?n=10", "/async?delay=0",
             "/blocking?n=oops", "/nope", "/stats", "/workloads", "/threading/sleep?seconds=0"]  # fmt: skip

    def burst(count: int) -> None:
        for i in range(count):
            reply = get(lab.url + paths[i % len(paths)])
            assert reply.status in (200, 400, 404)

    # Warm: both pool threads busy at once, caches filled.
    assert [r.status for r in get_many(copies(f"{lab.url}/threading/sleep?seconds=0.5", 2))] == [200, 200]
    burst(200)
    before = _footprint(lab.pid)
    burst(1000)
    after = _footprint(lab.pid)
    assert after[0] <= before[0] + 2, f"open fds grew from {before[0]} to {after[0]}"
    assert after[1] == before[1], f"threads grew from {before[1]} to {after[1]}"
    assert "tornado.access" not in lab.log()  # --no-access-log


def test_300_concurrent_async_requests_all_wait_at_the_upstream_together(server: LabServer) -> None:
    # The pooled client opens a connection whenever none is idle: none of the
    # calls may wait for another (a generous delay: 300 client threads take a
    # while to start on a busy machine).
    replies = get_many(copies(f"{server.url}/async?delay=6", 300))
    assert [r.status for r in replies] == [200] * 300
    calls = [r.json()["result"]["calls"][0] for r in replies]
    assert max_concurrency([(c["started"], c["finished"]) for c in calls]) == 300

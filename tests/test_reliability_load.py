"""Load: bursts complete without failures, and many requests leak neither sockets nor threads."""

from __future__ import annotations

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
    process = psutil.Process(pid)
    return process.num_fds(), process.num_threads()


def test_1000_sequential_requests_leak_nothing(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "2", "--no-access-log")
    paths = ["/ping", "/blocking?n=10", "/threading?n=10", "/processing?n=10", "/async?delay=0",
             "/blocking?n=oops", "/nope", "/stats", "/workloads", "/threading/sleep?seconds=0"]  # fmt: skip

    def burst(count: int) -> None:
        for i in range(count):
            reply = get(lab.url + paths[i % len(paths)])
            assert reply.status in (200, 400, 404)

    burst(200)  # warm: pools at full size, caches filled
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

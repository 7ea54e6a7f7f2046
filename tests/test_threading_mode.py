"""/threading: runs on the shared pool's threads inside the server process."""

from __future__ import annotations

from tests.builds import needs_gil
from tests.envelopes import any_overlap, assert_envelope, max_concurrency, run_intervals
from tests.lab_server import LabServer, copies, get_many, ping_while_pool_busy


def test_runs_on_pool_threads_of_the_server(server: LabServer) -> None:
    replies = get_many(copies(f"{server.url}/threading/fib?n=18", 4))
    for reply in replies:
        body = reply.json()
        assert_envelope(body, "threading", "fib")
        assert body["result"] == 2584
        assert body["worker"]["pid"] == server.pid
        assert body["worker"]["thread"].startswith("lab-thread")


def test_sleep_jobs_overlap(server: LabServer) -> None:
    replies = get_many(copies(f"{server.url}/threading/sleep?seconds=2", 4))
    intervals = run_intervals(replies)
    assert any_overlap(intervals)
    assert max_concurrency(intervals) == 4  # the default pool has cores + 4 >= 5 threads
    assert len({r.json()["worker"]["thread"] for r in replies}) == 4


def test_ping_answers_while_threads_run(server: LabServer) -> None:
    jobs, ping = ping_while_pool_busy(server.url, "threading", 3)
    assert ping.status == 200
    assert ping.received < min(j.json()["timing"]["finished"] for j in jobs)


@needs_gil
def test_gil_bound_threads_take_turns_computing(server: LabServer) -> None:
    # Four threads of a pure-Python loop, all four running at once (their intervals overlap): the GIL lets one
    # compute at a time, so the burst's wall time covers the CPU time all four used, both from the same
    # envelopes (20 ms for the clocks' grain; other load only lowers the sum). Four threads computing on two
    # cores would use up to twice the burst.
    replies = get_many(copies(f"{server.url}/threading/count?n=10000000", 4))  # long beside arrival jitter
    timings = [r.json()["timing"] for r in replies]
    assert max_concurrency(run_intervals(replies)) == 4
    burst_ms = (max(t["finished"] for t in timings) - min(t["started"] for t in timings)) * 1000
    assert sum(t["cpu_ms"] for t in timings) <= burst_ms + 20


def test_a_sleep_takes_wall_time_but_no_cpu(server: LabServer) -> None:
    # No sleep ends early, whatever the load. Its run's split: waiting on purpose, all 300 ms of it, and CPU time
    # a tenth of that at the very most (a sleeping thread uses microseconds; CPU time is only counted on a
    # core, so a busy machine cannot add to it, and a thread that spun instead would get a third of a core
    # even beside two CPU hogs).
    [reply] = get_many([f"{server.url}/threading/sleep?seconds=0.3"])
    timing = reply.json()["timing"]
    assert timing["run_ms"] >= 300 and timing["io_wait_ms"] >= 300 - 1  # (less clock grain)
    assert timing["cpu_ms"] < 0.1 * timing["io_wait_ms"]

"""/threading: runs on the shared pool's threads inside the server process."""

from __future__ import annotations

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


def test_gil_bound_threads_take_turns_computing(server: LabServer) -> None:
    # Four threads of a pure-Python loop at once: the GIL lets one compute at a
    # time, so together they computed no longer than the burst lasted (20 ms for
    # the clocks' grain; other load only lowers the sum), and each spent most of
    # its run started but not computing: overlapping four at once, each computes
    # about a quarter of its run. Measured at most 0.29 of it with 0-4 busy loops
    # beside it, against the 0.75 asserted: a run would have to compute alone for
    # most of its run, which the four runs' common start rules out.
    replies = get_many(copies(f"{server.url}/threading/count?n=10000000", 4))  # long beside arrival jitter
    timings = [r.json()["timing"] for r in replies]
    assert max_concurrency(run_intervals(replies)) == 4
    burst_ms = (max(t["finished"] for t in timings) - min(t["started"] for t in timings)) * 1000
    assert sum(t["cpu_ms"] for t in timings) <= burst_ms + 20
    assert all(t["cpu_ms"] < 0.75 * t["run_ms"] for t in timings)


def test_a_sleep_takes_wall_time_but_no_cpu(server: LabServer) -> None:
    # No sleep ends early, whatever the load; a sleeping thread uses microseconds of CPU (CPU time
    # is only counted on a core, so a busy machine cannot add to it): 30 ms is 100x that.
    [reply] = get_many([f"{server.url}/threading/sleep?seconds=0.3"])
    timing = reply.json()["timing"]
    assert timing["run_ms"] >= 300 and timing["cpu_ms"] < 30

"""Where a run's time goes: computing, waiting for a core, waiting for the GIL (timing's three-way split).

Shares, not stopwatch: each test compares parts of the same runs' own time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lab.instruments.cores import CoreMeter
from tests.lab_server import LabServer, copies, get_many
from workloads import clocks


def burst(server: LabServer, mode: str, n: int, count: int = 3_000_000) -> list[dict[str, Any]]:
    """`n` copies of a `count` run at once; each one's timing."""
    replies = get_many(copies(f"{server.url}/{mode}/count?n={count}", n))
    assert [r.status for r in replies] == [200] * n
    return [r.json()["timing"] for r in replies]


def shares(timings: list[dict[str, Any]]) -> dict[str, float]:
    """Each part's share of the runs' summed run_ms."""
    run = sum(t["run_ms"] for t in timings)
    return {part: sum(t[f"{part}_ms"] for t in timings) / run for part in ("cpu", "core_wait", "gil_wait")}


@pytest.fixture
def hogs() -> Iterator[None]:
    """Two busy-loop processes, one per core of a 2-core machine: cores, not the GIL, become scarce."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_threads_of_pure_python_wait_mostly_for_the_gil(server: LabServer) -> None:
    # Four threads share one GIL: each computes about a quarter of the time (runs long
    # enough that the requests' staggered arrival leaves them mostly overlapping).
    split = shares(burst(server, "threading", 4, count=10_000_000))
    assert split["gil_wait"] > 0.5, split
    assert split["gil_wait"] > split["core_wait"] + split["cpu"]


def test_a_process_pool_worker_waits_for_no_gil(server: LabServer) -> None:
    split = shares(burst(server, "processing", 4))
    assert split["gil_wait"] < 0.1
    # Its run was computing, or waiting for a core (how much of each depends on what else this machine
    # runs: the suite's other worker, say), and nothing else.
    assert split["cpu"] + split["core_wait"] > 0.9


@pytest.mark.usefixtures("hogs")
def test_busy_cores_are_blamed_on_the_cores_not_the_gil(server: LabServer) -> None:
    split = shares(burst(server, "processing", 4))
    assert split["core_wait"] > 0.2
    assert split["gil_wait"] < 0.1
    assert split["core_wait"] > split["gil_wait"]


def test_nothing_is_claimed_where_nothing_can_be_told(server: LabServer) -> None:
    [sleep] = get_many([f"{server.url}/threading/sleep?seconds=0.05"])
    timing = sleep.json()["timing"]
    assert timing["core_wait_ms"] is not None and timing["gil_wait_ms"] is None  # the wait is the sleep's
    [waited] = get_many([f"{server.url}/async?delay=0.01"])
    timing = waited.json()["timing"]
    assert timing["cpu_ms"] is timing["core_wait_ms"] is timing["gil_wait_ms"] is None


def test_the_split_floors_at_zero_and_needs_a_gil_and_a_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    assert clocks.split(1.0, 0.7, 0.2, waits=False) == pytest.approx(0.1)
    assert clocks.split(1.0, 1.5, 0.0, waits=False) == 0.0  # BLAS threads: process CPU above wall time
    assert clocks.split(1.0, 0.1, None, waits=False) is None  # no schedstat
    assert clocks.split(1.0, 0.1, 0.0, waits=True) is None
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert clocks.split(1.0, 0.1, 0.0, waits=False) is None


def test_the_clocks_read_the_kernels_run_queue() -> None:
    before = clocks.thread_core_wait()
    assert before is not None and before >= 0
    whole = clocks.process_core_wait()
    assert whole is not None and whole >= before  # this thread's wait is part of the process's


@pytest.mark.usefixtures("hogs")
def test_the_core_meter_reads_a_thread_queueing_for_a_core_and_not_an_idle_one() -> None:
    meter = CoreMeter()
    time.sleep(0.3)
    idle = meter.read()
    sum(range(15_000_000))  # busy beside two busy processes (on this thread: an ended one's counts go with it)
    busy = meter.read()
    assert idle is not None and busy is not None
    assert idle < 0.1 < busy


def test_stats_sum_the_runs_cpu_time_per_mode(server: LabServer) -> None:
    # What siege.sh's burst-own ideal is made of: /stats' sums, read around the burst.
    def sums() -> tuple[float, int]:
        entry = get_many([f"{server.url}/stats"])[0].json()["totals"]["requests"]["threading"]
        return entry["run_cpu_s"], entry["timed"]

    burst(server, "threading", 1)
    before = sums()
    timings = burst(server, "threading", 2)
    after = sums()
    assert after[1] - before[1] == 2
    assert after[0] - before[0] == pytest.approx(sum(t["cpu_ms"] for t in timings) / 1000, abs=0.001)


def test_the_meters_are_published_per_process(server: LabServer) -> None:
    ping = get_many([f"{server.url}/ping"])[0].json()
    assert 0 <= ping["core_wait"] <= 1
    [process] = get_many([f"{server.url}/stats"])[0].json()["processes"]
    assert 0 <= process["core_wait"] <= 1
    assert "lab_core_wait{" in get_many([f"{server.url}/metrics"])[0].body.decode()

"""The GIL meter (gilknocker in every server process): its direction, not its digits."""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab.instruments.gil import GilMeter
from lab.modes.registry import MODES
from tests.lab_server import LabServer, copies, get, sent
from workloads.clocks import gil_enabled


def readings_during(server: LabServer, path: str, threads: int = 2) -> list[float]:
    """The server's GIL contention, read from /ping every 0.25 s while `threads` copies of `path` run."""
    seen: list[float] = []
    with ThreadPoolExecutor(threads) as pool:
        jobs = [sent(url, pool) for url in copies(f"{server.url}{path}", threads)]
        time.sleep(0.3)  # past the reading that covers the time before they started
        while not all(job.done() for job in jobs):
            gil = get(f"{server.url}/ping").json()["gil"]
            if gil is not None:
                seen.append(gil)
            time.sleep(0.25)
        assert all(job.result().status == 200 for job in jobs)
    return seen


def test_gil_bound_threads_read_high_and_numpy_threads_low(server: LabServer) -> None:
    counting = readings_during(server, "/threading/count?n=40000000")
    multiplying = readings_during(server, "/threading/matmul?n=1000&repeat=40")
    assert len(counting) >= 3 and len(multiplying) >= 3, (counting, multiplying)
    # The direction, with a margin noise cannot fake: while a thread of the loop holds the GIL, the
    # meter's probe waits the switch interval for it every time it asks (more load only makes it
    # wait longer), while BLAS lets it in at once. Medians measured 0.69-0.80 against 0.001-0.003
    # with 0-4 busy loops beside it: a gap twice the 0.3 asserted.
    assert statistics.median(counting) > statistics.median(multiplying) + 0.3, (counting, multiplying)


def test_without_a_gil_nothing_is_measured_and_threads_compute_in_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    # A free-threaded build cannot be installed here: pretend to be one.
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert gil_enabled() is False
    meter = GilMeter()
    meter.start()
    try:
        assert meter.read() is None
        # An extension that is not free-threading-safe turns the GIL back on: the meter starts reading.
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
        assert meter.read() is not None
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
        assert meter.read() is None
    finally:
        meter.stop()
    facts = {"cpu_count": 2, "processes": 1, "thread_pool": 6, "process_pool": 2, "gil_enabled": False,
             "releases_gil": {"count": False}, "waits": {"count": False}}  # fmt: skip
    threading = MODES["threading"].capacity(facts, "count")
    assert threading.lanes == 2 and "no GIL" in threading.because
    assert MODES["threading"].capacity({**facts, "gil_enabled": True}, "count").lanes == 1

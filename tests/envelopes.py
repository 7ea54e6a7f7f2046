"""Reading response envelopes: intervals, overlap, shape."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.lab_server import Reply
from workloads.clocks import gil_enabled

Interval = tuple[float, float]


def run_intervals(replies: list[Reply]) -> list[Interval]:
    """(started, finished) of each run, in start order."""
    return sorted((r.json()["timing"]["started"], r.json()["timing"]["finished"]) for r in replies)


def any_overlap(intervals: list[Interval]) -> bool:
    ordered = sorted(intervals)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def max_concurrency(intervals: list[Interval]) -> int:
    """The most runs in progress at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals], key=lambda e: (e[0], e[1]))
    best = running = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def assert_envelope(body: dict[str, Any], mode: str, workload: str) -> None:
    assert body["mode"] == mode
    assert body["workload"] == workload
    assert set(body) >= {"params", "result", "server", "worker", "timing"}
    assert set(body["server"]) == {"pid", "task_id"}
    # A cluster worker also has an address (tcp://host:port): where it ran, machine included; a
    # sub-interpreter its interpreter's id.
    extra = {"distributed": {"address"}, "interpreters": {"interpreter"}}.get(mode, set())
    assert set(body["worker"]) == {"pid", "thread"} | extra
    timing = body["timing"]
    assert set(timing) == {
        "received", "started", "finished", "queued_ms", "run_ms", "cpu_ms", "core_wait_ms", "io_wait_ms", "blocked_ms",
        "gil_wait_ms", "total_ms"
    }  # fmt: skip
    assert timing["received"] <= timing["started"] <= timing["finished"]
    assert timing["queued_ms"] >= 0 and timing["run_ms"] >= 0
    assert timing["total_ms"] >= timing["run_ms"]
    upstream = mode == "async" and workload == "upstream"  # a call that only waited: nothing computed for it
    if upstream:
        assert timing["cpu_ms"] is None
    else:  # CPU time is never more than the wall time it was spent in (one thread), give or take clock grain
        assert 0 <= timing["cpu_ms"] <= timing["run_ms"] + 5
    # The split of the run: a wait is never negative; blocked is what computing, waiting for a core and
    # waiting on purpose left of the run (never below 0), measured wherever they are; the GIL's wait is a
    # part of it, where told. A wait on purpose is measured wherever the run waited (0 if it did not).
    assert timing["io_wait_ms"] is not None and 0 <= timing["io_wait_ms"] <= timing["run_ms"]
    if timing["core_wait_ms"] is not None:
        assert timing["core_wait_ms"] >= 0
        assert timing["blocked_ms"] == _rest(timing)
    else:
        assert timing["blocked_ms"] is None
    if timing["gil_wait_ms"] is not None:
        assert 0 <= timing["gil_wait_ms"] <= timing["blocked_ms"]
    # Where a run's GIL is its own nobody else took it: its blocked time was something else.
    if mode in OWN_GIL and timing["blocked_ms"] is not None:
        assert timing["gil_wait_ms"] == (0 if gil_enabled() else None)  # no GIL at all: null, not 0
    if upstream:  # all of it a wait on purpose, timed around the calls
        assert timing["core_wait_ms"] is timing["blocked_ms"] is timing["gil_wait_ms"] is None
        assert timing["io_wait_ms"] == pytest.approx(timing["run_ms"], abs=0.002)


# Modes whose runs are alone with their GIL: a process-pool worker (one job at a time) and a sub-interpreter.
OWN_GIL = {"processing", "interpreters"}


def _rest(timing: dict[str, Any]) -> Any:
    """run_ms less cpu_ms, core_wait_ms and io_wait_ms, floored at 0, within the envelope's rounding (3 decimals)."""
    rest = timing["run_ms"] - timing["cpu_ms"] - timing["core_wait_ms"] - timing["io_wait_ms"]
    return pytest.approx(max(0.0, rest), abs=0.003)


def assert_error(reply: Reply, status: int, *fragments: str) -> None:
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert set(body) == {"error"}
    assert body["error"]["status"] == status
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    for fragment in fragments:
        assert fragment in body["error"]["message"]
    assert "Traceback" not in reply.body.decode()

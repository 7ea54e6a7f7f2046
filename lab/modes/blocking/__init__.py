"""The blocking mode: a run on the event loop itself (its runner: runner.py)."""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, each_process, on_cores, processes


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    return Capacity(
        on_cores(processes(facts), facts, workload), f"the event loop runs one request at a time{each_process(facts)}"
    )


MODE = Mode(
    "blocking",
    "runs the work on the event loop itself: requests are served one after another, "
    "and not even /ping is answered meanwhile.",
    "event loop",
    capacity,
    runner="lab.modes.blocking.runner.BlockingRunner",
    summary="on the event loop",
)

"""The blocking mode: a run on the event loop itself (its runner: runner.py)."""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory, each_process, on_cores, processes


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    return Capacity(
        on_cores(processes(facts), facts, workload), f"the event loop runs one request at a time{each_process(facts)}"
    )


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.blocking.runner import BlockingRunner  # noqa: PLC0415

    return BlockingRunner


MODE = Mode(
    "blocking",
    "runs the work on the event loop itself: requests are served one after another, "
    "and not even /ping is answered meanwhile.",
    "event loop",
    capacity,
    runner=runner,
    summary="on the event loop",
)

"""The processing mode: a run in the server's process pool (runner.py; what its workers run: worker.py)."""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory, cores, on_cores, plural, processes, waits


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    lanes = on_cores(processes(facts) * int(facts["process_pool"]), facts, workload)
    if waits(facts, workload):
        return Capacity(lanes, f"{plural(lanes, 'worker process')} can wait at once")
    return Capacity(lanes, f"{plural(lanes, 'worker process')} can compute at once on {plural(cores(facts), 'core')}")


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.processing.runner import ProcessRunner  # noqa: PLC0415

    return ProcessRunner


MODE = Mode(
    "processing",
    "hands it to a pool of worker processes, each with its own interpreter and its own GIL, "
    "so CPU work runs on every core.",
    "processes",
    capacity,
    runner=runner,
    summary="in a process pool",
)

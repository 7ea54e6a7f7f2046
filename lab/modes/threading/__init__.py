"""The threading mode: a run in the server's thread pool (its runner: runner.py)."""

from __future__ import annotations

from lab.modes.contract import (
    Capacity,
    Facts,
    Mode,
    RunnerFactory,
    cores,
    each_process,
    gil_enabled,
    on_cores,
    plural,
    processes,
    releases_gil,
    waits,
)


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    pool = int(facts["thread_pool"])
    if not releases_gil(facts, workload):
        return Capacity(
            on_cores(processes(facts), facts, workload),
            f"{workload} holds the GIL, so however many threads there are, it runs one request at a time"
            + each_process(facts),
        )
    lanes = on_cores(processes(facts) * pool, facts, workload)
    limits = plural(pool, "thread") + ("" if waits(facts, workload) else f", {plural(cores(facts), 'core')}")
    reason = f"{workload} releases the GIL" if gil_enabled(facts) else "this interpreter runs with no GIL"
    return Capacity(lanes, f"{reason}, so {plural(lanes, 'request')} can run at once ({limits})")


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.threading.runner import ThreadRunner  # noqa: PLC0415

    return ThreadRunner


MODE = Mode(
    "threading",
    "hands it to a pool of threads. The loop stays free, but pure-Python code holds the GIL: "
    "only one thread computes at a time.",
    "threads",
    capacity,
    runner=runner,
    summary="in a thread pool",
)

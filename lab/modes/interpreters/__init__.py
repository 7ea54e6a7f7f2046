"""The interpreters mode: a run in a pool of sub-interpreters (runner.py; what each runs: worker.py)."""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory, cores, on_cores, plural, processes, waits


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    lanes = on_cores(processes(facts) * int(facts["interpreter_pool"]), facts, workload)
    if waits(facts, workload):
        return Capacity(lanes, f"{plural(lanes, 'sub-interpreter')} can wait at once")
    return Capacity(
        lanes,
        f"{plural(lanes, 'sub-interpreter')}, each with its own GIL, can compute at once "
        f"on {plural(cores(facts), 'core')}",
    )


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.interpreters.runner import InterpreterRunner  # noqa: PLC0415

    return InterpreterRunner


MODE = Mode(
    "interpreters",
    "hands it to a pool of sub-interpreters inside the server process, each with its own GIL "
    "(PEP 684, PEP 734): pure-Python code runs on every core in one process. Extension modules "
    "that do not support them yet, numpy among them, cannot be loaded there.",
    "interpreters",
    capacity,
    runner=runner,
    summary="in a pool of sub-interpreters",
    cannot_load=("numpy", "scikit-learn"),
    cannot_load_because="which cannot be imported in a sub-interpreter (numpy does not support "
    "per-interpreter GILs yet: numpy issue 24755); run it in /threading or /processing",
)

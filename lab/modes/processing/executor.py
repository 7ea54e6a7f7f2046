"""The adapter to ProcessPoolExecutor's private parts: its worker processes, and whether it is broken.

The processing mode must kill one stuck worker (--job-timeout) and show the
workers' pids in /stats; concurrent.futures offers neither publicly before
Python 3.14 (`terminate_workers()`, `kill_workers()`). Every private name
the lab reads of the executor is read here and nowhere else, checked against
the Pythons below; tests/test_adapters.py fails if a release moves them.
"""

from __future__ import annotations

import multiprocessing.process
from concurrent.futures import ProcessPoolExecutor

# The CPython versions whose concurrent/futures/process.py these names were read from.
CHECKED_AGAINST = ("3.11", "3.12", "3.13")
# ProcessPoolExecutor's attributes read here: pid -> Process of each live worker; set once a worker died.
PRIVATE = ("_processes", "_broken")


def workers(executor: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    """The executor's worker processes now (none before the first job spawns them)."""
    processes: dict[int, multiprocessing.process.BaseProcess] = getattr(executor, "_processes", None) or {}
    return list(processes.values())


def broken(executor: ProcessPoolExecutor) -> bool:
    """True once a worker died and the executor refuses new work (BrokenProcessPool)."""
    return bool(getattr(executor, "_broken", False))

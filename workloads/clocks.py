"""Where a run's time went, from the kernel's own accounting (Linux schedstat).

A thread that has started a run is, at each moment, on a core (its CPU time),
runnable with no core free (the run queue: `core_wait`), or blocked. Linux
counts the first two per thread in /proc/<pid>/task/<tid>/schedstat: time on
a CPU, then time waiting in the run queue, both in nanoseconds. For a thread
running pure-Python code the blocked rest is the GIL; for a workload that
waits (sleep) it is the wait itself, so no GIL share is claimed for those.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

THREAD_SCHEDSTAT = "/proc/thread-self/schedstat"
TASKS = "/proc/self/task"


def gil_enabled() -> bool:
    """False on a free-threaded interpreter running without its GIL (Python 3.13t and later).

    Asked each time, not once: importing a C extension that is not marked
    free-threading-safe turns the GIL back on while the process runs.
    """
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def _schedstat(path: str) -> tuple[float, float] | None:
    """Seconds the task at `path` has spent on a CPU and waiting in the run queue; None without schedstat."""
    try:
        with open(path, "rb") as f:
            on_cpu, run_queue = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(run_queue) / 1e9
    except (OSError, ValueError):
        return None


def thread_core_wait() -> float | None:
    """Run-queue seconds of the calling thread so far."""
    stat = _schedstat(THREAD_SCHEDSTAT)
    return None if stat is None else stat[1]


def threads_schedstat() -> dict[str, tuple[float, float]] | None:
    """On-CPU and run-queue seconds so far of each of this process's live threads, by thread id."""
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return None
    # A thread may end between listing and reading: it is left out.
    stats = {tid: stat for tid in tids if (stat := _schedstat(f"{TASKS}/{tid}/schedstat")) is not None}
    return stats or None


def process_core_wait() -> float | None:
    """Run-queue seconds of all this process's live threads so far (BLAS threads included)."""
    stats = threads_schedstat()
    return None if stats is None else sum(waited for _, waited in stats.values())


@dataclass(frozen=True)
class Clocks:
    """The CPU and run-queue clocks of whatever runs a job: one thread, or a whole process."""

    cpu: Callable[[], float]
    core_wait: Callable[[], float | None]


THREAD = Clocks(time.thread_time, thread_core_wait)
# A process that runs one job at a time: its CPU and run-queue time are the job's.
PROCESS = Clocks(time.process_time, process_core_wait)


def split(run: float, cpu: float, core_wait: float | None, *, waits: bool) -> float | None:
    """The GIL's share of `run`: what was neither computing nor waiting for a core.

    None where it cannot be told: no schedstat, no GIL, or a workload whose
    blocked time is its own wait.
    """
    if core_wait is None or waits or not gil_enabled():
        return None
    return max(0.0, run - cpu - core_wait)

"""How a run is timed where it runs: the record every mode sends back.

Kept apart from the registry, and free of numpy, because a sub-interpreter
(the interpreters mode) imports it to time the pure-Python workloads it can
run, and numpy cannot be imported there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from workloads.clocks import THREAD, Clocks, blocked_time, gil_part


class RunRecord(TypedDict):
    """What one run reports back from wherever it ran (pickled out of pool workers and interpreters)."""

    result: Any
    pid: int
    thread: str
    started: float
    finished: float
    # CPU seconds the run took where it ran (its thread's, or its process's); None where nothing ran.
    cpu: float | None
    # Seconds it was runnable but had no core (schedstat's run queue); None where not measured.
    core_wait: float | None
    # Seconds it was neither computing nor waiting for a core: blocked, on whatever blocked it
    # (the GIL, a lock, its own wait, the host); None where not measured (workloads/clocks.py).
    blocked: float | None
    # The part of `blocked` that was the GIL: all of it on a thread that shares its GIL, 0 on one
    # alone with its own; None where that cannot be told (no GIL, a workload that waits, no reading).
    gil_wait: float | None
    # A cluster worker's address (tcp://host:port) where the run had one (distributed mode).
    address: NotRequired[str]
    # The sub-interpreter's id where the run had one (interpreters mode).
    interpreter: NotRequired[int]


def time_call(func: Callable[..., Any], params: dict[str, Any], *, waits: bool, clocks: Clocks = THREAD) -> RunRecord:
    """Call `func(**params)`, timing it here, where it runs: wall, CPU and run-queue time.

    The rest of the wall time the run was blocked; for pure-Python code on a
    thread that shares its GIL that is the GIL (workloads/clocks.py). The
    clocks are the thread's by default (threads share their process and its
    GIL); a process that runs one job at a time passes PROCESS, so that BLAS
    threads count too, and a sub-interpreter OWN_GIL_THREAD.
    """
    queued = clocks.core_wait()
    cpu = clocks.cpu()
    started = time.time()
    result = func(**params)
    finished = time.time()
    cpu = clocks.cpu() - cpu
    after = clocks.core_wait()
    core_wait = None if queued is None or after is None else max(0.0, after - queued)
    blocked = blocked_time(finished - started, cpu, core_wait)
    return {
        "result": result,
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "started": started,
        "finished": finished,
        "cpu": cpu,
        "core_wait": core_wait,
        "blocked": blocked,
        "gil_wait": gil_part(blocked, waits=waits, shared_gil=clocks.shared_gil),
    }


def waited(result: Any, started: float) -> RunRecord:
    """The record of a call that only waited, on this thread: nothing computed on anyone's behalf."""
    return {
        "result": result,
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "started": started,
        "finished": time.time(),
        "cpu": None,
        "core_wait": None,
        "blocked": None,
        "gil_wait": None,
    }

"""How a run is timed where it runs: the record every mode sends back.

Kept apart from the registry, and free of numpy, because a sub-interpreter
(the interpreters mode) imports it to time the pure-Python workloads it can
run, and numpy cannot be imported there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, NotRequired, TypedDict

from workloads.clocks import THREAD, Clocks, blocked_time, gil_enabled, gil_part
from workloads.steps import Steps
from workloads.waits import counting


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
    # Seconds it waited on purpose (a sleep, a query's answer), timed where it waited (workloads/waits.py):
    # 0.0 for a run that waits for nothing; None where not measured.
    io_wait: float | None
    # Seconds it was neither computing, nor waiting for a core, nor waiting on purpose: blocked, on
    # whatever blocked it (the GIL, a lock, the host); None where not measured (workloads/clocks.py).
    blocked: float | None
    # The part of `blocked` that was the GIL: all of it on a thread that shares its GIL, 0 on one
    # alone with its own; None where that cannot be told (no GIL, no reading).
    gil_wait: float | None
    # A cluster worker's address (tcp://host:port) where the run had one (distributed mode).
    address: NotRequired[str]
    # The sub-interpreter's id where the run had one (interpreters mode).
    interpreter: NotRequired[int]


def time_call(func: Callable[..., Any], params: dict[str, Any], *, clocks: Clocks = THREAD) -> RunRecord:
    """Call `func(**params)`, timing it here, where it runs: wall, CPU, run-queue time and its own waits.

    Its waits on purpose (workloads/waits.py) are timed where they happen;
    the rest of the wall time the run was blocked; for pure-Python code on a
    thread that shares its GIL that is the GIL (workloads/clocks.py). The
    clocks are the thread's by default (threads share their process and its
    GIL); a process that runs one job at a time passes PROCESS, so that BLAS
    threads count too, and a sub-interpreter OWN_GIL_THREAD.
    """
    queued = clocks.core_wait()
    cpu = clocks.cpu()
    started = time.time()
    with counting() as waits:
        result = func(**params)
    finished = time.time()
    cpu = clocks.cpu() - cpu
    after = clocks.core_wait()
    core_wait = None if queued is None or after is None else max(0.0, after - queued)
    blocked = blocked_time(finished - started, cpu, core_wait, waits.total)
    gil_wait = gil_part(blocked, clocks.shared_gil)
    return _record(
        result,
        started,
        finished,
        cpu=cpu,
        core_wait=core_wait,
        io_wait=waits.total,
        blocked=blocked,
        gil_wait=gil_wait,
        thread=clocks.thread_name(),
    )


async def time_await(func: Callable[..., Coroutine[Any, Any, Any]], params: dict[str, Any]) -> RunRecord:
    """Await `func(**params)` on this event loop, timing its own steps (workloads/steps.py) and its waits.

    Many runs take turns on the loop's one thread: a run's CPU and run-queue
    time are those of its own steps, and what the thread did between them
    was other runs' (or the loop's). Its blocked time is then the time it
    was ready but the loop ran others, plus any blocked inside its steps:
    that part, where nothing but the GIL stops a step of Python code, is its
    GIL wait.
    """
    steps = Steps()
    started = time.time()
    with counting(steps.own) as waits:
        result = await steps.drive(func(**params))
    finished = time.time()
    core_wait = steps.core_wait
    blocked = blocked_time(finished - started, steps.cpu, core_wait, waits.total)
    in_steps = None if core_wait is None else max(0.0, steps.wall - steps.cpu - core_wait)
    gil = None if blocked is None or in_steps is None or not gil_enabled() else min(blocked, in_steps)
    return _record(
        result,
        started,
        finished,
        cpu=steps.cpu,
        core_wait=core_wait,
        io_wait=waits.total,
        blocked=blocked,
        gil_wait=gil,
    )


def _record(
    result: Any,
    started: float,
    finished: float,
    *,
    cpu: float | None,
    core_wait: float | None,
    io_wait: float,
    blocked: float | None,
    gil_wait: float | None,
    thread: str | None = None,
) -> RunRecord:
    """The record of a run on this process and thread (`thread`: its name, by default threading's), built here
    for every kind of run."""
    return {
        "result": result,
        # (Asked each time, not kept: a server that forks in C, as uWSGI's master forks its workers, runs
        # none of Python's at-fork hooks, and a kept pid would be its master's in every worker.)
        "pid": os.getpid(),
        "thread": threading.current_thread().name if thread is None else thread,
        "started": started,
        "finished": finished,
        "cpu": cpu,
        "core_wait": core_wait,
        "io_wait": io_wait,
        "blocked": blocked,
        "gil_wait": None if blocked is None else gil_wait,
    }


def waited(result: Any, started: float) -> RunRecord:
    """The record of a call that only waited, on this thread: all of its time a wait, nothing computed for it."""
    finished = time.time()
    return _record(
        result, started, finished, cpu=None, core_wait=None, io_wait=finished - started, blocked=None, gil_wait=None
    )

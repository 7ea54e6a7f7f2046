"""Time a workload waits on purpose (a sleep, a query's answer), timed where it waits.

A workload wraps each of its own waits in `waiting()`; the run's timer
(workloads/timing.py) opens a `Waits` around the run and reads its total
into the record as `io_wait`, so that the wait is not counted as blocked.
The total lives in a context variable: it belongs to whatever runs the
workload, a thread (of a pool, a process-pool worker, a sub-interpreter, a
Dask worker) or a task on an event loop, where many runs interleave on one
thread and each keeps its own. Called outside a timed run, `waiting()`
times nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from workloads.clocks import thread_core_wait


def thread_own() -> float:
    """Seconds this thread has computed and queued for a core so far (its CPU clock and its run queue)."""
    return time.thread_time() + (thread_core_wait() or 0.0)


@dataclass
class Waits:
    """The waits of one run so far, and how to read the waiting thread's own time (computing, queueing)."""

    # Seconds the run has used so far of the thread that waits: CPU plus run queue. What of a wait's
    # wall time was this, the run was not waiting for: taken out of the wait. The thread's, even in a
    # process-pool worker whose run is timed by the process's clocks: its other threads' time (the
    # parent watcher's wake-ups) was not the wait's.
    own: Callable[[], float] = thread_own
    total: float = 0.0


_CURRENT: ContextVar[Waits | None] = ContextVar("lab_waits", default=None)


class counting:
    """The waits of the run that happens inside this block (workloads/timing.py opens it).

    A class rather than a generator under @contextmanager: it is opened around
    every timed run, and a generator's frame and its context manager cost
    several times the few attribute sets it does.
    """

    __slots__ = ("_token", "waits")

    def __init__(self, own: Callable[[], float] = thread_own) -> None:
        self.waits = Waits(own)

    def __enter__(self) -> Waits:
        self._token = _CURRENT.set(self.waits)
        return self.waits

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


@contextmanager
def waiting(expected: float | None = None) -> Iterator[None]:
    """Count the block as waiting on purpose: a sleep that ends, the seconds it asked for; any other wait, its
    wall time less what of it the run spent computing or queueing.

    `expected`: how long the wait was asked to last (a sleep's seconds). A
    sleep that ends has lasted at least that (the kernel never wakes one
    early), so it counts exactly that: time beyond it, such as a thread
    getting its GIL back after the wake-up, is not on purpose and stays
    blocked. Only a wait cut short (an exception, a cancelled await) or one
    with no length asked (a query) is counted by subtracting the run's own
    time inside it.
    """
    waits = _CURRENT.get()
    if waits is None:
        yield
        return
    # The thread's own time is read inside the wall clock's interval, never past it: read after the wall
    # clock at the end, a preemption between the two reads was taken out of the wait without having been in
    # it (a 20 ms sleep under load read 19.1 ms).
    start, own = time.perf_counter(), waits.own()
    ended = False
    try:
        yield
        ended = True
    finally:
        ran = waits.own() - own
        wall = time.perf_counter() - start
        if ended and expected is not None and wall >= expected:
            # Not wall less `ran`: under load, this kernel's run-queue count of a thread (schedstat, Linux
            # 6.18) sometimes grows by milliseconds across a sleep it spent asleep (a 30 ms sleep in a /threading
            # mix read 21.3-28.8 in about 1 run in 80 beside three busy loops: docs/instruments.md). The
            # sleep's own length is known.
            waits.total += expected
        else:
            waited = max(0.0, wall - ran)
            waits.total += waited if expected is None else min(waited, expected)


def sleep(seconds: float) -> None:
    """time.sleep, counted as waiting on purpose."""
    with waiting(seconds):
        time.sleep(seconds)


async def asleep(seconds: float) -> None:
    """asyncio.sleep, counted as waiting on purpose."""
    with waiting(seconds):
        await asyncio.sleep(seconds)

"""A coroutine's own time on an event loop: each of its steps timed, the time between them left out.

On an event loop many coroutines take turns on one thread, so the thread's
clocks read around a whole run would count every other run's work too. A
coroutine runs in steps: from a resumption to its next suspension (an
`await` that has to wait), nothing else runs on the thread. `Steps.drive`
awaits a coroutine by stepping it itself, as `await` would, and reads the
thread's CPU, run-queue and wall clocks around each step.
"""

from __future__ import annotations

import time
import types
from collections.abc import Coroutine, Generator
from typing import Any

from workloads.clocks import thread_core_wait


class Steps:
    """The summed CPU, run-queue and wall time of one coroutine's steps on this thread."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.core_wait: float | None = 0.0  # None once schedstat cannot be read
        self.wall = 0.0
        self._step: tuple[float, float | None, float] | None = None  # the clocks when the step in progress began

    def own(self) -> float:
        """CPU and run-queue seconds of its steps so far, the one in progress included."""
        cpu, core_wait = self.cpu, self.core_wait or 0.0
        if self._step is not None:
            began_cpu, began_queued, _ = self._step
            cpu += time.thread_time() - began_cpu
            queued = thread_core_wait()
            if began_queued is not None and queued is not None:
                core_wait += queued - began_queued
        return cpu + core_wait

    def _begin(self) -> None:
        self._step = (time.thread_time(), thread_core_wait(), time.perf_counter())

    def _end(self) -> None:
        if self._step is None:
            return
        began_cpu, began_queued, began = self._step
        self._step = None
        self.cpu += time.thread_time() - began_cpu
        self.wall += time.perf_counter() - began
        queued = thread_core_wait()
        if self.core_wait is not None and began_queued is not None and queued is not None:
            self.core_wait += max(0.0, queued - began_queued)
        else:
            self.core_wait = None

    @types.coroutine
    def drive(self, coro: Coroutine[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """Await `coro`, timing each of its steps: what it yields goes to the loop, what the loop sends goes back."""
        value: Any = None
        error: BaseException | None = None
        while True:
            self._begin()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self._end()
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as caught:  # a cancellation: thrown into the coroutine it drives
                value, error = None, caught

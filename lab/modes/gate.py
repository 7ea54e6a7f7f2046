"""The pools' admission gate: a FIFO of jobs waiting for room in front of an executor (lab/modes/pool.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class Slots:
    """A FIFO gate in front of an executor: `size` jobs are handed to it, the others wait in order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.idle = asyncio.Event()  # no job holds or waits for a slot
        self.idle.set()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        self.idle.clear()
        if self.busy < self.size and not self._waiters:
            self.busy += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot straight to us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            else:
                # release() or resize() may have dropped it already, cancelled, on their way to the next waiter.
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                self._update_idle()
            raise

    def release(self) -> None:
        if self.busy <= self.size:  # (more may run than `size` allows just after a resize down)
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.busy -= 1
        self._update_idle()

    def resize(self, size: int) -> None:
        """A new size (a cluster that gained or lost workers): waiters take any room it makes."""
        self.size = size
        while self.busy < self.size and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.busy += 1
                waiter.set_result(None)

    def _update_idle(self) -> None:
        if not self.busy and not self._waiters:
            self.idle.set()

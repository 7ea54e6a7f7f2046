"""The core meter: the share of a window in which this process had a thread waiting for a core, 0-1.

The GIL meter (lab/instruments/gil.py) cannot tell waiting for the GIL from waiting for a
core: a thread holding the GIL that the kernel takes off its core makes every
other thread wait too. Read beside it, over the same window, this meter tells
the two apart. It sums the run-queue time of the process's threads (the
kernel's own schedstat counters, thread by thread) over the window's wall
time, capped at 1: about 0 while cores are free, near 1 while the process's
threads queue for cores other processes hold.

Not the run-queue share of the threads' runnable time: an idle server's
threads run microseconds at a time, and the kernel's wake-up latency alone
made that read about 0.3 on an idle host.
"""

from __future__ import annotations

import time

from workloads.clocks import threads_schedstat


class CoreMeter:
    """Run-queue time of this process's threads per second of wall time, since the last read."""

    def __init__(self) -> None:
        self._last = threads_schedstat() or {}
        self._at = time.monotonic()

    def read(self) -> float | None:
        """The share since the last read, 0-1; None without schedstat."""
        now, at = threads_schedstat(), time.monotonic()
        if now is None:
            return None
        last, self._last = self._last, now
        window, self._at = at - self._at, at
        # A thread born in the window counts from zero; one that ended in it is lost (the
        # GIL meter's sampling threads come and go, each a few milliseconds).
        waited = sum(wait - last.get(tid, (0.0, 0.0))[1] for tid, (_, wait) in now.items())
        if window <= 0:
            return 0.0
        return round(min(1.0, max(0.0, waited / window)), 3)

"""The GIL meter: how contended this process's GIL is, 0-1 (whether there is a GIL at all: workloads/clocks.py).

gilknocker runs a thread of its own, which starts a sampling thread (a new OS
thread for each sample) that, for a few milliseconds at a time, keeps asking
for the GIL and times how long each ask waits: the share of its
sampling time spent waiting is the contention: near 1 while threads take
turns on pure-Python code, near 0 while they run code that releases the GIL
(numpy's matmul) or nothing runs at all.

The meter costs little because it samples: SAMPLE_US of asking every
millisecond, then a pause of PAUSE_US. Each reading covers the time since the
previous one (the server reads it every 200 ms, lab/serve/services.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.clocks import gil_enabled

if TYPE_CHECKING:
    from gilknocker import KnockKnock
try:
    import gilknocker
except ImportError:  # no wheel for free-threaded 3.13; with no GIL there is nothing to meter anyway
    gilknocker = None

POLL_US = 1_000  # how often the meter's thread asks for the GIL while it samples
SAMPLE_US = 10_000  # how long it samples at a time
PAUSE_US = 50_000  # how long it rests between samples


class GilMeter:
    """GIL contention in this process, read (and restarted) as often as the caller likes."""

    def __init__(self) -> None:
        self._knocker: KnockKnock | None = None
        self._wanted = False

    def start(self) -> None:
        self._wanted = True
        self._follow_the_gil()

    def _follow_the_gil(self) -> None:
        # Without a GIL there is nothing to contend for; on a free-threaded
        # build an extension that is not marked safe turns it back on while
        # the process runs, so each reading asks again.
        if not self._wanted:
            return
        enabled = gil_enabled()
        if enabled and self._knocker is None and gilknocker is not None:
            self._knocker = gilknocker.KnockKnock(POLL_US, SAMPLE_US, PAUSE_US)
            self._knocker.start()
        elif not enabled and self._knocker is not None:
            self._knocker.stop()
            self._knocker = None

    def read(self) -> float | None:
        """Contention since the last read, 0-1; None when not measured (no GIL now, no gilknocker, or not started)."""
        self._follow_the_gil()
        if self._knocker is None:
            return None
        value = float(self._knocker.contention_metric)
        self._knocker.reset_contention_metric()
        return round(min(1.0, max(0.0, value)), 3)

    def stop(self) -> None:
        self._wanted = False
        if self._knocker is not None:
            self._knocker.stop()
            self._knocker = None

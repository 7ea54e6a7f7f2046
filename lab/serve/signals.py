"""SIGTERM and SIGINT in a server process, from the start of start-up to the last request: what they have asked.

A stop signal must never kill a server process where it stands: in start-up
(binding, starting the upstream, forking) that would leave the embedded
upstream running or end a child with -15 instead of a clean stop. So from
the first moment the signals are noted (`defer`), and once the event loop
runs it listens for them itself (`listen`); serve() reads what was asked,
whenever it was asked, from the one object.

    NOTHING  serving
    STOP     SIGTERM, or a first Ctrl-C: stop; in-flight requests get the grace period
    HURRY    a second Ctrl-C: stop waiting for them
"""

from __future__ import annotations

import asyncio
import enum
import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Asked(enum.IntEnum):
    """What the stop signals received so far ask of this process (each step includes the one before)."""

    NOTHING = 0
    STOP = 1
    HURRY = 2


class StopSignals:
    """The stop signals one process receives, noted before its event loop runs and heard by the loop after."""

    def __init__(self) -> None:
        self.asked = Asked.NOTHING
        self._interrupts = 0
        self._changed = asyncio.Event()  # (bound to no loop until awaited: safe to make before a fork)

    def defer(self) -> None:
        """Until the event loop listens: note SIGTERM/SIGINT instead of dying of them."""

        def note(signum: int, frame: FrameType | None) -> None:
            self.receive(signum)

        for sig in STOP_SIGNALS:
            signal.signal(sig, note)

    def listen(self) -> None:
        """From now on the running event loop hears them (anything noted before still stands)."""
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.receive, sig)

    def receive(self, signum: int) -> None:
        # Ctrl-C reaches every process in the terminal's group and a forked
        # parent forwards a SIGTERM too, so one keypress can arrive twice:
        # only a second SIGINT means "stop waiting for in-flight work".
        self._interrupts += signum == signal.SIGINT
        self._advance(Asked.HURRY if self._interrupts > 1 else Asked.STOP)

    def _advance(self, asked: Asked) -> None:
        if asked > self.asked:
            self.asked = asked
            self._changed.set()
            self._changed = asyncio.Event()

    async def until(self, asked: Asked) -> None:
        """Return once the signals have asked for `asked` (at once if they have already)."""
        while self.asked < asked:
            await self._changed.wait()

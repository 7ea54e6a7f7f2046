"""A thread that does one thing every so often while a `with` block runs: the bench's samplers and watchers."""

from __future__ import annotations

import threading
from typing import Self


class Ticker:
    """Calls `tick()` every `every` seconds in a daemon thread, from entering a `with` until leaving it.

    `begin()` runs first, on that thread, before the first wait. Leaving the
    block waits for a tick under way, so what the ticks wrote is whole when
    the caller reads it.
    """

    def __init__(self, name: str, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def begin(self) -> None:
        """What to do once, when the thread starts (nothing by default)."""

    def tick(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        self.begin()
        while not self._stop.wait(self.every):
            self.tick()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

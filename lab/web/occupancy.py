"""What one server process holds, in units of its capacity: what the fair and dispatch accept policies read.

lab/serve/accept/ says how each policy uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

# A connection that has sent no request after this long stops holding its
# child (browsers open connections they may never use).
ACCEPT_GRACE_S = 0.5
# Float sums of 1/lanes: "full" means within this of 1.
_EPSILON = 1e-9


class Occupancy:
    """What one server process holds, in units of its capacity (1.0 is full).

    A new connection holds a whole unit (`hold`, keyed by its stream); once a
    handler knows its mode and workload, the request takes its share instead
    (`move`, keyed by the request) until it ends (`release`). Whoever acts on
    it (the fair policy's listening, a dispatched child's slot in shared memory) `watch`es
    it: each watcher runs synchronously after every change, so a child that
    just became full stops listening before its event loop can accept again.
    """

    def __init__(self) -> None:
        self._held: dict[Hashable, float] = {}
        # Kept as it changes, not summed when read: a crowd of waits holds thousands of keys,
        # and every change is read at once (fair accept listens on `full`, a dispatched child writes `load`).
        self._load = 0.0
        self._watchers: list[Callable[[], None]] = []

    def watch(self, watcher: Callable[[], None]) -> None:
        """Call `watcher` after every change from now on."""
        self._watchers.append(watcher)

    def _changed(self) -> None:
        for watcher in self._watchers:
            watcher()

    @property
    def load(self) -> float:
        return self._load

    @property
    def full(self) -> bool:
        return self._load >= 1.0 - _EPSILON

    def hold(self, key: Hashable, units: float) -> None:
        self._drop(key)
        self._held[key] = units
        self._load += units
        self._changed()

    def release(self, key: Hashable) -> None:
        if self._drop(key):
            self._changed()

    def move(self, old: Hashable, new: Hashable, units: float) -> None:
        """`new` holds `units` and `old` nothing, in one change (no moment with room in between)."""
        self._drop(old)
        self.hold(new, units)

    def _drop(self, key: Hashable) -> bool:
        units = self._held.pop(key, None)
        if units is None:
            return False
        # Nothing held is exactly nothing: the running sum's rounding errors do not outlive a quiet moment.
        self._load = self._load - units if self._held else 0.0
        return True

"""How the children of a forked server share connections: the policies of --accept.

all        Tornado's own. The children wait on one listening socket; the one the
           kernel wakes runs an accept loop that takes every connection waiting
           (up to 128), so a burst of 10 often lands 8/2 or 9/1 (tornado issues
           1679 and 2368; Cloudflare's "Why does one NGINX worker take all the
           load?").
fair       A child takes one connection per wake-up and
           stops listening while the work it holds fills its capacity; the next
           connection stays in the kernel's queue for a child that has room. A
           request's share of its process is 1 / lanes, the lanes its mode and
           workload have in one process (lab/modes/registry.py): a GIL-holding loop in
           threading fills it alone (threads would only take turns on it), a
           sleep takes 1/pool, async nothing. A connection whose request is not
           yet known holds a whole process, for at most ACCEPT_GRACE_S.
reuseport  One SO_REUSEPORT socket per child: the kernel hashes each connection
           to one of them, so the spread is random and blind to load.
dispatch   The default when forked. The parent accepts every connection and
           passes it (SCM_RIGHTS) to the child that holds least of its
           capacity, from the same occupancy as fair, which each child reports
           up its channel (lab/serve/dispatch.py). No child stops answering: a
           connection never waits for a child to have room, only for its
           event loop. Measured side by side, it spreads as evenly as fair
           with a worst /ping like all's (docs/results.md#accept-policies).

With one server process there is nothing to share and every policy is `all`.
"""

from __future__ import annotations

import socket
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
    (`move`, keyed by the request) until it ends (`release`). `on_change` runs
    synchronously after every change, so a child that just became full stops
    listening before its event loop can accept again.
    """

    def __init__(self) -> None:
        self._held: dict[Hashable, float] = {}
        # Kept as it changes, not summed when read: a crowd of waits holds thousands of keys,
        # and every change is read at once (fair accept listens on `full`, dispatch reports `load`).
        self._load = 0.0
        self.on_change: Callable[[], None] = lambda: None

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
        self.on_change()

    def release(self, key: Hashable) -> None:
        if self._drop(key):
            self.on_change()

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


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound SO_REUSEPORT socket that never listens: it keeps `port` for the children's own sockets."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock

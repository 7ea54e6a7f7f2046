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
           workload have in one process (each mode's capacity, lab/modes/): a GIL-holding loop in
           threading fills it alone (threads would only take turns on it), a
           sleep takes 1/pool, async nothing. A connection whose request is not
           yet known holds a whole process, for at most ACCEPT_GRACE_S.
reuseport  One SO_REUSEPORT socket per child: the kernel hashes each connection
           to one of them, so the spread is random and blind to load.
dispatch   The default when forked. The parent accepts every connection and
           passes it (SCM_RIGHTS) to the child that holds least of its
           capacity, from the same occupancy as fair, which each child writes
           into shared memory (lab/serve/dispatch.py). No child stops answering: a
           connection never waits for a child to have room, only for its
           event loop. Measured side by side, it spreads as evenly as fair
           with a worst /ping like all's (docs/results.md#accept-policies).

With one server process there is nothing to share and every policy is `all`.
"""

from __future__ import annotations

import socket


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

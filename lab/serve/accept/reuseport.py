"""--accept reuseport: the port kept in the parent while each child binds an SO_REUSEPORT socket of its own."""

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

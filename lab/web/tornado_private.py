"""The adapter to Tornado's private parts: every one the lab uses is reached here, and nowhere else.

Tornado offers no public hook for what these do: hand a server a connection
someone else accepted (a dispatching parent, the fair policy's one-at-a-time
accept), listen on a server's sockets only while its process has room, see
the bare 400 Tornado writes for a request it cannot parse, run the
WebSocket handshake's cross-origin check before the handshake, read a
handler's reason phrase, and set the same valid headers on every response
without checking each value again. Each was read from the Tornado release below;
tests/test_adapters.py fails if a newer one moves any of them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from tornado.tcpserver import TCPServer
from tornado.web import RequestHandler
from tornado.websocket import WebSocketHandler

# The Tornado release these names and bytes were read from (tornado.version).
CHECKED_AGAINST = "6.6.1"
# TCPServer's: what accepting does with a connection; its listening sockets and their remove-handlers
# (by fd, both read by stop()); whether stop() has run.
TCPSERVER = ("_handle_connection", "_sockets", "_handlers", "_stopped")
# What tornado.http1connection writes, bare, for a request it cannot parse.
BARE_400 = b"HTTP/1.1 400 Bad Request\r\n\r\n"


def handle_connection(server: TCPServer, connection: socket.socket, address: Any) -> None:
    """Serve a connection accepted elsewhere, as the server's own accept loop would."""
    server._handle_connection(connection, address)


def listen_as_told(server: TCPServer, sock: socket.socket, stop_listening: Callable[[], None]) -> None:
    """Make `sock` one of the server's sockets, whose listening the caller switches on and off itself;
    `stop_listening` is what the server's stop() calls for it before closing it."""
    server._sockets[sock.fileno()] = sock
    server._handlers[sock.fileno()] = stop_listening


def sockets(server: TCPServer) -> list[socket.socket]:
    """The server's listening sockets."""
    return list(server._sockets.values())


def stopped(server: TCPServer) -> bool:
    """Whether the server's stop() has run."""
    return bool(server._stopped)


def cross_origin(handler: WebSocketHandler) -> bool:
    """True if the WebSocket handshake would be refused as cross-origin (Sec-Fetch-Site, then Origin against
    Host, then the handler's check_origin), as WebSocketHandler.get decides it."""
    return handler._check_cross_origin(handler.check_origin) is not None


def reason(handler: RequestHandler) -> str:
    """The reason phrase of the handler's status (set_status's, or the standard one)."""
    return str(handler._reason)


def set_checked_headers(handler: RequestHandler, headers: Mapping[str, str]) -> None:
    """Set response headers whose values are known to be valid: set_header checks each value with a regular
    expression, every response (tests/test_adapters.py checks these once)."""
    for name, value in headers.items():
        handler._headers[name] = value

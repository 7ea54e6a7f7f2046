"""The HTTP server: Tornado's, with limits set and every answer in JSON."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tornado.concurrent import Future
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.web import Application

from lab.web import tornado_private
from lab.web.channel import FromParent

if TYPE_CHECKING:
    from lab.web.lifecycle import Lifecycle

# GET requests carry no body; a client sending one gets a 400 instead of
# making the server buffer up to Tornado's default of 100 MB.
MAX_BODY_BYTES = 64 * 1024
# Room for long (rejected) URLs: Tornado closes the connection without a word
# when the headers exceed this, so keep it well above MAX_URI_LENGTH.
MAX_HEADER_BYTES = 256 * 1024

_BODY = json.dumps({"error": {"status": 400, "message": "malformed HTTP request"}}).encode()
_JSON_400 = (
    b"HTTP/1.1 400 Bad Request\r\n"
    b"Content-Type: application/json; charset=UTF-8\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + _BODY
)


def make_http_server(app: Application, lifecycle: Lifecycle | None = None, *, fair: bool = False) -> LabHTTPServer:
    """The server for `app`. With `lifecycle`, each connection is told to it (what the process holds);
    with `fair` too, it accepts as lab/serve/accept.py's fair policy says, from what the lifecycle holds."""
    server = LabHTTPServer(app, max_body_size=MAX_BODY_BYTES, max_header_size=MAX_HEADER_BYTES)
    server.lifecycle = lifecycle
    server.fair = fair
    return server


class LabHTTPServer(HTTPServer):
    """HTTPServer whose answer to a malformed request is the lab's JSON error, not a bare status line.

    With a `lifecycle`, each connection it takes and closes is told to it, so
    that the process knows what it holds (lab/serve/accept.py). With `fair` it also
    accepts one connection per wake-up and listens only while the process has
    room; with `take_from` it accepts nothing and is handed its connections
    by the forked parent (lab/serve/dispatch.py), which it tells how busy it is.
    """

    lifecycle: Lifecycle | None = None
    fair = False
    _listening = False
    _parent: FromParent | None = None

    def take_from(self, channel: socket.socket) -> None:
        """Serve the connections the dispatching parent sends down `channel` (--accept dispatch)."""
        if self.lifecycle is None:
            raise RuntimeError("take_from() needs the lifecycle, to report what this process holds")
        self._parent = FromParent(channel, self.lifecycle.occupancy, self._take)

    def stop(self) -> None:
        if self._parent is not None:
            self._parent.close()  # the parent sends new connections to the other children
        super().stop()

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        if not self.fair or self.lifecycle is None:
            super().add_sockets(sockets)
            return
        for sock in sockets:
            tornado_private.listen_as_told(self, sock, self._listen_as_room_allows)
        self.lifecycle.occupancy.watch(self._listen_as_room_allows)
        self._listen_as_room_allows()

    def _listen_as_room_allows(self) -> None:
        wanted = not tornado_private.stopped(self) and self.lifecycle is not None and not self.lifecycle.occupancy.full
        if wanted == self._listening:
            return
        loop = IOLoop.current()
        for sock in tornado_private.sockets(self):
            if wanted:
                loop.add_handler(sock, self._accept_one, IOLoop.READ)
            else:
                loop.remove_handler(sock)  # also drops a wake-up already queued for it
        self._listening = wanted

    def _accept_one(self, sock: socket.socket, events: int) -> None:
        try:
            connection, address = sock.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return  # a sibling took it, or the client gave up while it waited
        self._take(connection, address)  # -> handle_stream: holds a whole unit

    def _take(self, connection: socket.socket, address: Any) -> None:
        """A connection accepted here one at a time (fair) or handed down by the parent (dispatch)."""
        tornado_private.handle_connection(self, connection, address)

    def on_close(self, server_conn: object) -> None:
        if self.lifecycle is not None:
            self.lifecycle.disconnected(server_conn.stream)  # type: ignore[attr-defined]
        super().on_close(server_conn)

    def handle_stream(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        if self.lifecycle is not None:
            self.lifecycle.connected(stream)
        # Tornado writes the bare 400 from deep inside HTTP1Connection, which
        # offers no hook; swapping those exact bytes on this one stream is the
        # smallest change that keeps every error in the lab's JSON shape.
        write = stream.write

        def write_json_errors(data: bytes | memoryview) -> Future[None]:
            return write(_JSON_400 if data == tornado_private.BARE_400 else data)

        stream.write = write_json_errors  # type: ignore[method-assign]
        super().handle_stream(stream, address)

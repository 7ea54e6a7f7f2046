"""The HTTP server: Tornado's, with limits set and every answer in JSON."""

from __future__ import annotations

import contextlib
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
from lab.web.descriptors import ACCEPT_PAUSE_S, OutOfFiles

if TYPE_CHECKING:
    from lab.web.channel import ChildEnd, FromParent
    from lab.web.lifecycle import Lifecycle

# GET requests carry no body; a client sending one gets a 400 instead of
# making the server buffer up to Tornado's default of 100 MB.
MAX_BODY_BYTES = 64 * 1024
# Room for long (rejected) URLs: Tornado closes the connection without a word
# when the headers exceed this, so keep it well above MAX_URI_LENGTH.
MAX_HEADER_BYTES = 256 * 1024
# Connections accepted per wake-up at most (tornado.netutil's bound: its default listen backlog).
ACCEPT_BATCH = 128

_BODY = json.dumps({"error": {"status": 400, "message": "malformed HTTP request"}}).encode()
_JSON_400 = (
    b"HTTP/1.1 400 Bad Request\r\n"
    b"Content-Type: application/json; charset=UTF-8\r\nX-Content-Type-Options: nosniff\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + _BODY
)


class JsonErrorStream(IOStream):
    """An IOStream that sends the lab's JSON 400 where Tornado writes its bare one: the smallest change that
    keeps every error in the lab's JSON shape. Given to each accepted stream as its class, not as a wrapper
    of its write: a wrapper holding the stream made a cycle, and every closed connection's stream and
    buffers waited for the cyclic collector (an upstream held up to 1,175 of them, 2 MB; Tornado's own
    server, none)."""

    def write(self, data: bytes | memoryview) -> Future[None]:
        return super().write(_JSON_400 if data == tornado_private.BARE_400 else data)


class HandedStream(JsonErrorStream):
    """The stream of a connection the dispatching parent handed over (lab/web/channel.py): closing it ends it.

    The parent keeps its copy of a connection until it sees that the child
    received it, at its next look; until then closing the child's descriptor
    alone would send nothing, and a client reading to the end (Connection:
    close, HTTP/1.0) would wait for the parent. Shutting down the sending side
    first sends the FIN at once, whoever else holds the socket.
    """

    def close_fd(self) -> None:
        with contextlib.suppress(OSError):  # the client may have gone already
            self.socket.shutdown(socket.SHUT_WR)
        super().close_fd()


def make_http_server(
    app: Application,
    lifecycle: Lifecycle | None = None,
    *,
    fair: bool = False,
    idle_connection_timeout: float | None = None,
) -> LabHTTPServer:
    """The server for `app`. With `lifecycle`, each connection is told to it (what the process holds);
    with `fair` too, it accepts as lab/serve/accept/'s fair policy says, from what the lifecycle holds.
    `idle_connection_timeout`: a connection with no request for that long is closed (Tornado's: an hour)."""
    server = LabHTTPServer(
        app,
        max_body_size=MAX_BODY_BYTES,
        max_header_size=MAX_HEADER_BYTES,
        idle_connection_timeout=idle_connection_timeout,
    )
    server.lifecycle = lifecycle
    server.fair = fair
    return server


class LabHTTPServer(HTTPServer):
    """HTTPServer whose answer to a malformed request is the lab's JSON error, not a bare status line.

    It accepts for itself (not with tornado.netutil's accept handler, which
    lets "too many open files" escape, a traceback for every turn of the
    loop): out of descriptors, it stops accepting for a moment and the
    connections wait in the listen queue (lab/web/descriptors.py).
    With a `lifecycle`, each connection it takes and closes is told to it, so
    that the process knows what it holds (lab/serve/accept/). With `fair` it also
    accepts one connection per wake-up and listens only while the process has
    room; with `take_from` it accepts nothing and is handed its connections
    by the forked parent (lab/serve/accept/dispatch.py), which it tells how busy it is.
    """

    lifecycle: Lifecycle | None = None
    fair = False
    _listening = False
    _paused = False
    _parent: FromParent | None = None
    _out_of_files: OutOfFiles | None = None

    def take_from(self, end: ChildEnd) -> None:
        """Serve the connections the dispatching parent sends down its channel (--accept dispatch)."""
        if self.lifecycle is None:
            raise RuntimeError("take_from() needs the lifecycle, to tell the parent what this process holds")
        from lab.web.channel import FromParent  # noqa: PLC0415 (only a dispatched child needs it)

        self._parent = FromParent(end, self.lifecycle.occupancy, self._take)

    def stop(self) -> None:
        if self._parent is not None:
            self._parent.close()  # the parent sends new connections to the other children
        super().stop()

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        for sock in sockets:
            tornado_private.listen_as_told(self, sock, self._listen_as_room_allows)
        if self.fair and self.lifecycle is not None:
            self.lifecycle.occupancy.watch(self._listen_as_room_allows)
        self._listen_as_room_allows()

    def _listen_as_room_allows(self) -> None:
        full = self.fair and self.lifecycle is not None and self.lifecycle.occupancy.full
        wanted = not tornado_private.stopped(self) and not self._paused and not full
        if wanted == self._listening:
            return
        loop = IOLoop.current()
        for sock in tornado_private.sockets(self):
            if wanted:
                loop.add_handler(sock, self._accept, IOLoop.READ)
            else:
                loop.remove_handler(sock)  # also drops a wake-up already queued for it
        self._listening = wanted

    def _accept(self, sock: socket.socket, events: int) -> None:
        # As tornado.netutil's handler: a bounded batch per wake-up (fair: one,
        # the process may be full after it), so other work is not starved.
        for _ in range(1 if self.fair else ACCEPT_BATCH):
            try:
                connection, address = sock.accept()
            except BlockingIOError:
                return  # none left (or a sibling took it)
            except ConnectionAbortedError:
                continue  # the client gave up while it waited in the queue
            except OSError as error:
                self._out_of_files = self._out_of_files or OutOfFiles()
                if not self._out_of_files.should_pause(error):
                    raise
                self._pause()
                return
            self._take(connection, address)  # -> handle_stream (fair: holds a whole unit)
            if not self._listening:
                return

    def _pause(self) -> None:
        """No descriptor left: stop accepting for ACCEPT_PAUSE_S; the listen queue holds the newcomers."""

        def resume() -> None:
            self._paused = False
            self._listen_as_room_allows()

        self._paused = True
        self._listen_as_room_allows()
        IOLoop.current().call_later(ACCEPT_PAUSE_S, resume)

    def _take(self, connection: socket.socket, address: Any) -> None:
        """A connection accepted here or handed down by the parent (dispatch)."""
        tornado_private.handle_connection(self, connection, address)

    def on_close(self, server_conn: object) -> None:
        if self.lifecycle is not None:
            self.lifecycle.disconnected(server_conn.stream)  # type: ignore[attr-defined]
        super().on_close(server_conn)

    def handle_stream(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        if self.lifecycle is not None:
            self.lifecycle.connected(stream)
        # Tornado writes the bare 400 from deep inside HTTP1Connection, which
        # offers no hook: the stream itself swaps those exact bytes (JsonErrorStream).
        # Only a plain TCP stream's class is changed: a TLS stream (which the lab
        # never serves) would lose its own.
        if type(stream) is IOStream:
            stream.__class__ = JsonErrorStream if self._parent is None else HandedStream
        super().handle_stream(stream, address)

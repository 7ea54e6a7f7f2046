"""A dispatched child's end of its channel (--accept dispatch): connections arrive down it, its occupancy goes up.

The parent's end is lab/serve/dispatch.py; REPORT is what travels up.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Any

from tornado.ioloop import IOLoop

from lab.web.occupancy import Occupancy

# Child -> parent: connections received so far, occupancy (units of its capacity).
REPORT = struct.Struct("!Qd")
# Descriptors read per message (and connections the parent accepts per wake-up): a
# bound, so a flood of connections cannot starve the children's reports.
BATCH = 64


class FromParent:
    """A child's end of its channel: connections arrive on it, and its occupancy goes back up it."""

    def __init__(
        self, channel: socket.socket, occupancy: Occupancy, take: Callable[[socket.socket, Any], None]
    ) -> None:
        self.channel = channel
        self.occupancy = occupancy
        self.take = take  # what accepting would do with it (lab/web/tornado_private.py: handle_connection)
        self.received = 0
        self._reporting = False
        channel.setblocking(False)
        occupancy.watch(self._report_soon)
        IOLoop.current().add_handler(channel.fileno(), self._receive, IOLoop.READ)

    def _receive(self, fd: int, events: int) -> None:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.channel, 16, BATCH)
            except BlockingIOError:
                return
            if not message and not fds:  # the parent is gone: watch_parent() stops this process
                self.close()
                return
            for descriptor in fds:
                self._take(socket.socket(fileno=descriptor))
            self._report_soon()

    def _take(self, connection: socket.socket) -> None:
        self.received += 1
        connection.setblocking(False)
        try:
            address = connection.getpeername()
        except OSError:  # the client left before its connection got here
            connection.close()
            return
        self.take(connection, address)

    def _report_soon(self) -> None:
        # One report per turn of the event loop, however many changes it
        # made (a connection taken, its request begun and ended): each
        # report wakes the parent, whose CPU comes out of the children's.
        if not self._reporting:
            self._reporting = True
            IOLoop.current().add_callback(self.report)

    def report(self) -> None:
        self._reporting = False
        # Full (the next change reports again) or closed (stopping): nothing to do.
        with contextlib.suppress(OSError):
            self.channel.send(REPORT.pack(self.received, self.occupancy.load))

    def close(self) -> None:
        """No more connections: the parent sees the channel close and sends the next ones elsewhere."""
        if self.channel.fileno() != -1:
            IOLoop.current().remove_handler(self.channel.fileno())
            self.channel.close()

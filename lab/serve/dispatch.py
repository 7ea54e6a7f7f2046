"""--accept dispatch: the forked parent accepts every connection and hands it to the least busy child.

Node.js's cluster module does this by default on Linux, because letting
workers accept for themselves left load "very unbalanced" in practice. The
parent keeps the listening sockets; each child holds one end of a Unix
SOCK_SEQPACKET pair. Down it, the parent sends each accepted connection's
file descriptor (SCM_RIGHTS: `socket.send_fds`), then closes its own copy;
up it, the child reports how busy it is each time that changes: its
occupancy (lab/serve/accept.py: what its requests hold of its capacity, a
connection whose request is not known yet a whole unit) and how many
connections it has received. The parent counts a connection it sent but the
child has not reported yet as a whole unit, so a burst spreads before any
child has said a word. The least busy child gets the next connection; ties
go round-robin. Keep-alive connections stay with their child: only new
connections pass through the parent.

The parent is one thread and a `selectors` loop: it never reads a request,
so a client that connects and sends nothing costs it one accept and one
send. It forks and replaces the children itself (tornado.process.
fork_processes does that for the other policies) because it must hold each
child's channel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tornado.ioloop import IOLoop

from lab.serve.accept import Occupancy

log = logging.getLogger("lab.server")

# Child -> parent: connections received so far, occupancy (units of its capacity).
REPORT = struct.Struct("!Qd")
# Connections accepted per wake-up, and descriptors read per message: a
# bound, so a flood of connections cannot starve the children's reports.
BATCH = 64
MAX_RESTARTS = 100  # as tornado.process.fork_processes
# How often the loop looks for children that exited and for a stop signal
# (a signal handler only sets a flag: the loop owns the sockets).
POLL_S = 0.2
# Connections accepted that no child's channel would take yet (every child's
# loop busy and its channel full): past this many the parent stops
# accepting, and the kernel's queue holds the rest.
MAX_PENDING = 1024
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Child:
    """One forked server as the parent sees it: its channel and how busy it last said it was."""

    task_id: int
    pid: int
    channel: socket.socket | None
    sent: int = 0  # connections sent down the channel
    received: int = 0  # ... of which the child has reported receiving
    load: float = 0.0  # its occupancy at that report
    # The parent's copies of the connections sent but not yet reported
    # received, oldest first: if the child dies with them still in its
    # channel, they can go to another child instead of being lost.
    in_transit: deque[socket.socket] = field(default_factory=deque)

    @property
    def estimate(self) -> float:
        """Its occupancy, plus a whole unit for each connection on its way."""
        return self.load + (self.sent - self.received)


class InChild(Exception):
    """Not an error: raised in a freshly forked child to leave the parent's loop with what it needs."""

    def __init__(self, task_id: int, channel: socket.socket) -> None:
        self.task_id = task_id
        self.channel = channel


class Dispatcher:
    """The parent of a `--accept dispatch` server: forks the children, accepts, hands connections out."""

    def __init__(self, listeners: list[socket.socket], count: int, in_child: Callable[[], None]) -> None:
        self.listeners = listeners
        self.count = count
        # Installs a fresh child's own stop-signal handlers, first thing after
        # the fork: until then a signal would run the parent's, on its siblings.
        self.in_child = in_child
        self.children: dict[int, Child] = {}  # by task id
        self.selector = selectors.DefaultSelector()
        self.pending: deque[socket.socket] = deque()  # accepted, no channel would take it yet
        self.stopping = False
        self.restarts = 0
        self._turn = 0
        self._listening = False

    def run(self) -> tuple[int, socket.socket]:
        """Fork the children and dispatch until they have all stopped; returns only in a child."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)
        try:
            for task_id in range(self.count):
                self._fork(task_id)
            for sock in self.listeners:
                sock.setblocking(False)
            while self.children:
                self._listen(not self.stopping and len(self.pending) < MAX_PENDING)
                for key, _ in self.selector.select(timeout=0.05 if self.pending else POLL_S):
                    key.data(key.fileobj)
                if self.stopping:
                    self._stop_accepting()
                self._read_reports()
                self._send_pending()
                self._reap()
        except InChild as child:
            return child.task_id, child.channel
        raise SystemExit(0)

    # ---------- children ----------

    def _fork(self, task_id: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            self.in_child()
            ours.close()
            self._forget_in_child()
            raise InChild(task_id, theirs)
        theirs.close()
        ours.setblocking(False)
        self.children[task_id] = Child(task_id, pid, ours)
        # Woken by its reports: each one lets the parent close its copies of
        # what the child received (a copy left open would hold the connection
        # open after the child closed it).
        self.selector.register(ours, selectors.EVENT_READ, lambda _: self._read_reports_of(self.children[task_id]))

    def _forget_in_child(self) -> None:
        """A child keeps none of the parent's: no listener, no sibling's channel, no pending connection."""
        self.selector.close()
        for sock in [*self.listeners, *self.pending]:
            sock.close()
        for child in self.children.values():
            if child.channel is not None:
                child.channel.close()

    def _read_reports(self) -> None:
        """Every child's latest report, read when a choice needs them (and on each turn of the loop).

        Not on arrival: a report would wake the parent once per connection,
        and its CPU comes out of the children's.
        """
        for child in list(self.children.values()):
            self._read_reports_of(child)

    def _read_reports_of(self, child: Child) -> None:
        channel = child.channel
        while channel is not None:
            try:
                report = channel.recv(REPORT.size)
            except BlockingIOError:
                return
            except OSError:
                report = b""
            if not report:  # the child closed its end: stopping, or dead
                self._close_channel(child)
                return
            received, child.load = REPORT.unpack(report)
            for _ in range(received - child.received):
                child.in_transit.popleft().close()  # the child has it: its copy is the one
            child.received = received

    def _close_channel(self, child: Child) -> None:
        if child.channel is not None:
            self.selector.unregister(child.channel)
            child.channel.close()
            child.channel = None
        self._recover(child)

    def _recover(self, child: Child) -> None:
        """A child gone with connections on their way: those whose request is still unread go to another.

        One whose bytes the child may have read already (nothing to peek, yet
        open) is closed: sent elsewhere it would wait for a request that is
        gone; closed, its client sees the failure at once.
        """
        resend = []
        while child.in_transit:
            connection = child.in_transit.popleft()
            try:
                unread = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                unread = b""
            if unread:
                resend.append(connection)
            else:
                connection.close()
        self.pending.extendleft(reversed(resend))  # first in line, in their order

    def _reap(self) -> None:
        for child in list(self.children.values()):
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            if pid == 0:
                continue
            self._close_channel(child)
            del self.children[child.task_id]
            failed = os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
            if failed and not self.stopping:
                self._replace(child, status)

    def _replace(self, child: Child, status: int) -> None:
        # In tornado.process.fork_processes's words, which the other policies log.
        how = f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else (
            f"exited with status {os.WEXITSTATUS(status)}")  # fmt: skip
        log.warning("child %d (pid %d) %s, restarting", child.task_id, child.pid, how)
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise RuntimeError("too many child restarts, giving up")
        self._fork(child.task_id)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: each child gets SIGTERM and stops in its own time; the loop stops accepting."""
        self.stopping = True
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):  # died just now: _reap collects it
                os.kill(child.pid, signal.SIGTERM)

    def _listen(self, wanted: bool) -> None:
        if wanted == self._listening:
            return
        for sock in self.listeners:
            if wanted:
                self.selector.register(sock, selectors.EVENT_READ, self._accept)
            else:
                self.selector.unregister(sock)
        self._listening = wanted

    def _stop_accepting(self) -> None:
        self._listen(False)
        for sock in [*self.listeners, *self.pending]:
            sock.close()
        self.pending.clear()

    # ---------- connections ----------

    def _accept(self, listener: socket.socket) -> None:
        self._read_reports()
        for _ in range(BATCH):
            try:
                connection, _address = listener.accept()
            except (BlockingIOError, ConnectionAbortedError):
                return
            self.pending.append(connection)
            self._send_pending()

    def _send_pending(self) -> None:
        # (The parent's copy of a connection sent is closed when its child reports it received.)
        while self.pending:
            connection = self.pending.popleft()
            if not self._send(connection):
                self.pending.appendleft(connection)
                return  # no channel takes it now: retried after the next wake-up

    def _send(self, connection: socket.socket) -> bool:
        """Hand `connection` to the least busy child that will take it; False if none would."""
        for child in self._by_load():
            assert child.channel is not None
            try:
                socket.send_fds(child.channel, [b"c"], [connection.fileno()])
            except BlockingIOError:
                continue  # its channel is full (its event loop is busy): the next one
            except OSError:
                self._close_channel(child)  # it has gone; _reap replaces it
                continue
            child.sent += 1
            child.in_transit.append(connection)
            return True
        return False

    def _by_load(self) -> list[Child]:
        """The children that can take a connection, least busy first, ties in round-robin order."""
        open_ = [c for c in self.children.values() if c.channel is not None]
        if not open_:
            return []
        self._turn = (self._turn + 1) % len(open_)
        rotated = open_[self._turn :] + open_[: self._turn]
        return sorted(rotated, key=lambda c: c.estimate)  # sorted() is stable: ties keep the rotation


class FromParent:
    """A child's end of its channel: connections arrive on it, and its occupancy goes back up it."""

    def __init__(
        self, channel: socket.socket, occupancy: Occupancy, take: Callable[[socket.socket, Any], None]
    ) -> None:
        self.channel = channel
        self.occupancy = occupancy
        self.take = take  # what accepting would do with it: TCPServer._handle_connection
        self.received = 0
        self._reporting = False
        channel.setblocking(False)
        occupancy.on_change = self._report_soon
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

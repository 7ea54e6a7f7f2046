"""--accept dispatch: the forked parent accepts every connection and hands it to the least busy child.

Node.js's cluster module does this by default on Linux, because letting
workers accept for themselves left load "very unbalanced" in practice. The
parent keeps the listening sockets; each child holds one end of a Unix
SOCK_SEQPACKET pair, down which the parent sends each accepted connection's
file descriptor (SCM_RIGHTS: `socket.send_fds`). Nothing comes back up it:
each child writes into its slot of shared memory (lab/web/channel.py's
`Slots`) how many connections it has received and its occupancy
(lab/serve/accept/: what its requests hold of its capacity, a connection
whose request is not known yet a whole unit), and the parent reads them when
it chooses. The parent counts a connection it sent but the child has not
received yet as a whole unit, so a burst spreads before any child has taken
one. The least busy child gets the next connection; ties go round-robin.
Keep-alive connections stay with their child: only new connections pass
through the parent.

The parent keeps its copy of each connection it sent until the child has
received it (it closes the copies it sees received each time it wakes): a
child killed with connections still in its channel leaves them to the parent,
which sends those whose request is unread to another child.

The parent is one thread and a `selectors` loop (lab/serve/supervisor.py's,
which forks, reaps and replaces the children for every policy): it never
reads a request, so a client that connects and sends nothing costs it one
accept and one send. This module is that loop's doorway for `dispatch`: a
channel made for each child before its fork, the listening sockets, and
what is on its way to each child.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass, field

from lab.serve.supervisor import POLL_S, Doorway
from lab.web.channel import BATCH, ChildEnd, Slots, send_connection
from lab.web.descriptors import ACCEPT_PAUSE_S, OutOfFiles

# How soon the loop looks again while connections wait for a channel with room.
RETRY_S = 0.05
# Connections accepted that no child's channel would take yet (every child's
# loop busy and its channel full): past this many the parent stops
# accepting, and the kernel's queue holds the rest.
MAX_PENDING = 1024


@dataclass
class Channel:
    """The parent's end of one child's channel, and what it has sent down it."""

    task_id: int  # also the child's slot in the shared memory
    sock: socket.socket | None
    sent: int = 0  # connections sent down the channel
    # The parent's copies of the connections sent but not yet seen received
    # (the last ones sent), oldest first: if the child dies with them still in
    # its channel, they can go to another child instead of being lost.
    in_transit: deque[socket.socket] = field(default_factory=deque)


class Dispatch(Doorway):
    """The parent of a `--accept dispatch` server: accepts, and hands each connection to the least busy child."""

    def __init__(self, listeners: list[socket.socket], children: int) -> None:
        self.listeners = listeners
        self.slots = Slots(children)  # before the first fork: every child shares it
        self.channels: dict[int, Channel] = {}  # by task id
        self.pending: deque[socket.socket] = deque()  # accepted, no channel would take it yet
        self.selector: selectors.BaseSelector | None = None
        self._pair: tuple[socket.socket, socket.socket] | None = None  # made for the child about to fork
        self._turn = 0
        self._listening = False
        self._closed = False
        self._out_of_files = OutOfFiles()
        self._paused_until = 0.0  # out of descriptors: no accepting before then (time.monotonic)

    def attach(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        for sock in self.listeners:
            sock.setblocking(False)

    # ---------- the supervisor's turns ----------

    def before_fork(self, task_id: int) -> None:
        self._pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.slots.clear(task_id)  # a replacement starts from nothing, as its new channel does

    def forked(self, task_id: int, pid: int) -> None:
        assert self._pair is not None and self.selector is not None
        ours, theirs = self._pair
        self._pair = None
        theirs.close()
        ours.setblocking(False)
        channel = self.channels[task_id] = Channel(task_id, ours)
        # The child writes nothing: readable means it closed its end (stopping, or dead).
        self.selector.register(ours, selectors.EVENT_READ, lambda _: self._closed_by_child(channel))

    def in_child(self, task_id: int) -> ChildEnd | None:
        """A child keeps none of the parent's: no listener, no sibling's channel, no pending connection, and no
        copy of a connection on its way to a sibling (one kept would hold that connection open after the
        sibling closed it, and a descriptor of this child's for good)."""
        assert self._pair is not None
        ours, theirs = self._pair
        ours.close()
        for sock in [*self.listeners, *self.pending]:
            sock.close()
        for channel in self.channels.values():
            if channel.sock is not None:
                channel.sock.close()
            for connection in channel.in_transit:
                connection.close()
        return ChildEnd(theirs, self.slots, task_id)

    def wait(self, stopping: bool) -> float:
        paused = time.monotonic() < self._paused_until
        self._listen(not stopping and not paused and len(self.pending) < MAX_PENDING)
        return RETRY_S if self.pending or paused else POLL_S

    def turn(self, stopping: bool) -> None:
        if stopping:
            self._stop_accepting()
        # After the wake-up's connections are on their way: closing copies delays none of them.
        self._collect()
        self._send_pending()

    def gone(self, task_id: int) -> None:
        channel = self.channels.pop(task_id, None)
        if channel is not None:
            self._close_channel(channel)

    # ---------- channels ----------

    def _collect(self) -> None:
        """Close the parent's copies of what each child has received (on every wake-up: they cost only a
        descriptor meanwhile, since a child ends a connection it closes itself, lab/web/httpserver.py's
        HandedStream)."""
        for channel in self.channels.values():
            if channel.in_transit:
                self._collect_from(channel)

    def _collect_from(self, channel: Channel) -> None:
        on_its_way = self._on_its_way(channel)
        while len(channel.in_transit) > on_its_way:
            channel.in_transit.popleft().close()  # the child has it: its copy is the one

    def _closed_by_child(self, channel: Channel) -> None:
        try:
            if channel.sock is None or channel.sock.recv(1):
                return  # (nothing is ever sent up a channel)
        except BlockingIOError:
            return
        except OSError:
            pass
        self._close_channel(channel)

    def _close_channel(self, channel: Channel) -> None:
        if channel.sock is not None:
            assert self.selector is not None
            self.selector.unregister(channel.sock)
            channel.sock.close()
            channel.sock = None
        self._collect_from(channel)  # what it had received went with it
        self._recover(channel)

    def _recover(self, channel: Channel) -> None:
        """A child gone with connections on their way: those whose request is still unread go to another.

        One whose bytes the child may have read already (nothing to peek, yet
        open) is closed: sent elsewhere it would wait for a request that is
        gone; closed, its client sees the failure at once.
        """
        resend = []
        while channel.in_transit:
            connection = channel.in_transit.popleft()
            try:
                unread = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                unread = b""
            if unread:
                resend.append(connection)
            else:
                connection.close()
        self.pending.extendleft(reversed(resend))  # first in line, in their order

    def _listen(self, wanted: bool) -> None:
        if wanted == self._listening or self._closed:
            return
        assert self.selector is not None
        for sock in self.listeners:
            if wanted:
                self.selector.register(sock, selectors.EVENT_READ, self._accept)
            else:
                self.selector.unregister(sock)
        self._listening = wanted

    def _stop_accepting(self) -> None:
        self._listen(False)
        if not self._closed:
            self._closed = True
            for sock in self.listeners:
                sock.close()
        for sock in self.pending:
            sock.close()
        self.pending.clear()

    # ---------- connections ----------

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(BATCH):
            try:
                connection, _address = listener.accept()
            except (BlockingIOError, ConnectionAbortedError):
                return
            except OSError as error:
                if not self._out_of_files.should_pause(error):
                    raise
                self._paused_until = time.monotonic() + ACCEPT_PAUSE_S  # the kernel's queue holds the rest
                return
            self.pending.append(connection)
            self._send_pending()

    def _send_pending(self) -> None:
        # (The parent's copy of a connection sent is closed once it sees that the child received it.)
        while self.pending:
            connection = self.pending.popleft()
            if not self._send(connection):
                self.pending.appendleft(connection)
                return  # no channel takes it now: retried after the next wake-up

    def _send(self, connection: socket.socket) -> bool:
        """Hand `connection` to the least busy child that will take it; False if none would."""
        for channel in self._by_load():
            assert channel.sock is not None
            try:
                send_connection(channel.sock, connection)
            except BlockingIOError:
                continue  # its channel is full (its event loop is busy): the next one
            except OSError:
                self._close_channel(channel)  # it has gone; the supervisor replaces it
                continue
            channel.sent += 1
            channel.in_transit.append(connection)
            return True
        return False

    def _by_load(self) -> list[Channel]:
        """The channels that can take a connection, least busy first, ties in round-robin order."""
        open_ = [c for c in self.channels.values() if c.sock is not None]
        if not open_:
            return []
        self._turn = (self._turn + 1) % len(open_)
        rotated = open_[self._turn :] + open_[: self._turn]
        return sorted(rotated, key=self._estimate)  # sorted() is stable: ties keep the rotation

    def _estimate(self, channel: Channel) -> float:
        """The child's occupancy, plus a whole unit for each connection on its way to it."""
        # Its count first, then its load: the child writes them the other way round (lab/web/channel.py's
        # _take), so a connection taken in between is counted twice, never not at all.
        on_its_way = self._on_its_way(channel)
        return self.slots.load(channel.task_id) + on_its_way

    def _on_its_way(self, channel: Channel) -> int:
        """How many connections sent down `channel` the child has not received yet: the last ones sent, since it
        takes them in order."""
        return channel.sent - self.slots.received(channel.task_id)

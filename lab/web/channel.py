"""A dispatched child's end of its channel (--accept dispatch): connections arrive down it, and what the child
holds goes into shared memory.

The parent's end is lab/serve/accept/dispatch.py; both are imported only
where the policy is in use. Nothing travels up the channel: each child
writes how many connections it has received, and its occupancy, into its
slot of `Slots` (shared memory made before the fork), and the parent reads
them when it next looks. A message up the channel for every change
woke the parent for each and cost it a read for each: on new connections of
`HEAD /ping` one at a time, 106 µs of the parent's CPU a connection with
them, 76 without (docs/results.md#overhead). The channel closing is what tells
the parent that a child has gone.
"""

from __future__ import annotations

import mmap
import socket
from collections.abc import Callable
from dataclasses import dataclass
from struct import Struct
from typing import Any

from tornado.ioloop import IOLoop

from lab.web.descriptors import OutOfFiles
from lab.web.occupancy import Occupancy

# Descriptors read per message (and connections the parent accepts per wake-up): a
# bound, so a flood of connections cannot starve the rest of the loop.
BATCH = 64

# A slot: connections received so far, then the occupancy (units of its capacity).
_RECEIVED = Struct("Q")
_LOAD = Struct("d")
_SLOT_BYTES = 16


def send_connection(channel: socket.socket, connection: socket.socket) -> None:
    """`connection` down `channel`: its descriptor, and its family as the message's one byte (left out, the
    child's socket() would ask the kernel three questions). Raises as socket.send_fds does."""
    socket.send_fds(channel, [bytes((connection.family,))], [connection.fileno()])


def receive_connections(channel: socket.socket) -> list[socket.socket] | None:
    """The connections of the next message on the non-blocking `channel`, as send_connection sent them; none
    for a message whose descriptor never arrived (the kernel drops it when this process is out of descriptors);
    None when nothing waits. EOFError when the parent's end has closed."""
    try:
        message, fds, _, _ = socket.recv_fds(channel, 16, BATCH)
    except BlockingIOError:
        return None
    if not message and not fds:
        raise EOFError
    return [socket.socket(message[0], socket.SOCK_STREAM, 0, fileno=descriptor) for descriptor in fds]


def receiver(
    channel: socket.socket, took: Callable[[list[socket.socket]], None], gone: Callable[[], None]
) -> Callable[[int, int], None]:
    """An IOLoop handler for the non-blocking `channel`: each message waiting, its connections to `took` (none
    for a message whose descriptor never arrived, receive_connections), until nothing waits; `gone` once the
    channel has ended."""

    def receive(fd: int, events: int) -> None:
        while True:
            try:
                connections = receive_connections(channel)
            except EOFError:
                gone()
                return
            if connections is None:
                return
            took(connections)

    return receive


def peer(connection: socket.socket) -> Any:
    """The address of a received connection's client; None, the connection closed, if the client left on its
    way here."""
    try:
        return connection.getpeername()
    except OSError:
        connection.close()
        return None


class Slots:
    """Each dispatched child's count of connections received and its occupancy, in shared memory.

    Made in the parent before the first fork, so that every child shares it;
    slot i belongs to the child of task id i. One writer a slot (its child),
    one reader (the parent). Each field is written whole from bytes packed
    beforehand (as lab/instruments/stats.py's board: `pack_into` zero-fills
    first, and a reader could catch the zeros).
    """

    def __init__(self, count: int) -> None:
        # mmap(-1, ...) is MAP_SHARED | MAP_ANONYMOUS: forked children share it.
        self._mem = mmap.mmap(-1, count * _SLOT_BYTES)

    def clear(self, slot: int) -> None:
        """Nothing received, nothing held: for a child about to be forked into `slot`."""
        at = slot * _SLOT_BYTES
        self._mem[at : at + _SLOT_BYTES] = bytes(_SLOT_BYTES)

    def received(self, slot: int) -> int:
        return int(_RECEIVED.unpack_from(self._mem, slot * _SLOT_BYTES)[0])

    def load(self, slot: int) -> float:
        return float(_LOAD.unpack_from(self._mem, slot * _SLOT_BYTES + _RECEIVED.size)[0])

    def set_received(self, slot: int, count: int) -> None:
        at = slot * _SLOT_BYTES
        self._mem[at : at + _RECEIVED.size] = _RECEIVED.pack(count)

    def set_load(self, slot: int, load: float) -> None:
        at = slot * _SLOT_BYTES + _RECEIVED.size
        self._mem[at : at + _LOAD.size] = _LOAD.pack(load)


@dataclass(frozen=True)
class ChildEnd:
    """What a dispatched child takes from its parent: its end of the channel, and its slot of the shared memory."""

    sock: socket.socket
    slots: Slots
    slot: int


class FromParent:
    """A child's end of its channel: connections arrive on it; what the child holds goes to its slot."""

    def __init__(self, end: ChildEnd, occupancy: Occupancy, take: Callable[[socket.socket, Any], None]) -> None:
        self.channel = end.sock
        self.slots = end.slots
        self.slot = end.slot
        self.occupancy = occupancy
        self.take = take  # what accepting would do with it (lab/web/tornado_private.py: handle_connection)
        self.received = 0
        self._out_of_files = OutOfFiles()
        self.channel.setblocking(False)
        # At every change, synchronously: the parent may choose a child at any moment.
        occupancy.watch(self._note_load)
        self._note_load()
        # (The parent gone, the channel ends: watch_parent() stops this process.)
        self._receive = receiver(self.channel, self._took, self.close)
        IOLoop.current().add_handler(self.channel.fileno(), self._receive, IOLoop.READ)

    def _note_load(self) -> None:
        self.slots.set_load(self.slot, self.occupancy.load)

    def _took(self, connections: list[socket.socket]) -> None:
        if not connections:
            self._lost()
        for connection in connections:
            self._take(connection)

    def _lost(self) -> None:
        """A message whose descriptor never arrived: out of descriptors, the kernel drops it (MSG_CTRUNC).

        Counted as received all the same: the parent closes its copies in the
        order it sent them, so a connection not counted would have it close the
        next one's copy instead, and keep this one's for good.
        """
        self._count_received()
        self._out_of_files.dropped()

    def _take(self, connection: socket.socket) -> None:
        try:  # (non-blocking from here on: the stream Tornado makes of it sees to that)
            address = peer(connection)
            if address is not None:
                self.take(connection, address)  # -> the lifecycle holds a whole unit for it (its load is noted)
        finally:
            # Counted once its unit is in the load: the parent, reading in between, counts it twice, never
            # not at all.
            self._count_received()

    def _count_received(self) -> None:
        """One more connection out of the channel: from here on the parent may close its copy."""
        self.received += 1
        self.slots.set_received(self.slot, self.received)

    def close(self) -> None:
        """No more connections: the parent sees the channel close and sends the next ones elsewhere."""
        if self.channel.fileno() != -1:
            IOLoop.current().remove_handler(self.channel.fileno())
            self.channel.close()

"""--accept dispatch's two ends in one process: what a child tells the parent through shared memory, how the
parent chooses and recovers from it, and how a child's close ends a connection the parent still holds a copy of."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import selectors
import socket
from collections.abc import Iterator

import pytest
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.web import Application

from lab.instruments.stats import RequestStats
from lab.serve.accept.dispatch import Dispatch
from lab.web.channel import ChildEnd, FromParent, Slots
from lab.web.httpserver import HandedStream, JsonErrorStream, make_http_server
from lab.web.lifecycle import Lifecycle
from lab.web.occupancy import Occupancy


@pytest.fixture
def tcp() -> Iterator[socket.socket]:
    """A listening socket on loopback."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()


def _connection(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    """(client, server) ends of a new TCP connection."""
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    return client, server


def test_a_child_writes_what_it_receives_and_holds_in_its_slot_and_nothing_up_its_channel(
    tcp: socket.socket,
) -> None:
    slots, occupancy = Slots(2), Occupancy()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client, server = _connection(tcp)
    taken: list[socket.socket] = []

    def take(connection: socket.socket, address: object) -> None:
        taken.append(connection)
        occupancy.hold(connection, 1.0)  # as the lifecycle does with a new connection

    async def main() -> None:
        end = FromParent(ChildEnd(theirs, slots, 1), occupancy, take)
        socket.send_fds(ours, [bytes((server.family,))], [server.fileno()])  # as the parent sends it
        for _ in range(200):
            if taken:
                break
            await asyncio.sleep(0.01)
        end.close()

    try:
        asyncio.run(main())
        assert len(taken) == 1 and taken[0].getpeername() == client.getsockname()
        assert (slots.received(1), slots.load(1)) == (1, 1.0)
        assert (slots.received(0), slots.load(0)) == (0, 0.0)  # its sibling's slot untouched
        occupancy.release(taken[0])
        assert slots.load(1) == 0.0
        ours.setblocking(False)
        assert ours.recv(64) == b""  # the channel closed, and nothing had come up it
    finally:
        for sock in [ours, theirs, client, server, *taken]:
            sock.close()


class _Parent:
    """A Dispatch with two children's channels, whose child ends the test holds."""

    def __init__(self) -> None:
        self.dispatch = Dispatch([], 2)
        self.selector = selectors.DefaultSelector()
        self.dispatch.attach(self.selector)
        self.ends: list[socket.socket] = []
        for task_id in range(2):
            self.dispatch.before_fork(task_id)
            assert self.dispatch._pair is not None
            self.ends.append(self.dispatch._pair[1].dup())  # the child's end, as a fork would keep it
            self.dispatch.forked(task_id, pid=0)
            self.ends[-1].setblocking(False)

    def received_by(self, task_id: int) -> int:
        """How many descriptors have arrived in child `task_id`'s end (closing them)."""
        count = 0
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(self.ends[task_id], 16, 64)
            except BlockingIOError:
                return count
            for fd in fds:
                socket.socket(fileno=fd).close()
            count += len(fds)

    def wake(self) -> None:
        """One turn of the parent's loop."""
        for key, _ in self.selector.select(0):
            key.data(key.fileobj)
        self.dispatch.turn(False)

    def close(self) -> None:
        for task_id in list(self.dispatch.channels):
            self.dispatch.gone(task_id)
        for end in self.ends:
            end.close()
        self.selector.close()


def test_the_parent_chooses_by_the_childrens_slots_and_recovers_what_a_dead_child_had_not_received(
    tcp: socket.socket,
) -> None:
    parent = _Parent()
    slots, channels = parent.dispatch.slots, parent.dispatch.channels
    pairs = [_connection(tcp) for _ in range(3)]
    try:
        slots.set_load(0, 0.2)
        slots.set_load(1, 0.9)
        assert parent.dispatch._send(pairs[0][1])  # to child 0: 0.2 against 0.9 (round-robin alone says 1)
        assert parent.dispatch._send(pairs[1][1])  # to child 1: 0.9 against 0.2 + the one on its way
        assert [parent.received_by(0), parent.received_by(1)] == [1, 1]
        assert [len(channels[0].in_transit), len(channels[1].in_transit)] == [1, 1]

        slots.set_received(0, 1)  # child 0 has its connection: the parent's copy goes at its next look
        parent.wake()
        assert not channels[0].in_transit and pairs[0][1].fileno() == -1
        assert len(channels[1].in_transit) == 1  # child 1 has not said it has it

        for client, _ in pairs[1:]:
            client.sendall(b"GET /ping HTTP/1.1\r\n\r\n")  # their requests wait, unread
        slots.set_load(0, 5.0)
        assert parent.dispatch._send(pairs[2][1])  # to child 1 now: 0.9 + 1 against 5.0
        slots.set_received(1, 1)  # child 1 received the first of its two, then dies
        parent.ends[1].close()
        parent.wake()
        assert channels[1].sock is None
        assert pairs[1][1].fileno() == -1  # the one it had received went with it: closed, not sent on
        assert parent.received_by(0) == 1 and list(channels[0].in_transit) == [pairs[2][1]]  # the other, sent on
    finally:
        parent.close()
        for client, server in pairs:
            client.close()
            server.close()


def test_a_handed_over_connection_ends_when_its_child_closes_it_though_the_parent_holds_a_copy(
    tcp: socket.socket,
) -> None:
    async def closed_by(stream_class: type[IOStream], held: socket.socket) -> bytes | None:
        client, server = _connection(tcp)
        copy = server.dup()  # the parent's, not yet closed
        try:
            stream = IOStream(server)
            stream.__class__ = stream_class
            stream.close()
            client.setblocking(False)
            for _ in range(30):
                try:
                    return client.recv(1)
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            return None  # nothing came
        finally:
            client.close()
            copy.close()

    # Closed as any stream is, the connection lives on in the copy; a HandedStream sends its FIN at once.
    assert asyncio.run(closed_by(JsonErrorStream, tcp)) is None
    assert asyncio.run(closed_by(HandedStream, tcp)) == b""


def test_a_dispatched_childs_server_gives_each_connection_a_handed_stream(tcp: socket.socket) -> None:
    slots = Slots(1)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client, server = _connection(tcp)

    async def main() -> type:
        http = make_http_server(Application(), Lifecycle(RequestStats(), lambda active: None))
        http.take_from(ChildEnd(theirs, slots, 0))
        stream = IOStream(server)
        http.handle_stream(stream, server.getpeername())
        assert slots.load(0) == 1.0  # the connection holds a whole unit until its request is known
        kind = type(stream)
        stream.close()
        http.stop()
        return kind

    try:
        assert asyncio.run(main()) is HandedStream
    finally:
        for sock in [ours, theirs, client, server]:
            sock.close()


def test_a_connection_whose_descriptor_never_arrived_still_counts_as_received(
    tcp: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    # A child out of descriptors gets the parent's message without its descriptor (MSG_CTRUNC). Not counted, the
    # parent would close the next connection's copy in its place, and keep this one's for good.
    parent = _Parent()
    slots, channel = parent.dispatch.slots, parent.dispatch.channels[0]
    pairs = [_connection(tcp) for _ in range(3)]  # two lost, then one kept
    lost, kept = [server for _, server in pairs[:2]], pairs[2][1]
    taken: list[socket.socket] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler: list[int] = []

    async def main() -> None:
        end = FromParent(ChildEnd(parent.ends[0], slots, 0), Occupancy(), lambda c, a: taken.append(c))
        IOLoop.current().remove_handler(parent.ends[0].fileno())  # its reads driven here, one at a time
        try:
            slots.set_load(1, 100.0)  # the other child is full: every connection goes to this one
            assert all(parent.dispatch._send(server) for server in lost)
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
            with contextlib.suppress(OSError):
                while True:
                    filler.append(os.open(os.devnull, os.O_RDONLY))
            end._receive(parent.ends[0].fileno(), 0)  # no descriptor left for either
        finally:
            for fd in filler:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert parent.dispatch._send(kept)
        end._receive(parent.ends[0].fileno(), 0)

    try:
        asyncio.run(main())
        assert len(taken) == 1 and taken[0].getpeername() == pairs[2][0].getsockname()
        assert slots.received(0) == 3
        parent.wake()
        assert all(copy.fileno() == -1 for copy in [*lost, kept]) and not channel.in_transit  # every copy closed
        warnings = [r.getMessage() for r in caplog.records if "handed over lost" in r.getMessage()]
        assert len(warnings) == 1 and "1 connection(s)" in warnings[0], warnings  # one line, not one a connection
    finally:
        parent.close()
        for sock in [*(s for pair in pairs for s in pair), *taken]:
            sock.close()

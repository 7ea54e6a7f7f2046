"""One request's life in a server process, from its connection to its answer: the one place it is accounted.

    connected(stream)      a new connection holds a whole process (fair accept) for ACCEPT_GRACE_S at most
    begin(stream)          a request arrives: counted in flight, timed from now            -> RequestLife
    life.classify(mode)    its mode: its /stats bucket
    life.claim(share)      once its run is known: the request takes that share of the process from its
                           connection (Services.share says how much)
    life.attend(work)      the work it awaits; cancelled if its client goes (ClientGone) or
                           the server's grace period runs out (503)
    life.departed()        whether its client has closed its connection already (before and after a blocking run)
    life.end(status)       counted once, as the response is about to leave: success and error alike
    life.left()            the response has gone: the request holds nothing any more
    disconnected(stream)   the connection closed, whatever it carried

The handlers (handlers/base.py) and the HTTP server (lab/web/httpserver.py) call
these; nothing else touches the counters or the process's occupancy.
"""

from __future__ import annotations

import asyncio
import enum
import select
import socket
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from tornado.ioloop import IOLoop
from tornado.iostream import IOStream

from lab.errors import LabError
from lab.instruments.stats import RequestStats
from lab.web.occupancy import ACCEPT_GRACE_S, Occupancy

T = TypeVar("T")


# A look at what the kernel holds for a connection, without taking it or waiting (one flag set, made once).
PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


class ClientGone(Exception):
    """The client closed its connection while its request's work was awaited."""


class Phase(enum.Enum):
    """Where a server process's requests stand."""

    SERVING = "serving"  # requests come, are answered, go (also while a stop waits for them)
    ABANDONING = "abandoning"  # the stop's grace period is over: awaited work is cancelled, its clients get 503


class Stage(enum.Enum):
    """Where one request is in its life."""

    IN_FLIGHT = "in flight"  # begun, not answered yet
    CLIENT_GONE = "client gone"  # its client closed the connection before the answer
    ENDED = "ended"  # counted: its answer is leaving
    LEFT = "left"  # its answer has gone: it holds nothing


class Lifecycle:
    """Every request of one server process: in flight, counted, classified, and what they hold of it."""

    def __init__(self, stats: RequestStats, on_end: Callable[[int], None]) -> None:
        self.stats = stats
        self.occupancy = Occupancy()  # what the fair and dispatch accept policies read (lab/serve/accept/)
        self.active = 0  # requests begun and not yet ended
        # In-flight requests awaiting work: abandon() cancels their tasks when the grace period is over.
        self.jobs: set[RequestLife] = set()
        self.phase = Phase.SERVING
        self._on_end = on_end  # after each counted end, told how many remain in flight: publish to the board
        self._idle = asyncio.Event()
        self._idle.set()
        # A look without waiting at whether the kernel holds anything for a connection: registered, asked and
        # unregistered in one call, on the event loop's thread.
        self._look = select.poll()

    # ---------- connections ----------

    def connected(self, stream: Hashable) -> None:
        """Until its request says what it needs, a new connection might be a blocking run: it fills the process."""
        self.occupancy.hold(stream, 1.0)
        IOLoop.current().call_later(ACCEPT_GRACE_S, self.occupancy.release, stream)

    def disconnected(self, stream: Hashable) -> None:
        self.occupancy.release(stream)

    def has_news(self, fd: int) -> bool:
        """Whether the kernel holds something to read on `fd` (bytes, its end, a reset), asked without waiting.

        Before a peek at what: a peek that finds nothing raises BlockingIOError,
        which is about half of its microsecond; a poll that finds nothing raises nothing.
        """
        look = self._look
        look.register(fd, select.POLLIN)
        try:
            return bool(look.poll(0))
        finally:
            look.unregister(fd)

    # ---------- requests ----------

    def begin(self, connection: Hashable) -> RequestLife:
        self.active += 1
        self._idle.clear()
        return RequestLife(self, connection)

    def finished(self, mode: str | None, status: int, seconds: float, cpu: float | None = None) -> None:
        """A request ended (RequestLife.end): out of flight, and counted under its mode if it has one."""
        self.active -= 1
        if not self.active:
            self._idle.set()
        if mode is not None:
            self.stats.record(mode, status, seconds, cpu)
            self._on_end(self.active)

    async def done(self) -> None:
        """Return once no request is in flight."""
        await self._idle.wait()

    def abandon(self) -> None:
        """The grace period is over: every awaited job ends now, its client gets a 503."""
        self.phase = Phase.ABANDONING
        for life in list(self.jobs):
            life.cancel()


class RequestLife:
    """One request, from begin() to left()."""

    def __init__(self, lifecycle: Lifecycle, connection: Hashable) -> None:
        self.received = time.time()
        self.mode: str | None = None  # its /stats bucket; None: a route not worth counting
        self._lifecycle = lifecycle
        self._connection = connection
        self.stage = Stage.IN_FLIGHT
        self._job: asyncio.Task[Any] | None = None  # its task, while it awaits work (attend)
        self._cancels = 0  # cancellations of that task made here (cancel), which attend answers
        self._cpu: float | None = None

    def classify(self, mode: str) -> None:
        """Counted under `mode` in /stats, whatever its ending."""
        self.mode = mode

    def claim(self, share: float) -> None:
        """Its run is what it needs (`share` of the process, 0 if it only waits): it holds that, not its connection."""
        self._lifecycle.occupancy.move(self._connection, self, share)

    async def attend(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelling it if the client goes away (ClientGone) or the server gives up waiting (503).

        Abandoned work must not run: a queued job nobody waits for would make
        the next caller wait behind it. The work is awaited in the request's
        own task, and cancelled by cancelling that task while it awaits here:
        a task of its own for the work would cost every request two more turns
        of the event loop (about 50 µs of the server's CPU a /threading request, docs/results.md#overhead).
        """
        task = asyncio.current_task()
        if task is None:  # (not in a task: nothing to cancel it with)
            return await work
        self._job, self._cancels = task, 0
        self._lifecycle.jobs.add(self)
        try:
            return await work
        except asyncio.CancelledError:
            for _ in range(self._cancels):
                task.uncancel()  # ours, answered below
            if self._cancels and not task.cancelling():  # (a cancellation made elsewhere goes on up)
                if self.stage is Stage.CLIENT_GONE:
                    raise ClientGone from None
                if self._lifecycle.phase is Phase.ABANDONING:
                    raise LabError(503, "the server is shutting down; retry", retry_after=1) from None
            raise
        finally:
            self._job = None
            self._lifecycle.jobs.discard(self)

    def cancel(self) -> None:
        """Cancel the work it awaits (attend): its task, where it awaits."""
        if self._job is not None:
            self._cancels += 1
            self._job.cancel()

    def ran(self, cpu: float | None) -> None:
        """Its run took `cpu` CPU seconds where it ran: added to its mode's sum in /stats when it ends."""
        self._cpu = cpu

    def departed(self) -> bool:
        """Whether its client has closed the connection already, though the loop has not noticed yet.

        A request queued behind a blocking run is read before the loop gets to
        see its connection's end; the kernel has it: a FIN (nothing left to
        read) or a reset. A client that sent more (a pipelined request) is
        taken to be there.
        """
        stream = self._connection
        if self.stage is Stage.CLIENT_GONE or (isinstance(stream, IOStream) and stream.closed()):
            return True
        if not isinstance(stream, IOStream):
            return False
        sock = stream.socket
        try:
            if not self._lifecycle.has_news(sock.fileno()):
                return False  # open, nothing sent since its request
            return sock.recv(1, PEEK) == b""
        except BlockingIOError:
            return False  # (what the look saw was read since)
        except OSError:
            return True  # reset

    def client_gone(self) -> None:
        """Its client closed the connection: what it awaits is cancelled (an answered request stays as it is)."""
        if self.stage is Stage.IN_FLIGHT:
            self.stage = Stage.CLIENT_GONE
            self.cancel()

    def end(self, status: int) -> None:
        """Counted once, before the response leaves: a client holding its answer finds it in /stats."""
        if self.stage in (Stage.IN_FLIGHT, Stage.CLIENT_GONE):
            self.stage = Stage.ENDED
            self._lifecycle.finished(self.mode, status, time.time() - self.received, self._cpu)

    def left(self) -> None:
        """The response has left: this request, and its connection until its next request, hold nothing."""
        self.stage = Stage.LEFT
        occupancy = self._lifecycle.occupancy
        occupancy.release(self)
        occupancy.release(self._connection)

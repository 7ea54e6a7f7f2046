"""The one parent of a forked server: it spawns the children, reaps them, replaces the ones that fail, and stops them.

Every --accept policy forks through it (gunicorn's arbiter owns its workers
the same way, whatever their class). What differs between the policies is
only how connections reach the children, a `Doorway`: with `all`, `fair`
and `reuseport` the children accept for themselves and the doorway does
nothing; with `dispatch` (lab/serve/accept/dispatch.py) the parent accepts and
hands each connection down a channel it made for the child before forking.

The parent is one thread and one `selectors` loop: a signal handler only
changes the state and wakes the loop (a byte on a pipe, `signal.set_wakeup_fd`),
and the loop does the rest: reaps the children that exited, replaces the
ones that failed, and leaves once every child is gone.

    STARTING  forking the first children
    RUNNING   every child forked; a child that fails is replaced (at most MAX_RESTARTS times)
    STOPPING  SIGTERM or SIGINT arrived: each child got SIGTERM and stops in its own time;
              nothing is forked any more, and the parent exits once the last child has gone

Fork safety: the parent never starts a thread nor an event loop, so what it
forks (replacements included) is safe to fork; each child, first thing,
notes stop signals for itself (lab/serve/signals.py), forgets the parent's
wake-up pipe and selector, and starts watching for its parent's death.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import random
import selectors
import signal
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from lab.procs import watch_parent
from lab.serve.signals import STOP_SIGNALS, StopSignals

if TYPE_CHECKING:
    from lab.web.channel import ChildEnd  # (a dispatched child's: lab/serve/accept/dispatch.py makes it)

log = logging.getLogger("lab.server")

MAX_RESTARTS = 100  # as tornado.process.fork_processes
# The longest the loop sleeps between looks at its children: a signal wakes it at once,
# this only bounds what a lost wake-up could cost.
POLL_S = 0.2


class State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass(frozen=True)
class Forked:
    """What a freshly forked child leaves the supervisor with: its task id, and its channel if dispatched."""

    task_id: int
    channel: ChildEnd | None


class Doorway:
    """How connections reach the children. This one: they accept on the listening sockets themselves.

    A subclass may make something per child before each fork (`before_fork`),
    keep its end in the parent (`forked`) and hand the child its own
    (`in_child`), do its work on each turn of the parent's loop (`wait`,
    `turn`), and hear that a child has gone (`gone`) or that the server stops.
    """

    def attach(self, selector: selectors.BaseSelector) -> None:
        """The parent's selector, on which the doorway registers what it waits for."""

    def before_fork(self, task_id: int) -> None:
        pass

    def forked(self, task_id: int, pid: int) -> None:
        pass

    def in_child(self, task_id: int) -> ChildEnd | None:
        """In the child, right after the fork: keep what is its own, close the rest; its channel, if any."""
        return None

    def wait(self, stopping: bool) -> float:
        """Before the loop sleeps: how long it may sleep."""
        return POLL_S

    def turn(self, stopping: bool) -> None:
        """After the loop woke."""

    def gone(self, task_id: int) -> None:
        """Child `task_id` has exited (it may be replaced next)."""


class InChild(Exception):
    """Not an error: raised in a freshly forked child to leave the parent's loop with what it needs."""

    def __init__(self, forked: Forked) -> None:
        self.forked = forked


class Supervisor:
    """The parent of `count` forked servers, for every accept policy; `run()` returns only in a child."""

    def __init__(self, count: int, signals: StopSignals, doorway: Doorway | None = None) -> None:
        self.count = count
        self.signals = signals  # what each child notes of stop signals until its event loop listens
        self.doorway = doorway or Doorway()
        self.state = State.STARTING
        self.children: dict[int, int] = {}  # task id -> pid
        self.restarts = 0
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._signalled = False  # a signal woke the loop since it last reaped
        self._reaped = 0.0  # when it last looked for exited children (time.monotonic)

    def run(self) -> Forked:
        """Fork the children and look after them until they have all stopped; then the parent exits."""
        self._install()
        if self.signals.asked:  # a stop came before the fork: nothing to start
            self.state = State.STOPPING
        try:
            for task_id in range(self.count):
                if self.state is State.STOPPING:  # (also one that came while forking: the rest are not started)
                    break
                self._spawn(task_id)
            if not self.children:
                log.info("stopped during start-up")
            elif self.state is State.STARTING:
                self.state = State.RUNNING
            while self.children:
                stopping = self.state is State.STOPPING
                for key, _ in self.selector.select(timeout=self.doorway.wait(stopping)):
                    key.data(key.fileobj)
                self.doorway.turn(self.state is State.STOPPING)
                # Only after a signal (SIGCHLD among them) or POLL_S since the last look: two waitpid calls
                # per turn would be most of a dispatching parent's system calls beside a connection's.
                if self._signalled or time.monotonic() - self._reaped >= POLL_S:
                    self._reap()
        except InChild as child:
            return child.forked
        raise SystemExit(0)

    # ---------- signals ----------

    def _install(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake_ups)
        signal.set_wakeup_fd(self._wake_w)  # every signal below wakes the loop
        signal.signal(signal.SIGCHLD, _nothing)  # (a handler, so that a child's exit wakes it too)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)
        self.doorway.attach(self.selector)

    def _drain_wake_ups(self, fd: int) -> None:
        self._signalled = True
        with contextlib.suppress(BlockingIOError):
            while os.read(fd, 4096):
                pass

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: each child gets SIGTERM and stops in its own time; none is forked any more."""
        self.state = State.STOPPING
        for pid in self.children.values():
            with contextlib.suppress(ProcessLookupError):  # died just now: _reap collects it
                os.kill(pid, signal.SIGTERM)

    # ---------- children ----------

    def _spawn(self, task_id: int) -> None:
        self.doorway.before_fork(task_id)
        # Stop signals wait while the child is made: in the parent, a stop must find the new child in
        # `children`; in the child, it must find the child's own handlers, not the parent's.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        parent = os.getpid()
        try:
            pid = os.fork()
            if pid == 0:
                raise InChild(Forked(task_id, self._in_child(task_id, parent)))
            self.children[task_id] = pid
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self.doorway.forked(task_id, pid)

    def _in_child(self, task_id: int, parent: int) -> ChildEnd | None:
        # Its own stop-signal handling first: until then a signal would run the parent's, on its siblings.
        self.signals.defer()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        channel = self.doorway.in_child(task_id)
        self.selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        random.seed()  # not the parent's sequence (tornado.process.fork_processes does the same)
        # No process outlives its parent (named before the fork: lab/procs.py says why).
        watch_parent(parent)
        return channel

    def _reap(self) -> None:
        self._signalled, self._reaped = False, time.monotonic()
        for task_id, pid in list(self.children.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                continue
            del self.children[task_id]
            self.doorway.gone(task_id)
            failed = os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
            if failed and self.state is not State.STOPPING:
                self._replace(task_id, pid, status)

    def _replace(self, task_id: int, pid: int, status: int) -> None:
        # In tornado.process.fork_processes's words, which the lab logged before it forked for itself.
        how = f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else (
            f"exited with status {os.WEXITSTATUS(status)}")  # fmt: skip
        log.warning("child %d (pid %d) %s, restarting", task_id, pid, how)
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise RuntimeError("too many child restarts, giving up")
        self._spawn(task_id)


def _nothing(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD's handler: the wake-up byte is all it is for."""

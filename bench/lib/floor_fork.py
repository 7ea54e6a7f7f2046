"""The floor forked (bench/bare_server.py --processes N): children that accept for themselves, or a bare
dispatching parent.

The lab's forked accept policies (lab/serve/accept/dispatch.py) carry what a
forked server needs to be trusted: children reaped and replaced, the least
busy child chosen, a connection in a dead child's channel re-homed. This is
the hop alone, so that bench.overhead can tell what the hop costs from what
the lab's parent adds to it:

    all       Tornado's own: every child accepts from the listening sockets
              it inherited, the parent only waits.
    dispatch  the parent accepts every connection and sends it down a Unix
              SOCK_SEQPACKET pair to the next child in turn (SCM_RIGHTS), then
              closes its copy; the child makes a stream of it, as accepting
              would. Nothing comes back up the channel. A child whose channel
              is full is passed over; a connection no channel takes is closed.

The parent prints its "serving on" line once every child says it serves (a
byte down a pipe each). A SIGTERM or SIGINT stops it, from the start on; so
does the last child's end. It then stops its children (SIGTERM, then SIGKILL
after STOP_GRACE_S) and reaps them. A child stops on SIGTERM, and when its
parent dies (lab/procs.py's watch_parent; a dispatched child also when its
channel ends); one that fails prints why before it exits.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence

from lab.procs import watch_parent
from lab.web.channel import BATCH, send_connection

# How long a child has to stop after SIGTERM before it is killed.
STOP_GRACE_S = 5.0
# How often the parent looks for children that have ended, when nothing else wakes it.
REAP_EVERY_S = 1.0
# What a child runs: its listening sockets (none when dispatched), its end of the channel (None when it
# accepts), and `ready` to call once it serves.
Child = Callable[[Sequence[socket.socket], socket.socket | None, Callable[[], None]], None]
STOPS = (signal.SIGTERM, signal.SIGINT)


def serve_forked(sockets: list[socket.socket], processes: int, policy: str, child: Child, url: str) -> None:
    """Fork `processes` children running `child`, print `url` once all serve, hand out connections (`dispatch`)
    or only wait (`all`) until told to stop; stop and reap the children however it ends."""
    stop_r, stop_w = os.pipe()  # a stop signal writes here (set_wakeup_fd): the parent wakes, at any stage
    _hear_stops(stop_w)
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    channels: list[socket.socket] = []
    children: list[int] = []
    try:
        for _ in range(processes):
            ours, theirs = _pair() if policy == "dispatch" else (None, None)
            pid = os.fork()
            if pid == 0:  # the child: nothing of the parent's but what it serves from
                _default_stops()
                for fd in (ready_r, stop_r, stop_w):
                    os.close(fd)
                for sock in [*channels, *([ours] if ours is not None else [])]:
                    sock.close()
                _run_child(child, sockets if theirs is None else _closed(sockets), theirs, ready_w, parent)
            children.append(pid)
            if ours is not None and theirs is not None:
                theirs.close()
                channels.append(ours)
        os.close(ready_w)
        ready_w = -1
        if _wait_ready(ready_r, stop_r, processes):
            print(f"serving on {url}/", flush=True)
            _parent(sockets if policy == "dispatch" else [], channels, stop_r, children)
    finally:
        _default_stops()
        for pid in children:
            _stop(pid)
        for sock in channels:
            sock.close()
        for fd in (stop_r, stop_w, ready_r, ready_w):
            if fd >= 0:
                os.close(fd)


def _hear_stops(stop_w: int) -> None:
    os.set_blocking(stop_w, False)
    signal.set_wakeup_fd(stop_w)
    for sig in STOPS:
        signal.signal(sig, lambda *_: None)  # (the wake-up byte is what counts)


def _default_stops() -> None:
    signal.set_wakeup_fd(-1)
    for sig in STOPS:
        signal.signal(sig, signal.SIG_DFL)


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def _closed(sockets: list[socket.socket]) -> list[socket.socket]:
    """None of `sockets`, closed: a dispatched child accepts nothing itself."""
    for sock in sockets:
        sock.close()
    return []


def _run_child(
    child: Child, sockets: Sequence[socket.socket], channel: socket.socket | None, ready_w: int, parent: int
) -> None:
    def ready() -> None:
        os.write(ready_w, b".")
        os.close(ready_w)

    watch_parent(parent=parent)  # a parent killed outright cannot stop its children
    code = 1
    try:
        child(sockets, channel, ready)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never back into the parent's code


def _wait_ready(ready_r: int, stop_r: int, processes: int) -> bool:
    """True once every child has said it serves; False if a stop came first."""
    told = 0
    while told < processes:
        readable, _, _ = select.select([ready_r, stop_r], [], [])
        if stop_r in readable:
            return False
        got = os.read(ready_r, processes - told)
        if not got:
            raise RuntimeError(f"a forked floor child ended before it served ({told} of {processes} did)")
        told += len(got)
    return True


def _parent(listeners: list[socket.socket], channels: list[socket.socket], stop_r: int, children: list[int]) -> None:
    """Until a stop signal or the last child's end: accept and send each connection to the next child in turn
    (nothing to accept: only wait)."""
    selector = selectors.DefaultSelector()
    selector.register(stop_r, selectors.EVENT_READ)
    for sock in [*listeners, *channels]:
        sock.setblocking(False)
    for sock in listeners:
        selector.register(sock, selectors.EVENT_READ)
    turn = 0
    try:
        while True:
            events = selector.select(REAP_EVERY_S)
            # Reaped only when nothing woke it: two waitpid calls a connection would double the hop's system calls.
            if not events and not _reap(children):
                return
            for key, _ in events:
                if key.fileobj == stop_r:
                    return
                for _ in range(BATCH):
                    try:
                        connection, _address = key.fileobj.accept()  # type: ignore[union-attr]
                    except (BlockingIOError, ConnectionAbortedError):
                        break
                    with connection:  # (the child's copy is the one that serves it)
                        turn = _send(channels, connection, turn)
                    if not channels:
                        return
    finally:
        selector.close()


def _send(channels: list[socket.socket], connection: socket.socket, turn: int) -> int:
    """Send `connection` to the first child from `turn` on whose channel takes it; the next turn. A channel
    whose child has gone is dropped."""
    tried = 0
    while channels and tried < len(channels):
        index = (turn + tried) % len(channels)
        try:
            send_connection(channels[index], connection)
        except BlockingIOError:
            tried += 1  # its loop is busy and its channel full: the next one
            continue
        except OSError:
            channels.pop(index).close()  # its child has gone
            continue
        return index + 1
    return turn


def _reap(children: list[int]) -> bool:
    """Forget the children that have ended; whether any is left."""
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.remove(pid)
    return bool(children)


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL if it has not ended within STOP_GRACE_S; reaped either way."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.05)
    except (ProcessLookupError, ChildProcessError):
        pass

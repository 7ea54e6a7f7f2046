"""The floor forked (bench/bare_server.py --processes N): children that accept for themselves, or a bare
dispatching parent.

The lab's forked accept policies (lab/serve/dispatch.py) carry what a
forked server needs to be trusted: children reaped and replaced, the least
busy child chosen, a connection in a dead child's channel re-homed. This is
the hop alone, so that bench.overhead can tell what the hop costs from what
the lab's parent adds to it:

    all       Tornado's own: every child accepts from the listening sockets
              it inherited, the parent only waits.
    dispatch  the parent accepts every connection and sends it down a Unix
              SOCK_SEQPACKET pair to the next child in turn (SCM_RIGHTS), then
              closes its copy; the child makes a stream of it, as accepting
              would. Nothing comes back up the channel.

The parent prints its "serving on" line once every child says it serves (a
byte down a pipe each). It stops on SIGTERM or SIGINT, and then stops and
reaps its children; a bench starts it in its own session, so that stopping
the group takes them all whatever happens to the parent.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
from collections.abc import Callable, Sequence

# Connections the parent accepts a wake-up, as the lab's parent (lab/web/channel.py's BATCH).
BATCH = 64
# What a child runs: its listening sockets (none when dispatched), its end of the channel (None when it
# accepts), and `ready` to call once it serves.
Child = Callable[[Sequence[socket.socket], socket.socket | None, Callable[[], None]], None]


def serve_forked(sockets: list[socket.socket], processes: int, policy: str, child: Child, url: str) -> None:
    """Fork `processes` children running `child`, print `url` once all serve, hand out connections (`dispatch`)
    or only wait (`all`) until told to stop; stop and reap the children however it ends."""
    stop_r, stop_w = os.pipe()  # the stop signals write here: the parent's loop wakes
    ready_r, ready_w = os.pipe()
    channels: list[socket.socket] = []
    children: list[int] = []
    try:
        for _ in range(processes):
            ours, theirs = _pair() if policy == "dispatch" else (None, None)
            pid = os.fork()
            if pid == 0:  # the child: nothing of the parent's but what it serves from
                for fd in (ready_r, stop_r, stop_w):
                    os.close(fd)
                for sock in [*channels, *([ours] if ours is not None else [])]:
                    sock.close()
                _run_child(child, sockets if theirs is None else _closed(sockets), theirs, ready_w)
            children.append(pid)
            if ours is not None and theirs is not None:
                theirs.close()
                channels.append(ours)
        os.close(ready_w)
        ready_w = -1
        _wait_ready(ready_r, processes)
        print(f"serving on {url}/", flush=True)
        _parent(sockets if policy == "dispatch" else [], channels, stop_r, stop_w)
    finally:
        for pid in children:
            _stop(pid)
        for fd in (stop_r, stop_w, ready_r, ready_w):
            if fd >= 0:
                os.close(fd)


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def _closed(sockets: list[socket.socket]) -> list[socket.socket]:
    """None of `sockets`, closed: a dispatched child accepts nothing itself."""
    for sock in sockets:
        sock.close()
    return []


def _run_child(child: Child, sockets: Sequence[socket.socket], channel: socket.socket | None, ready_w: int) -> None:
    def ready() -> None:
        os.write(ready_w, b".")
        os.close(ready_w)

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 1
    try:
        child(sockets, channel, ready)
        code = 0
    finally:
        os._exit(code)  # never back into the parent's code


def _wait_ready(ready_r: int, processes: int) -> None:
    told = 0
    while told < processes:
        got = os.read(ready_r, processes - told)
        if not got:
            raise RuntimeError(f"a forked floor child ended before it served ({told} of {processes} did)")
        told += len(got)


def _parent(listeners: list[socket.socket], channels: list[socket.socket], stop_r: int, stop_w: int) -> None:
    """Until a stop signal: accept and send each connection to the next child in turn (none to accept: wait)."""
    os.set_blocking(stop_w, False)
    signal.set_wakeup_fd(stop_w)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # (the wake-up byte is what counts)
    selector = selectors.DefaultSelector()
    selector.register(stop_r, selectors.EVENT_READ)
    for sock in listeners:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    turn = 0
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == stop_r:
                    return
                for _ in range(BATCH):
                    try:
                        connection, _address = key.fileobj.accept()  # type: ignore[union-attr]
                    except (BlockingIOError, ConnectionAbortedError):
                        break
                    turn = (turn + 1) % len(channels)
                    with connection:
                        socket.send_fds(channels[turn], [bytes((connection.family,))], [connection.fileno()])
    finally:
        signal.set_wakeup_fd(-1)
        selector.close()


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass

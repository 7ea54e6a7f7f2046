"""Process lifecycle: children that die with their parent, and the embedded upstream."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil

from lab import ROOT, loopback

log = logging.getLogger(__name__)

# A listen queue like uWSGI's, for the server and its upstream alike: a burst
# of hundreds of connections waits in the kernel instead of being dropped and
# retried a second later (Linux's default, and Tornado's, is 128).
LISTEN_BACKLOG = 1024


def watch_parent(interval: float = 0.5) -> None:
    """Send ourselves SIGTERM when our parent dies, so no process is ever orphaned.

    A SIGKILLed server cannot tell its children anything; polling getppid()
    is the portable way for them to notice (prctl(PR_SET_PDEATHSIG) is
    Linux-only and fires when the parent *thread* exits). Each process's own
    SIGTERM handling then decides how gracefully to go.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def kill_children() -> None:
    """SIGKILL every process this one started, and theirs: for an exec() (autoreload) that would orphan them.

    The new image keeps this pid, so children watching their parent would
    never notice; it starts its own pools and upstream.
    """
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()


class EmbeddedUpstream:
    """The slow upstream /async waits on, run as `python -m lab.upstream_server` in its own process.

    Its own process, so that a server blocked by /blocking cannot slow it:
    the lab must measure the server, not the upstream. The listening socket
    is bound here and inherited, so the port is known before the child runs
    and no other program can take it in between.
    """

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    @classmethod
    def start(
        cls, host: str = "127.0.0.1", ready_timeout: float = 20.0, idle_timeout: float | None = None
    ) -> EmbeddedUpstream:
        """Start it; `idle_timeout`: it closes a connection idle that long (default: its own)."""
        idle = ["--idle-timeout", repr(idle_timeout)] if idle_timeout is not None else []
        with socket.create_server((host, 0), backlog=LISTEN_BACKLOG) as sock:
            port = sock.getsockname()[1]
            process = subprocess.Popen(
                [sys.executable, "-m", "lab.upstream_server", "--fd", str(sock.fileno()), *idle],
                pass_fds=[sock.fileno()],
                cwd=ROOT,
            )
        upstream = cls(process, f"http://{host}:{port}")
        try:
            upstream._wait_ready(ready_timeout)
        except BaseException:
            upstream.stop()
            raise
        log.info("embedded upstream pid %d at %s", process.pid, upstream.url)
        return upstream

    def _wait_ready(self, timeout: float) -> None:
        # The socket already accepts connections; this waits for the child to
        # answer them, so the first /async is not charged the child's start-up.
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"embedded upstream exited at start-up with code {self.process.returncode}")
            try:
                with loopback.urlopen(f"{self.url}/delay?seconds=0", timeout=1) as reply:
                    reply.read()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"embedded upstream did not answer within {timeout:g} s") from None
                time.sleep(0.05)

    def stop(self, timeout: float = 5.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        log.info("embedded upstream pid %d stopped", self.process.pid)

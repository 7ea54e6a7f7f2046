"""The embedded upstream: `python -m lab.modes.upstream.server` started by the server before any fork."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

from lab import ROOT, loopback
from lab.procs import LISTEN_BACKLOG

log = logging.getLogger(__name__)


class EmbeddedUpstream:
    """The slow upstream /async waits on, run as `python -m lab.modes.upstream.server` in its own process.

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
            argv = ["--fd", str(sock.fileno()), "--parent", str(os.getpid()), *idle]
            process = subprocess.Popen(
                [sys.executable, "-m", "lab.modes.upstream.server", *argv],
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

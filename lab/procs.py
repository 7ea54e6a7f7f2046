"""Processes the lab starts: they die with their parent, and their listen queue is deep."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time

import psutil

log = logging.getLogger(__name__)

# A listen queue like uWSGI's, for the server and its upstream alike: a burst
# of hundreds of connections waits in the kernel instead of being dropped and
# retried a second later (Linux's default, and Tornado's, is 128).
LISTEN_BACKLOG = 1024


def watch_parent(parent: int, interval: float = 0.5) -> None:
    """Send ourselves SIGTERM when `parent` is no longer our parent, so no process is ever orphaned.

    A SIGKILLed server cannot tell its children anything; polling getppid()
    is the portable way for them to notice (prctl(PR_SET_PDEATHSIG) is
    Linux-only and fires when the parent *thread* exits). Each process's own
    SIGTERM handling then decides how gracefully to go. `parent` is the pid
    the parent had when it started us, known to it before the fork or the
    spawn, never getppid() once here: a process whose parent died before it
    looked (during a pool worker's imports, or a fork that a stop's killpg
    missed) would find whoever adopted it there, and watch that for ever.
    """

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

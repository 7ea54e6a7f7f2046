"""Tracking the processes a test started, safely: by psutil.Process, never by a bare pid.

A psutil.Process remembers its creation time, and psutil checks it before
signalling, so a pid the kernel reused for somebody else's process is never
mistaken for ours (tests here kill workers on purpose, and pids do wrap).
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

# How long a poll or an exit may take before it counts as failed: a stalled
# shared 2-core host has been seen to need more than 10 s.
STALL_S = 30.0


def alive(process: psutil.Process) -> bool:
    """Still this very process, and not a zombie."""
    with contextlib.suppress(psutil.Error):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


def running(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return alive(psutil.Process(pid))
    return False


def processes(pids: Iterable[int]) -> list[psutil.Process]:
    """A psutil.Process for each pid still there: one may exit between being listed and being looked at."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.append(psutil.Process(pid))
    return found


def wait_for(predicate: Callable[[], object], timeout: float = STALL_S) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def in_sessions(sessions: set[int]) -> list[psutil.Process]:
    """Live processes whose session is one of `sessions`."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) in sessions and alive(process):
                found.append(process)
    return found


class Watch:
    """Every process noted so far, to check afterwards that none survived."""

    def __init__(self) -> None:
        self.noted: dict[int, psutil.Process] = {}

    def note(self, processes: Iterable[psutil.Process]) -> set[int]:
        for process in processes:
            self.noted.setdefault(process.pid, process)
        return set(self.noted)

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.noted.values() if alive(p)]

    def survivors(self, sessions: set[int], wait: float = STALL_S) -> list[int]:
        """Pids of noted processes or session members still alive after up to `wait` seconds."""
        found: set[int] = set()

        def none_left() -> bool:
            found.clear()
            found.update(p.pid for p in [*self.alive(), *in_sessions(sessions)])
            return not found

        wait_for(none_left, wait)
        return sorted(found)

    def kill(self, sessions: set[int]) -> None:
        for process in [*self.alive(), *in_sessions(sessions)]:
            with contextlib.suppress(psutil.Error):
                process.kill()


def schedstat_files_open(tid: int) -> int:
    """How many of this process's descriptors are open on thread `tid`'s schedstat file (workloads/clocks.py
    keeps them open)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}").endswith(f"/task/{tid}/schedstat")
    return found


def forks_alone(test: Callable[[], None]) -> Callable[[], None]:
    """Run a test that calls os.fork() in a Python of its own, with no thread but its main one.

    pytest's xdist worker has threads of its own; a fork while one of them is mid-allocation crashed the child
    now and then on free-threaded 3.13t (a segfault at the fork, the board never written). The test still forks.
    """

    @functools.wraps(test)
    def alone() -> None:
        code = f"import {test.__module__} as m; m.{test.__name__}.__wrapped__()"
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", code],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    return alone

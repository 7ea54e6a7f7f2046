"""The core meter: the share of a window in which a process had a thread waiting for a core, 0-1.

The GIL meter (lab/instruments/gil.py) cannot tell waiting for the GIL from waiting for a
core: a thread holding the GIL that the kernel takes off its core makes every
other thread wait too. Read beside it, over the same window, this meter tells
the two apart. It sums the run-queue time of the process's threads (the
kernel's own schedstat counters, thread by thread) over the window's wall
time, capped at 1: about 0 while cores are free, near 1 while the process's
threads queue for cores other processes hold.

Not the run-queue share of the threads' runnable time: an idle server's
threads run microseconds at a time, and the kernel's wake-up latency alone
made that read about 0.3 on an idle host.

A server process does not read its own counters: that is a few system calls
per thread per window, each letting go of the GIL, and under GIL load each
costs the event loop a switch interval or more to take it back (about 70 of
them every 200 ms, docs/instruments.md). A watcher process reads them from
outside instead (`python -m lab.instruments.cores --pid PID`) and writes one
reading a line down a pipe; the server reads what has arrived, without
waiting, once a window (`CoreWatch`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence

from workloads.clocks import threads_schedstat

WINDOW_S = 0.2


class CoreMeter:
    """Run-queue time of a process's threads (this one's by default) per second of wall time, since the last read."""

    def __init__(self, pid: int | None = None) -> None:
        self.tasks = "/proc/self/task" if pid is None else f"/proc/{pid}/task"
        self._last = threads_schedstat(self.tasks) or {}
        self._at = time.monotonic()

    def read(self) -> float | None:
        """The share since the last read, 0-1; None without schedstat (or once the process is gone)."""
        now, at = threads_schedstat(self.tasks), time.monotonic()
        if now is None:
            return None
        last, self._last = self._last, now
        window, self._at = at - self._at, at
        # A thread born in the window counts from zero; one that ended in it is lost (the
        # GIL meter's sampling threads come and go, each a few milliseconds).
        waited = sum(wait - last.get(tid, (0.0, 0.0))[1] for tid, (_, wait) in now.items())
        if window <= 0:
            return 0.0
        return round(min(1.0, max(0.0, waited / window)), 3)


class CoreWatch:
    """The core meter of this process, read by a watcher process: the latest window's share, or None."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.latest: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def start(self) -> None:
        argv = [sys.executable, "-m", "lab.instruments.cores", "--pid", str(os.getpid()), "--every", str(self.window)]
        self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert self._process.stdout is not None
        os.set_blocking(self._process.stdout.fileno(), False)

    def read(self) -> float | None:
        """The last reading the watcher sent (one system call, never waiting); None before the first."""
        if self._process is None or self._process.stdout is None:
            return self.latest
        with contextlib.suppress(BlockingIOError, OSError):
            self._pending += os.read(self._process.stdout.fileno(), 4096)
        *lines, self._pending = self._pending.split(b"\n")
        for line in reversed(lines):
            if line.strip():
                self.latest = None if line.strip() == b"-" else float(line)
                break
        return self.latest

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def watch(pid: int, every: float) -> None:
    """Every `every` seconds, `pid`'s core meter reading on a line of stdout ("-": none); until `pid` is gone."""
    meter = CoreMeter(pid)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(every)
        reading = meter.read()
        try:
            sys.stdout.write("-\n" if reading is None else f"{reading}\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            return  # the server closed its end: it is stopping


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.instruments.cores", description=__doc__)
    parser.add_argument("--pid", type=int, required=True, help="the process to watch (its parent)")
    parser.add_argument("--every", type=float, default=WINDOW_S, help="seconds a window (default: %(default)s)")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        watch(args.pid, args.every)


if __name__ == "__main__":
    main()

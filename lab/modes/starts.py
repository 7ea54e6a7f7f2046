"""Start reports: the record a pool's worker writes as it takes a job, read by the server when it needs them.

A process-pool worker (lab/modes/processing/worker.py) and a sub-interpreter
(lab/modes/interpreters/worker.py) write one START record to a pipe as they
take a job: one system call, which wakes nothing. The server reads them
(StartReports) when it needs them: a deadline to check, /stats, a
withdrawal, and at least once every STARTS_PER_READ jobs handed over, so that
the pipe (64 KiB: 2,730 records) never fills and stops a worker. A report
that woke the event loop was one more wake-up a job, and two context
switches, for news nothing reads until then (docs/results.md#overhead).

Imported in sub-interpreters: the standard library only.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# (job id, the worker: a process's pid or a thread's native id, when: time.monotonic(), which on Linux is the
# same clock in every process and interpreter, and the event loop's), 24 bytes. Under PIPE_BUF, so one write is
# atomic even with every worker writing to the one pipe, and the server reads whole records; the time it reads
# one is not the job's start.
START = struct.Struct("<qqd")

# Records read at most at once; the server reads them at least once every so many jobs handed over.
STARTS_PER_READ = 256


def report_start(fd: int, job_id: int, worker: int) -> None:
    """Tell the server, down the pipe `fd`, that `worker` takes job `job_id` now."""
    os.write(fd, START.pack(job_id, worker, time.monotonic()))


class StartReports:
    """The server's end of a pool's start pipe: `reader` (made non-blocking), each record given to
    `started(job_id, worker, at)`."""

    def __init__(self, reader: int, started: Callable[[int, int, float], None]) -> None:
        os.set_blocking(reader, False)
        self.reader = reader
        self._started = started
        self._unread = 0  # jobs handed over since the records were last read

    def handed(self) -> None:
        """A job was handed to the pool: the records are read once every STARTS_PER_READ of them."""
        self._unread += 1
        if self._unread >= STARTS_PER_READ:
            self.read()

    def read(self) -> None:
        """Every record waiting."""
        self._unread = 0
        while self.read_once():
            pass

    def read_once(self) -> bool:
        """One read of the records waiting (a multiple of their size: whole records only, at most
        STARTS_PER_READ); True if it read that many, and more may wait. The server holds the writing end too:
        no end of file."""
        try:
            records = os.read(self.reader, START.size * STARTS_PER_READ)
        except BlockingIOError:
            return False
        whole = len(records) - len(records) % START.size
        if whole != len(records):  # (never from the lab's workers: a worker of other code, spawned after an update)
            log.warning("ignored %d bytes on a pool's start pipe", len(records) - whole)
        for job_id, worker, at in START.iter_unpack(records[:whole]):
            self._started(job_id, worker, at)
        return len(records) == START.size * STARTS_PER_READ

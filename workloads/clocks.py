"""Where a run's time went, from the kernel's own accounting (Linux schedstat).

A thread that has started a run is, at each moment, on a core (its CPU time),
runnable with no core free (the run queue: `core_wait`), or blocked. Linux
counts the first two per thread in /proc/<pid>/task/<tid>/schedstat: time on
a CPU, then time waiting in the run queue, both in nanoseconds; the rest of
the wall time is `blocked`, on whatever blocked it. Only some of that can be
named: a workload's own waits (a sleep, a query) are timed where they
happen (workloads/waits.py) and taken out first; of the rest, on a thread
that shares its GIL with other threads it is the GIL; on a thread alone with
its GIL (a process-pool worker, a sub-interpreter with a GIL of its own) none
of it is.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

THREAD_SCHEDSTAT = "/proc/thread-self/schedstat"
TASKS = "/proc/self/task"


def gil_enabled() -> bool:
    """False on a free-threaded interpreter running without its GIL (Python 3.13t and later).

    Asked each time, not once: importing a C extension that is not marked
    free-threading-safe turns the GIL back on while the process runs. Looked
    up in the module's dict: getattr's miss (every Python before 3.13) raises
    and catches an AttributeError inside, most of a microsecond on every run's record.
    """
    check = sys.__dict__.get("_is_gil_enabled")
    return True if check is None else bool(check())


def _parse(raw: bytes) -> tuple[float, float] | None:
    try:
        on_cpu, run_queue = raw.split()[:2]
        return int(on_cpu) / 1e9, int(run_queue) / 1e9
    except ValueError:
        return None


def _schedstat(path: str) -> tuple[float, float] | None:
    """Seconds the task at `path` has spent on a CPU and waiting in the run queue; None without schedstat."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _parse(os.pread(fd, 128, 0))
    except OSError:
        return None
    finally:
        os.close(fd)


def _gil_holding_reader() -> Callable[[int], Callable[[], bytes | None]] | None:
    """Readers of a file's first SCHEDSTAT_BYTES that keep the GIL; None where ctypes cannot give them.

    A schedstat file is the kernel's counters, formatted: a read of it never
    waits. Python's own os.pread lets go of the GIL around the call all the
    same, and a thread that lets it go must take it back: under GIL load,
    behind the thread that holds it, a context switch each way. A pool thread
    timing its job read its file twice a job and so made twice as many
    switches as the job itself (bench.overhead, docs/results.md#overhead).
    libc's pread64 called through ctypes.PyDLL keeps the GIL. (A sub-interpreter
    of Python 3.12 cannot import ctypes: its readers use os.pread.)
    """
    try:
        import ctypes  # noqa: PLC0415 (here: a sub-interpreter of 3.12 cannot import it)

        pread = ctypes.PyDLL(None).pread64  # (pread64: its offset is 64 bits wherever it runs)
    except (ImportError, OSError, AttributeError):
        return None
    # The arguments as C values made once (declared argtypes would convert each on every call, nearly doubling
    # its cost); the descriptor goes as the C int it is, and the result (at most SCHEDSTAT_BYTES) fits one.
    size, offset = ctypes.c_size_t(SCHEDSTAT_BYTES), ctypes.c_int64(0)

    def reader(fd: int) -> Callable[[], bytes | None]:
        # Each file its own buffer: between the read and the copy out of it another thread may run.
        buffer = ctypes.create_string_buffer(SCHEDSTAT_BYTES)

        def read() -> bytes | None:
            got: int = pread(fd, buffer, size, offset)
            return None if got < 0 else buffer.raw[:got]

        return read

    return reader


def _os_pread(fd: int) -> bytes | None:
    try:
        return os.pread(fd, SCHEDSTAT_BYTES, 0)
    except OSError:
        return None


SCHEDSTAT_BYTES = 128  # "<ns on a CPU> <ns in the run queue> <timeslices>\n": at most 62
_READER = _gil_holding_reader()


class _KeptSchedstat:
    """A thread's schedstat file, kept open and read again from offset 0.

    One system call a reading (a pread) instead of the six or seven of
    opening, checking, reading and closing a file, and one that keeps the GIL
    (_gil_holding_reader). Closed when it is dropped (for the calling thread's
    own: when the thread's local storage goes with it).
    """

    fd = -1  # (until open: an object whose open failed is dropped too)

    def __init__(self, path: str = THREAD_SCHEDSTAT) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.thread = threading.get_native_id()  # the thread that opened it (THREAD_SCHEDSTAT: whose it is)
        # (Neither reader refers back to this object, so that dropping it closes its file at once.)
        self._read = partial(_os_pread, self.fd) if _READER is None else _READER(self.fd)

    def read(self) -> tuple[float, float] | None:
        raw = self._read()
        return None if raw is None else _parse(raw)

    def run_queue(self) -> float | None:
        """read()'s second reading alone: a timed run reads it twice (a few tenths of a µs less, each)."""
        raw = self._read()
        if raw is None:
            return None
        try:
            return int(raw.split()[1]) / 1e9
        except (IndexError, ValueError):
            return None

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


_own = threading.local()


def _core_wait(kept: threading.local | _InterpreterThread) -> float | None:
    """Run-queue seconds of the calling thread so far, from the file `kept` holds for it (opened on first use).

    A file opened by another thread is not this one's: a process forked in C
    (uWSGI's master forks its workers so) runs none of Python's after-fork
    hooks, and its thread inherits its parent's file, which the parent opened
    for its own thread (/proc/thread-self is resolved when opened).
    """
    mine: _KeptSchedstat | None = getattr(kept, "schedstat", None)
    if mine is None or mine.thread != threading.get_native_id():
        try:
            mine = kept.schedstat = _KeptSchedstat()
        except OSError:
            return None
    return mine.run_queue()


def thread_core_wait() -> float | None:
    """Run-queue seconds of the calling thread so far."""
    return _core_wait(_own)


class _InterpreterThread:
    """Where a sub-interpreter keeps the schedstat file of the thread that runs its jobs: in the module, for the
    one thread it last ran on, not in a threading.local.

    A sub-interpreter of the interpreters pool is entered on a new thread
    state at every job, so a threading.local there is new each time: kept in
    one, the file was opened and closed at every job. Each of the pool's
    interpreters runs on its one pool thread; should another thread ever run
    in it, that thread gets a file of its own (_core_wait checks whose it is).
    """

    schedstat: _KeptSchedstat | None = None


def threads_schedstat(tasks: str = TASKS) -> dict[str, tuple[float, float]] | None:
    """On-CPU and run-queue seconds so far of each live thread of this process (or the one whose `tasks`
    folder, /proc/PID/task, is given), by thread id."""
    try:
        tids = os.listdir(tasks)
    except OSError:
        return None
    # A thread may end between listing and reading: it is left out.
    stats = {tid: stat for tid in tids if (stat := _schedstat(f"{tasks}/{tid}/schedstat")) is not None}
    return stats or None


class _OwnThreads:
    """This process's threads' schedstat files, each kept open while its thread lives.

    A process-pool worker reads every thread's twice a run, on the request's
    path: opening, reading and closing each file was four system calls a
    thread, where a pread is one. Threads come and go (BLAS starts its own):
    the folder is listed again only when the process's count of threads
    (one fstat) is not the count of files kept, or a kept
    file no longer reads (its thread ended, and another may have taken its
    place): a reading in a process of four threads took 17.8 µs with the
    listing, 10.6 without, twice a job. A thread no longer listed has its
    file dropped.
    """

    def __init__(self) -> None:
        self._files: dict[str, _KeptSchedstat] = {}
        self._tasks = -1  # TASKS, kept open (opened on first use; closed in a forked child)
        self._pid = os.getpid()  # the process whose threads the files kept are

    def read(self) -> dict[str, tuple[float, float]] | None:
        if self._pid != os.getpid():  # forked in C (uWSGI's workers): no after-fork hook told it (_core_wait)
            self.forget()
        count = self._thread_count()  # (asked first, even with no file kept: its folder opened at the first reading)
        if self._files and count == len(self._files):
            stats = {}
            for tid, kept in self._files.items():
                stat = kept.read()
                if stat is None:
                    break  # its thread has ended: list them again
                stats[tid] = stat
            else:
                return stats
        return self._list()

    def _thread_count(self) -> int | None:
        """This process's threads now; None where it cannot be told.

        The kernel counts a process's threads in the link count of its task
        folder (two, and one a thread: proc_task_getattr): one fstat of the
        folder kept open, where /proc/self/stat's num_threads is a pread the
        kernel formats fifty fields for (0.95 µs against 4.7).
        """
        try:
            if self._tasks < 0:
                self._tasks = os.open(TASKS, os.O_RDONLY | os.O_DIRECTORY)
            return os.fstat(self._tasks).st_nlink - 2
        except OSError:
            return None

    def _list(self) -> dict[str, tuple[float, float]] | None:
        try:
            tids = os.listdir(TASKS)
        except OSError:
            return None
        stats = {tid: stat for tid in tids if (stat := self._read(tid)) is not None}
        for gone in self._files.keys() - set(tids):
            del self._files[gone]
        return stats or None

    def _read(self, tid: str) -> tuple[float, float] | None:
        kept = self._files.get(tid)
        stat = kept.read() if kept is not None else None
        if stat is None:  # a thread new since the last reading, or one whose file no longer reads
            self._files.pop(tid, None)
            try:
                kept = _KeptSchedstat(f"{TASKS}/{tid}/schedstat")
            except OSError:  # ended since the listing
                return None
            stat = kept.read()
            if stat is not None:  # (an ended thread may still be listed, its file no longer readable)
                self._files[tid] = kept
        return stat

    def __del__(self) -> None:
        self._close_folder()

    def forget(self) -> None:
        """In a forked child: the files kept describe the parent and its threads (the task folder too, which
        was the parent's when it was opened)."""
        self._files.clear()
        self._pid = os.getpid()
        self._close_folder()

    def _close_folder(self) -> None:
        if self._tasks >= 0:
            os.close(self._tasks)
            self._tasks = -1


_own_threads = _OwnThreads()


def _forget_parents_files() -> None:
    """In a forked child: the files both readers kept open describe the parent's threads. Closed at once, so a
    child holds none of them; a child forked in C runs no such hook, and the readers find out at their next
    reading instead (_core_wait, _OwnThreads.read)."""
    _own_threads.forget()
    _own.__dict__.pop("schedstat", None)  # (the forking thread's, which is the child's one thread)


os.register_at_fork(after_in_child=_forget_parents_files)


def own_threads_schedstat() -> dict[str, tuple[float, float]] | None:
    """threads_schedstat() of this process, through files kept open while their threads live."""
    return _own_threads.read()


def process_core_wait() -> float | None:
    """Run-queue seconds of all this process's live threads so far (BLAS threads included)."""
    stats = own_threads_schedstat()
    return None if stats is None else sum(waited for _, waited in stats.values())


@dataclass(frozen=True)
class Clocks:
    """The CPU and run-queue clocks of whatever runs a job (one thread, or a whole process), and its GIL's company."""

    cpu: Callable[[], float]
    core_wait: Callable[[], float | None]
    # Whether other threads take the GIL the job runs under (the event loop's, a thread pool's, a Dask
    # worker's: its event loop and GIL meter are threads of that process), so its blocked time can be the GIL.
    shared_gil: bool = True
    # The name the record gives the thread that ran the job.
    thread_name: Callable[[], str] = lambda: threading.current_thread().name


THREAD = Clocks(time.thread_time, thread_core_wait)
# A process that runs one job at a time: its CPU and run-queue time are the job's, and no other thread
# computes there (its parent watcher wakes for microseconds every half second: lab/procs.py).
PROCESS = Clocks(time.process_time, process_core_wait, shared_gil=False)
# A thread alone in an interpreter with a GIL of its own (a sub-interpreter of the interpreters pool).
# Its thread is named by its native id: the interpreter does not know the pool's thread by name, and
# threading.current_thread() there would make a stand-in Thread at every job (the runner puts the name back).
OWN_GIL_THREAD = Clocks(
    time.thread_time,
    partial(_core_wait, _InterpreterThread()),
    shared_gil=False,
    thread_name=lambda: str(threading.get_native_id()),
)


def blocked_time(run: float, cpu: float, core_wait: float | None, io_wait: float = 0.0) -> float | None:
    """What of `run` was neither computing, nor waiting for a core, nor waiting on purpose; never below 0;
    None without schedstat.

    Blocked on anything but its own waits (workloads/waits.py times those):
    the GIL, a lock, a page fault read from disk, or on a virtual machine
    time its host ran someone else (a guest kernel that accounts steal time
    counts it as neither CPU nor run queue).
    """
    if core_wait is None:
        return None
    return max(0.0, run - cpu - core_wait - io_wait)


def gil_part(blocked: float | None, shared_gil: bool) -> float | None:
    """The part of `blocked` that was the GIL, where that can be told; None where it cannot.

    All of it for a thread that shares its GIL, since with its own waits
    taken out nothing else stops a runnable thread of Python code; 0 for
    one alone with its GIL, which nobody else takes. None with no GIL (a
    free-threaded interpreter) or without a reading.
    """
    if blocked is None or not gil_enabled():
        return None
    return blocked if shared_gil else 0.0

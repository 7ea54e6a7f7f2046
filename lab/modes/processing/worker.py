"""What runs inside a process-pool worker: its initializer and the job wrapper."""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from lab.modes.starts import report_start
from lab.procs import watch_parent
from workloads.clocks import PROCESS, own_threads_schedstat
from workloads.page import database
from workloads.registry import run_timed, warm_up
from workloads.timing import RunRecord

_started: Connection | None = None
_withdrawn: Any = None  # the server's marks of jobs withdrawn (a shared array of job ids: init_pool_worker)

# Slots in that array: a job's mark is its id, in slot id % WITHDRAWN_SLOTS. Two jobs in flight at once whose ids
# share a slot could only lose a mark (the job then runs for nobody), never withdraw the wrong job.
WITHDRAWN_SLOTS = 4096


def init_pool_worker(started: Connection, server: int, database_url: str | None, withdrawn: Any = None) -> None:
    """Initializer of every process-pool worker; `server` is the pid of the server process that started it,
    `page` queries `database_url` on the worker's own connections, and `withdrawn` (a shared array of
    WITHDRAWN_SLOTS job ids) marks the jobs the server took back."""
    global _started, _withdrawn
    _started, _withdrawn = started, withdrawn
    database.use(database_url)  # one job at a time: one connection, opened here, by this process
    # Ctrl-C reaches the whole foreground process group; the server that owns
    # this pool shuts it down in order, so a worker must not die of SIGINT
    # mid-job (that would break the pool and print a traceback per worker).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The server's pid, not getppid(): a server killed while this worker was still importing (the pool being
    # replaced) leaves it adopted by init, and a watch of init would keep it running for ever.
    watch_parent(parent=server)


def warm_pool_worker() -> int:
    """warm_up() (imports, the predict model), then this worker's threads' schedstat files opened, which
    workloads/clocks.py keeps open for every run's split: a worker holds the same descriptors from the first
    job it is given, whichever it is. Its pid."""
    pid = warm_up()
    own_threads_schedstat()
    return pid


def run_in_worker(job_id: int, name: str, params: dict[str, Any]) -> RunRecord | None:
    """Tell the server which worker took job `job_id`, then run it, unless the server has withdrawn it: None.

    The server counts the job's --job-timeout from the time in this message (not
    while the job waits for a worker still starting up), shows the pid as busy
    in /stats, and kills that worker if the job outlives its deadline. One
    system call: a start record written straight to the pipe's descriptor,
    which the server reads when it needs it, without waking for it
    (lab/modes/starts.py).

    A job handed to the pool ahead of its worker and moved by the executor
    into the workers' queue is beyond the executor's cancel; the server takes
    it back by marking it and then reading the start records
    (ProcessRunner._withdraw). Read here after the record is written, the mark
    is seen by every job the server found not begun: whichever of the two
    comes second sees the other's.
    """
    if _started is not None:
        report_start(_started.fileno(), job_id, os.getpid())
    if _withdrawn is not None and _withdrawn[job_id % WITHDRAWN_SLOTS] == job_id:
        return None  # nobody waits for it: its slot frees as soon as the server reads this
    # One job at a time here: the process's CPU time is the job's, BLAS threads included.
    return run_timed(name, params, PROCESS)

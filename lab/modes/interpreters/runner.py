"""The interpreters mode's runner: a pool of sub-interpreters in the server process (PEP 684, PEP 734).

Each sub-interpreter has its own GIL, so pure-Python work runs on every
core in ONE process: the parallelism of a process pool without a second
process, and without pickling through a pipe. What cannot run there is any
extension module that does not support it yet: numpy (and so scikit-learn)
refuses to load in a sub-interpreter, so its entry (__init__.py) refuses the
workloads that need it before they reach the pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import site
import threading
from concurrent.futures import Future
from typing import Any, cast

from lab import ROOT
from lab.machine import cpu_count
from lab.modes.interpreters.worker import executor_class, interpreter_id, record_of, run, unavailable
from lab.modes.pool import PoolRunner, pool_size
from lab.modes.starts import StartReports
from workloads.page.errors import Unavailable
from workloads.registry import WORKLOADS
from workloads.timing import RunRecord

log = logging.getLogger(__name__)

INTERPRETER_POOL = pool_size(
    "--interpreter-pool", "sub-interpreters behind /interpreters, per server process; Python 3.12+", cpu_count, "cores"
)
THREAD_PREFIX = "lab-interp"


def unavailable_inside(error: Exception) -> Unavailable | None:
    """The database's Unavailable (a 503), if `error` carries one out of a sub-interpreter, else None.

    An exception does not cross from a sub-interpreter as itself: the pool
    raises ExecutionFailed, with the original's type name and message.
    """
    info = getattr(error, "excinfo", None)
    if info is not None and getattr(info.type, "__name__", None) == Unavailable.__name__:
        return Unavailable(str(info.msg))
    return None


class InterpreterRunner(PoolRunner):
    """Jobs submitted to one InterpreterPoolExecutor: a thread per interpreter, an interpreter per job."""

    kind = "interpreters"
    timeout_outcome = "Python cannot stop an interpreter's thread, so it runs on and holds its slot until it ends"
    size_setting = INTERPRETER_POOL
    # Four jobs ahead of each interpreter, as the thread and process pools: handed one an interpreter, at ten
    # clients the other eight waited in the gate, and each job's end woke the loop to hand the next over (12.4
    # context switches a request against a bare pool's 7.5; docs/results.md#overhead). A job in the pool's
    # queue can still be withdrawn (cancelled) until a thread takes it; the interpreter that runs it reports its
    # start down a pipe (lab/modes/starts.py), and its deadline counts from then.
    ahead = 4
    lazy_starts = True

    def __init__(self, mode: str, size: int, max_pending: int, job_timeout: float) -> None:
        super().__init__(mode, size, max_pending, job_timeout)
        self._names: dict[int, str] = {}  # the pool's threads' names, by native id
        self._writer = -1  # the start pipe's writing end, which the interpreters write to (its reading end: _starts)

    @staticmethod
    def unavailable() -> str | None:
        return unavailable()

    async def start(self) -> None:
        if unavailable() is not None:
            return  # nothing to start: requests get the reason (run)
        reader, self._writer = os.pipe()
        self._starts = StartReports(reader, self._began)
        # A sub-interpreter starts with the interpreter's default sys.path,
        # without the lab's own directory: the initializer adds it, so that
        # the workloads it is handed (pickled by reference) can be imported.
        self._executor = executor_class()(
            self.size, thread_name_prefix=THREAD_PREFIX, initializer=site.addsitedir, initargs=(str(ROOT),)
        )
        # One job per interpreter, at once: every one is created and imports
        # what the workloads need now, before anything is timed.
        loop = asyncio.get_running_loop()
        ids = await asyncio.gather(*(loop.run_in_executor(self._executor, interpreter_id) for _ in range(self.size)))
        log.info("interpreter pool ready: %d sub-interpreters, ids %s", self.size, sorted(set(ids)))

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        try:
            # (The record's values, or the record, as the pool's future holds them: _submit.)
            record = record_of(await super().run(workload, params))
        except Exception as error:
            gone = unavailable_inside(error)
            if gone is None:
                raise
            raise gone from None
        record["thread"] = self._thread_name(int(record["thread"]))
        return record

    def _thread_name(self, native_id: int) -> str:
        """The name of the pool's thread with this native id: its threads are listed again only for one not
        seen before (every thread of the process, at every job, was a good part of a job's cost)."""
        name = self._names.get(native_id)
        if name is None:
            self._names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
            name = self._names.get(native_id, f"native thread {native_id}")
        return name

    def _began(self, job_id: int, native_id: int, at: float) -> None:
        """An interpreter's report: the pool's thread `native_id` began job `job_id` at `at`."""
        self._started(job_id, self._thread_name(native_id), at)

    def ready_note(self) -> str | None:
        """The pool's size for the start-up log line, where this Python runs one at all."""
        return None if unavailable() is not None else super().ready_note()

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> Future[RunRecord]:
        func = WORKLOADS[workload].func
        # Its result is the record's values (worker.run), made a record again by run(): converted there, not
        # by a callback here, which would be one more turn of the event loop a job.
        future = self.executor.submit(run, func, params, self.database, (job_id, self._writer))
        self._running[job_id].withdraw = future.cancel  # (True while it waits in the pool's queue: it will not run)
        return cast(Future[RunRecord], future)

    async def close(self, wait: bool = True) -> None:
        # A running interpreter cannot be stopped, like a thread; waiting lets
        # every interpreter finish its job and be finalised before the main one.
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)
        if wait and self._starts is not None:
            # Every job has ended: no interpreter writes to the pipe any more. (Not waiting, the process is on its
            # way out, and a descriptor closed under a running job could be another file's by its report.)
            os.close(self._starts.reader)
            os.close(self._writer)
            self._starts, self._writer = None, -1

"""The processing mode's runner: jobs submitted to ONE shared ProcessPoolExecutor behind lab/modes/pool.py's gate.

What its workers run is worker.py; the executor's private parts it reads are
behind lab/modes/processing/executor.py.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, cast

from lab.machine import cpu_count
from lab.modes.pool import PoolRunner, _Job, pool_size
from lab.modes.processing.executor import broken, workers
from lab.modes.processing.worker import WITHDRAWN_SLOTS, init_pool_worker, run_in_worker, warm_pool_worker
from lab.modes.starts import StartReports
from workloads.timing import RunRecord

log = logging.getLogger(__name__)


PROCESS_POOL = pool_size(
    "--process-pool", "worker processes behind /processing, per server process", cpu_count, "cores"
)


class ProcessRunner(PoolRunner):
    """Jobs submitted to ONE shared ProcessPoolExecutor, replaced only when it breaks."""

    kind = "processes"
    timeout_outcome = "its worker process was killed and the pool replaced"
    size_setting = PROCESS_POOL
    # Its workers' start reports wait in their pipe until something needs them (lab/modes/starts.py).
    lazy_starts = True
    # A worker that ends a job finds the next one in its queue, as a bare ProcessPoolExecutor's does, instead
    # of idling while the loop learns of the end and hands the next over. Four more a worker, not one: the
    # executor moves at most one job a worker and one more into the workers' own queue (the rest wait in its
    # own, where it can still cancel them), and with one ahead that queue ran dry between a worker's end and the
    # loop's next hand-over: a worker slept and was woken 2.1 times a job against a bare executor's 1.4, and at
    # ten clients /processing cost 1.31-1.50 of a bare Tornado's, 1.04-1.23 with four (none ahead: 1.46-1.51;
    # docs/results.md#overhead). A job in the workers' queue is beyond the executor's cancel: the server
    # withdraws it itself (_withdraw).
    ahead = 4

    def __init__(self, mode: str, size: int, max_pending: int, job_timeout: float) -> None:
        super().__init__(mode, size, max_pending, job_timeout)
        self.counts["pool_restarts"] = 0
        self._pipe: tuple[Connection, Connection] | None = None  # its start pipe (_start_pipe), both ends
        self._warming: asyncio.Task[None] | None = None
        # Jobs withdrawn, shared with every worker of every pool this runner starts (worker.py's run_in_worker).
        # (-1 where none was: job ids start at 0.)
        self._withdrawn = multiprocessing.get_context("spawn").RawArray("q", [-1] * WITHDRAWN_SLOTS)

    def _new_executor(self) -> ProcessPoolExecutor:
        # spawn, not fork: forking a process that runs an IOLoop and threads
        # copies their locks mid-use (the hazard Tornado's docs warn about).
        return ProcessPoolExecutor(
            self.size,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=init_pool_worker,
            initargs=(self._start_pipe(), os.getpid(), self.database, self._withdrawn),
        )

    def _start_pipe(self) -> Connection:
        """The writing end of the pipe its workers report the jobs they take into (lab/modes/starts.py), made
        at the first call.

        One pipe for every pool this runner starts: a replaced pool's workers
        live on for a moment (its executor ends them once it sees itself
        broken), and one that takes a job meanwhile writes its start record;
        to a closed pipe that write failed the job (EPIPE), and its record,
        unread, was lost to a withdrawal.
        """
        if self._pipe is None:
            reader, writer = multiprocessing.get_context("spawn").Pipe(duplex=False)
            self._pipe = (reader, writer)
            self._starts = StartReports(reader.fileno(), self._started)
        return self._pipe[1]

    def _close_pipe(self) -> None:
        if self._pipe is not None:
            reader, writer = self._pipe
            reader.close()
            writer.close()
            self._pipe = self._starts = None

    async def start(self) -> None:
        self._executor = self._new_executor()
        await self._warm(self._executor)

    async def _warm(self, executor: Executor) -> None:
        # One warm-up job per worker makes every worker start now and pay its
        # imports and the predict model before anything is timed.
        loop = asyncio.get_running_loop()
        pids = await asyncio.gather(*(loop.run_in_executor(executor, warm_pool_worker) for _ in range(self.size)))
        log.info("process pool ready: %d workers, pids %s", self.size, sorted(set(pids)))

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> Future[RunRecord]:
        try:
            future = self.executor.submit(run_in_worker, job_id, workload, params)
        except BrokenProcessPool:
            # A worker died while idle (OOM killer, kill -9) and the executor
            # only says so now: replace it and give this job to the new pool.
            self.on_broken()
            future = self.executor.submit(run_in_worker, job_id, workload, params)
        record = self._running[job_id]
        record.withdraw = partial(self._withdraw, job_id, record, future)
        # (None only for a job withdrawn, whose client has gone: nobody reads it.)
        return cast(Future[RunRecord], future)

    def _withdraw(self, job_id: int, job: _Job, future: Future[RunRecord | None]) -> bool:
        """Take back job `job_id` (`job` its record) if no worker has begun it: True if it will not run.

        Still in the executor's own queue, the executor cancels it. Moved to the
        workers' queue, it is marked, and then the start records are read: a
        worker that had not written its record by then sees the mark and skips the
        job (worker.py's run_in_worker). So is a job of a pool that broke: its
        record stays where start records reach it until its request has decided
        (PoolRunner._failed), and a worker that took it wrote its record.
        """
        if future.cancel():
            return True
        self._withdrawn[job_id % WITHDRAWN_SLOTS] = job_id
        self._refresh_starts()
        return job.began is None

    def on_timeout(self, job_id: int) -> None:
        # Like uWSGI's harakiri: the stuck worker must go, or every later job
        # queues behind it. ProcessPoolExecutor cannot lose one worker without
        # breaking as a whole (it then terminates the others itself), so the
        # pool is replaced; jobs running beside the stuck one get 503.
        executor = self._executor
        if not isinstance(executor, ProcessPoolExecutor):
            return
        job = self._running.get(job_id)
        worker = job.worker if job else None
        stuck = [p for p in workers(executor) if worker is None or p.pid == worker]
        for process in stuck:
            process.kill()
        self._replace(executor, f"job ran over --job-timeout; killed worker {[p.pid for p in stuck]}")

    def on_broken(self) -> None:
        executor = self._executor
        if isinstance(executor, ProcessPoolExecutor) and broken(executor):
            self._replace(executor, "a worker died")

    def _replace(self, old: ProcessPoolExecutor, why: str) -> None:
        if self._executor is not old:
            return  # another request replaced it already
        old.shutdown(wait=False, cancel_futures=True)
        self._executor = new = self._new_executor()
        self.counts["pool_restarts"] += 1
        log.warning("process pool replaced: %s", why)
        # Kept, so the task is not garbage-collected mid-way and its failure is logged.
        self._warming = asyncio.get_running_loop().create_task(self._warm(new))
        self._warming.add_done_callback(_log_failure)

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        if isinstance(self._executor, ProcessPoolExecutor):
            snap["worker_pids"] = sorted(p.pid for p in workers(self._executor) if p.pid is not None)
        return snap

    async def close(self, wait: bool = True) -> None:
        executor, self._executor = self._executor, None
        if isinstance(executor, ProcessPoolExecutor):
            if not wait:
                for process in workers(executor):
                    process.kill()
            executor.shutdown(wait=True, cancel_futures=True)
        self._close_pipe()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("warming the replacement process pool failed", exc_info=task.exception())

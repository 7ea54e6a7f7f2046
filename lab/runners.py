"""How a workload runs in each mode: on the IOLoop, in the thread pool, in the process pool.

Both pools sit behind the same admission gate (`Slots`): at most `size`
jobs are handed to an executor at once, the rest wait here, in order, where
they can be counted (/stats), bounded (--max-pending) and cancelled when
their client goes away. An executor's own queue is invisible and cannot
forget work nobody wants any more.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
import time
from collections import deque
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol, Self

from lab.errors import LabError
from lab.worker import init_pool_worker, run_in_worker
from workloads.registry import RunRecord, run_timed, warm_up

if TYPE_CHECKING:
    from lab.config import Config

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1


class Runner(Protocol):
    """How one mode runs a workload in a server process (built by lab.modes.build_runners)."""

    mode: str
    inline: bool  # runs on the event loop's own thread, start to end
    idle: asyncio.Event  # set while no job runs or waits

    async def start(self) -> None: ...

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord: ...

    def snapshot(self) -> dict[str, Any]: ...

    def facts(self) -> dict[str, Any]:
        """What this mode adds to the server's facts (/stats "server", and the ideal's input): usually nothing."""
        ...

    async def close(self, wait: bool = True) -> None: ...


class BlockingRunner:
    """Runs the workload right here, on the IOLoop thread: nothing else is served meanwhile."""

    mode = "blocking"
    inline = True

    def __init__(self) -> None:
        self.idle = asyncio.Event()
        self.idle.set()  # a blocking run is over before anything can look

    @classmethod
    def from_config(cls, config: Config) -> Self:
        return cls()

    async def start(self) -> None:
        # This process is the worker for /blocking and /threading: pay its
        # one-off costs (the predict model) now, as the process pool's workers
        # do, so that the first timed predict does not include training.
        warm_up()

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        return run_timed(workload, params)

    def snapshot(self) -> dict[str, Any]:
        return {"kind": "event loop", "size": 1}

    def facts(self) -> dict[str, Any]:
        return {}

    async def close(self, wait: bool = True) -> None:
        pass


class Slots:
    """A FIFO gate in front of an executor: `size` jobs run, the others wait in order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.idle = asyncio.Event()  # no job holds or waits for a slot
        self.idle.set()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        self.idle.clear()
        if self.busy < self.size and not self._waiters:
            self.busy += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot straight to us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
                self._update_idle()
            raise

    def release(self) -> None:
        if self.busy <= self.size:  # (more may run than `size` allows just after a resize down)
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.busy -= 1
        self._update_idle()

    def resize(self, size: int) -> None:
        """A new size (a cluster that gained or lost workers): waiters take any room it makes."""
        self.size = size
        while self.busy < self.size and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.busy += 1
                waiter.set_result(None)

    def _update_idle(self) -> None:
        if not self.busy and not self._waiters:
            self.idle.set()


@dataclass
class _Job:
    """A job handed to an executor; `started` resolves when a worker really begins it."""

    started: asyncio.Future[float]
    worker: int | str | None = None


class PoolRunner:
    """What both pool modes share: admission, deadlines, cancellation, counters."""

    mode: str
    kind: str
    timeout_outcome: str
    inline = False

    def __init__(self, size: int, max_pending: int, job_timeout: float) -> None:
        self.size = size
        self.max_pending = max_pending
        self.job_timeout = job_timeout
        self.slots = Slots(size)
        self.idle = self.slots.idle
        self.counts = dict.fromkeys(("submitted", "rejected", "timed_out", "cancelled_waiting", "broken"), 0)
        self._executor: Executor | None = None
        self._job_ids = itertools.count()
        self._running: dict[int, _Job] = {}

    @classmethod
    def pool_size(cls, config: Config) -> int:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: Config) -> Self:
        return cls(cls.pool_size(config), config.max_pending, config.job_timeout)

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            raise LabError(503, f"the {self.mode} pool is shut down", retry_after=RETRY_AFTER_S)
        return self._executor

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        if self.slots.busy >= self.size and self.slots.waiting >= self.max_pending:
            self.counts["rejected"] += 1
            raise LabError(
                503,
                f"{self.mode} pool is full: {self.slots.busy} jobs running and "
                f"{self.slots.waiting} waiting (--max-pending {self.max_pending}); retry later",
                retry_after=RETRY_AFTER_S,
            )
        try:
            await self.slots.acquire()
        except asyncio.CancelledError:
            self.counts["cancelled_waiting"] += 1  # its client left before it started
            raise
        job_id = next(self._job_ids)
        record = self._running[job_id] = _Job(asyncio.get_running_loop().create_future())
        try:
            job = self._submit(job_id, workload, params)
        except BaseException:
            del self._running[job_id]
            self.slots.release()
            raise
        self.counts["submitted"] += 1

        def ended(_: object) -> None:
            # The slot frees when the job has really ended, not when its
            # client stopped waiting: a timed-out thread still holds a core.
            if not job.cancelled():
                job.exception()  # mark it retrieved; a waiting client still gets it
            del self._running[job_id]
            self.slots.release()

        job.add_done_callback(ended)
        try:
            # The deadline counts from the moment a worker starts the job: a
            # worker still starting up (a replaced pool) is not the job's fault.
            either: list[asyncio.Future[Any]] = [job, record.started]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            return await asyncio.wait_for(asyncio.shield(job), self.job_timeout)
        except TimeoutError:
            self.counts["timed_out"] += 1
            self.on_timeout(job_id)
            raise LabError(
                504, f"{workload} ran longer than --job-timeout {self.job_timeout:g} s; {self.timeout_outcome}"
            ) from None
        except BrokenProcessPool:
            self.counts["broken"] += 1
            self.on_broken()
            raise LabError(
                503,
                "the process pool broke while running this job (a worker died or was killed); "
                "it is being replaced, retry",
                retry_after=RETRY_AFTER_S,
            ) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not job.cancelled() or (task is not None and task.cancelling()):
                # Our client left (see LabHandler.until_disconnect). A job no
                # worker has started yet need not run at all.
                if not record.started.done() and self.on_abandoned(job_id):
                    self.counts["cancelled_waiting"] += 1
                raise
            # The executor dropped the job: its pool was replaced before a worker took it.
            raise LabError(
                503, "the pool was replaced before this job started; retry", retry_after=RETRY_AFTER_S
            ) from None

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        raise NotImplementedError

    def _started(self, job_id: int, worker: int | str) -> None:
        job = self._running.get(job_id)
        if job is not None and not job.started.done():
            job.worker = worker
            job.started.set_result(time.time())

    def on_timeout(self, job_id: int) -> None:
        pass

    def on_abandoned(self, job_id: int) -> bool:
        """Nobody waits for this job any more and no worker has started it: withdraw it if possible.

        The gate hands an executor no more jobs than it has workers, so a
        pool job is never left queued inside it; a cluster's scheduler may
        still hold one (another client's tasks run first). True if withdrawn.
        """
        return False

    def on_broken(self) -> None:
        pass

    def facts(self) -> dict[str, Any]:
        return {}

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        jobs = self._running.values()
        since = [job.started.result() for job in jobs if job.started.done()]
        return {
            "kind": self.kind,
            "size": self.size,
            "running": self.slots.busy,
            "waiting": self.slots.waiting,
            "max_pending": self.max_pending,
            "busy_workers": sorted({job.worker for job in jobs if job.worker is not None}, key=str),
            "longest_running_s": round(now - min(since), 3) if since else None,
            **self.counts,
        }


class ThreadRunner(PoolRunner):
    """`run_in_executor` on one shared ThreadPoolExecutor."""

    mode = "threading"
    kind = "threads"
    timeout_outcome = "Python cannot stop a thread, so it runs on and holds its pool slot until it ends"

    @classmethod
    def pool_size(cls, config: Config) -> int:
        return config.thread_pool

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="lab-thread")

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()

        def job() -> RunRecord:
            loop.call_soon_threadsafe(self._started, job_id, threading.current_thread().name)
            return run_timed(workload, params)

        return loop.run_in_executor(self.executor, job)

    async def close(self, wait: bool = True) -> None:
        # Waiting or not, a running thread cannot be stopped and the
        # interpreter joins pool threads at exit; server.py ends the process
        # with os._exit if one is still busy when the grace period is over.
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class ProcessRunner(PoolRunner):
    """`run_in_executor` on ONE shared ProcessPoolExecutor, replaced only when it breaks."""

    mode = "processing"
    kind = "processes"
    timeout_outcome = "its worker process was killed and the pool replaced"

    @classmethod
    def pool_size(cls, config: Config) -> int:
        return config.process_pool

    def __init__(self, size: int, max_pending: int, job_timeout: float) -> None:
        super().__init__(size, max_pending, job_timeout)
        self.counts["pool_restarts"] = 0
        self._pipe: tuple[Connection, Connection] | None = None
        self._warming: asyncio.Task[None] | None = None

    def _new_executor(self) -> ProcessPoolExecutor:
        # spawn, not fork: forking a process that runs an IOLoop and threads
        # copies their locks mid-use (the hazard Tornado's docs warn about).
        context = multiprocessing.get_context("spawn")
        self._close_pipe()
        reader, writer = context.Pipe(duplex=False)
        self._pipe = (reader, writer)
        asyncio.get_running_loop().add_reader(reader.fileno(), self._drain_started, reader)
        return ProcessPoolExecutor(self.size, mp_context=context, initializer=init_pool_worker, initargs=(writer,))

    def _drain_started(self, reader: Connection) -> None:
        while reader.poll():
            job_id, pid = reader.recv()
            self._started(job_id, pid)

    def _close_pipe(self) -> None:
        if self._pipe is not None:
            reader, writer = self._pipe
            asyncio.get_running_loop().remove_reader(reader.fileno())
            reader.close()
            writer.close()
            self._pipe = None

    async def start(self) -> None:
        self._executor = self._new_executor()
        await self._warm(self._executor)

    async def _warm(self, executor: Executor) -> None:
        # One warm-up job per worker makes every worker start now and pay its
        # imports and the predict model before anything is timed.
        loop = asyncio.get_running_loop()
        pids = await asyncio.gather(*(loop.run_in_executor(executor, warm_up) for _ in range(self.size)))
        log.info("process pool ready: %d workers, pids %s", self.size, sorted(set(pids)))

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()
        try:
            return loop.run_in_executor(self.executor, run_in_worker, job_id, workload, params)
        except BrokenProcessPool:
            # A worker died while idle (OOM killer, kill -9) and the executor
            # only says so now: replace it and give this job to the new pool.
            self.on_broken()
            return loop.run_in_executor(self.executor, run_in_worker, job_id, workload, params)

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
        stuck = [p for p in _workers(executor) if worker is None or p.pid == worker]
        for process in stuck:
            process.kill()
        self._replace(executor, f"job ran over --job-timeout; killed worker {[p.pid for p in stuck]}")

    def on_broken(self) -> None:
        executor = self._executor
        if isinstance(executor, ProcessPoolExecutor) and getattr(executor, "_broken", False):
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
            snap["worker_pids"] = sorted(p.pid for p in _workers(self._executor) if p.pid is not None)
        return snap

    async def close(self, wait: bool = True) -> None:
        executor, self._executor = self._executor, None
        if isinstance(executor, ProcessPoolExecutor):
            if not wait:
                for process in _workers(executor):
                    process.kill()
            executor.shutdown(wait=True, cancel_futures=True)
        self._close_pipe()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("warming the replacement process pool failed", exc_info=task.exception())


def _workers(executor: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    # _processes (pid -> Process) is private but stable since Python 3.2;
    # Python 3.14's terminate_workers() is the public way to do this.
    processes: dict[int, multiprocessing.process.BaseProcess] = getattr(executor, "_processes", None) or {}
    return list(processes.values())

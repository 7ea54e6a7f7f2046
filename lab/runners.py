"""How a workload runs in the local modes: on the IOLoop, in the thread pool, in the process pool.

Both pools sit behind lab/pool.py's admission gate; each declares the flag
that sizes it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol, Self

from lab.config import cpu_count
from lab.pool import PoolRunner
from lab.settings import Setting, count
from lab.worker import init_pool_worker, run_in_worker
from workloads.registry import run_timed, warm_up
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from lab.config import Config

log = logging.getLogger(__name__)


class Runner(Protocol):
    """How one mode runs a workload in a server process (built by lab.modes.build_runners)."""

    mode: str  # its name in the registry, given by build_runners
    inline: bool  # runs on the event loop's own thread, start to end
    idle: asyncio.Event  # set while no job runs or waits

    async def start(self) -> None: ...

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord: ...

    def snapshot(self) -> dict[str, Any]:
        """Its part of /stats "pools" (uwsgitop's view); empty: nothing to show, left out."""
        ...

    def facts(self) -> dict[str, Any]:
        """What this mode adds to the server's facts (/stats "server", and the ideal's input)."""
        ...

    def ready_note(self) -> str | None:
        """A few words for the start-up log line ("thread pool 6"), or None."""
        ...

    async def close(self, wait: bool = True) -> None: ...


def default_thread_pool() -> int:
    # The size Python's own default executor picks (concurrent.futures docs).
    return min(32, cpu_count() + 4)


THREAD_POOL = Setting(
    "--thread-pool",
    count(1),
    default_factory=default_thread_pool,
    metavar="N",
    help="threads behind /threading, per server process (default: min(32, cores+4) = %(default)s)",
)
PROCESS_POOL = Setting(
    "--process-pool",
    count(1),
    default_factory=cpu_count,
    metavar="N",
    help="worker processes behind /processing, per server process (default: cores = %(default)s)",
)


class BlockingRunner:
    """Runs the workload right here, on the IOLoop thread: nothing else is served meanwhile."""

    inline = True
    settings = ()

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.idle = asyncio.Event()
        self.idle.set()  # a blocking run is over before anything can look

    @classmethod
    def from_config(cls, mode: str, config: Config) -> Self:
        return cls(mode)

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

    def ready_note(self) -> str | None:
        return None

    async def close(self, wait: bool = True) -> None:
        pass


class ThreadRunner(PoolRunner):
    """`run_in_executor` on one shared ThreadPoolExecutor."""

    kind = "threads"
    timeout_outcome = "Python cannot stop a thread, so it runs on and holds its pool slot until it ends"
    settings = (THREAD_POOL,)
    size_setting = THREAD_POOL

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
        # interpreter joins pool threads at exit; lab/main.py ends the process
        # with os._exit if one is still busy when the grace period is over.
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class ProcessRunner(PoolRunner):
    """`run_in_executor` on ONE shared ProcessPoolExecutor, replaced only when it breaks."""

    kind = "processes"
    timeout_outcome = "its worker process was killed and the pool replaced"
    settings = (PROCESS_POOL,)
    size_setting = PROCESS_POOL

    def __init__(self, mode: str, size: int, max_pending: int, job_timeout: float) -> None:
        super().__init__(mode, size, max_pending, job_timeout)
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

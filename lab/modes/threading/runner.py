"""The threading mode's runner: jobs submitted to one shared ThreadPoolExecutor behind lab/modes/pool.py's gate."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lab.machine import cpu_count
from lab.modes.pool import Handed, PoolRunner, pool_size
from workloads.clocks import thread_core_wait
from workloads.registry import run_timed
from workloads.timing import RunRecord


def default_thread_pool() -> int:
    # The size Python's own default executor picks (concurrent.futures docs).
    return min(32, cpu_count() + 4)


THREAD_POOL = pool_size(
    "--thread-pool", "threads behind /threading, per server process", default_thread_pool, "min(32, cores+4)"
)


START_THREADS_TIMEOUT_S = 60.0


class ThreadRunner(PoolRunner):
    """Jobs submitted to one shared ThreadPoolExecutor, four ahead of each thread."""

    kind = "threads"
    timeout_outcome = "Python cannot stop a thread, so it runs on and holds its pool slot until it ends"
    size_setting = THREAD_POOL
    # A thread that ends a job takes the next one from the executor's queue itself, as a bare
    # ThreadPoolExecutor's threads do. Handed over by the gate when a slot freed, each job made the event loop
    # wake for the end of the one before and then woke an idle thread: at ten clients /threading cost 1.36-1.42
    # of a bare Tornado's, 1.14-1.17 with a job ahead. Four ahead, as the process pool: with more clients than
    # two a thread, one ahead still left threads idle between jobs (two threads, ten clients: 1.55 of a bare
    # Tornado's with one, 1.21-1.22 with four; docs/results.md#overhead). A job in that queue can still be
    # withdrawn until a thread takes it.
    ahead = 4
    # Its threads write their start into the job's record; the loop reads it when it needs it.
    lazy_starts = True

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="lab-thread")
        await self._start_every_thread(self._executor)

    async def _start_every_thread(self, executor: ThreadPoolExecutor) -> None:
        """Every thread of the pool, started now and not at the first moment of load that needs it.

        A ThreadPoolExecutor starts a thread only when a job finds none idle, so
        a pool grows at its first peak, which may come an hour in: in a soak a
        server's pool went from 3 threads to 6 twelve minutes in, and its RSS
        climbed 10 MiB after them, each new thread filling a malloc arena of its
        own. Started at once, a process's threads are the same from its first
        request, and so is what a pool thread's memory costs. Each waits at a
        barrier until all have come, so no thread can take two of these jobs.
        """
        everyone = threading.Barrier(self.size)

        def arrive() -> None:
            thread_core_wait()  # its schedstat file opened now, not at its first job (workloads/clocks.py)
            everyone.wait(START_THREADS_TIMEOUT_S)

        loop = asyncio.get_running_loop()
        try:
            waits = [loop.run_in_executor(executor, arrive) for _ in range(self.size)]
            # A machine too busy to start them in a minute gets a broken barrier and a pool that grows as it would.
            await asyncio.gather(*waits, return_exceptions=True)
        except BaseException:  # a stop signal during start-up, or a thread that could not start
            everyone.abort()  # the threads already waiting go back to the pool, so that it can be shut down
            raise

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> Handed:
        running = self._running[job_id]

        def job() -> RunRecord:
            # Which thread runs it and since when, for /stats and the deadline, written here without waking the
            # event loop: a message to the loop per job would be one more wake-up, and under GIL load one more
            # wait for the GIL. (time.monotonic() is the event loop's clock.)
            running.worker = threading.current_thread().name
            running.began = time.monotonic()
            return run_timed(workload, params)

        handed = self.executor.submit(job)
        running.withdraw = handed.cancel  # (True while it waits in the executor's queue: it will not run)
        return handed

    async def close(self, wait: bool = True) -> None:
        # Waiting or not, a running thread cannot be stopped and the
        # interpreter joins pool threads at exit; lab/serve/main.py ends the process
        # with os._exit if one is still busy when the grace period is over.
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

"""The threading mode's pool: all its threads from the start, so none is born mid-run."""

from __future__ import annotations

import asyncio
import threading

from lab.modes.threading.runner import ThreadRunner
from tests.procs import schedstat_files_open


def _pool_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith("lab-thread")}


def test_a_started_pool_has_every_thread_before_its_first_job() -> None:
    async def started() -> set[threading.Thread]:
        runner = ThreadRunner("threading", size=5, max_pending=10, job_timeout=30.0)
        await runner.start()
        try:
            return _pool_threads()
        finally:
            await runner.close()

    # (Another test's pool, in this process, may still be ending: only the new threads count.)
    # A ThreadPoolExecutor left to itself would have started none yet: one starts for a job that finds none idle.
    before = _pool_threads()
    assert len(asyncio.run(started()) - before) == 5


def test_each_started_thread_holds_its_schedstat_file_before_its_first_job() -> None:
    """A thread's split reads its schedstat through a file kept open (workloads/clocks.py): opened at start,
    a pool's descriptors are the same from its first request on, not one more for each thread's first job."""

    async def started() -> dict[int, int]:
        runner = ThreadRunner("threading", size=4, max_pending=10, job_timeout=30.0)
        await runner.start()
        try:
            new = {thread.native_id for thread in _pool_threads() - before if thread.native_id}
            return {tid: schedstat_files_open(tid) for tid in new}
        finally:
            await runner.close()

    before = _pool_threads()
    held = asyncio.run(started())
    assert len(held) == 4
    assert set(held.values()) == {1}, held  # one file each, open before any job

"""The threading mode's pool: all its threads from the start, so none is born mid-run."""

from __future__ import annotations

import asyncio
import threading

from lab.modes.threading.runner import ThreadRunner


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

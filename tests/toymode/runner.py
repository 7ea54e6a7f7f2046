"""The toy mode's runner: a pool of its own size, declared by its own flag, that starts a fresh thread per job."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from lab.modes.pool import PoolRunner
from lab.settings import Setting, count
from workloads.registry import run_timed
from workloads.timing import RunRecord

TOY_POOL = Setting(
    "--toy-pool", count(1), 3, metavar="N", help="toys that run at once, per server process (default: %(default)s)"
)


class ToyRunner(PoolRunner):
    """A pool of `--toy-pool` slots; each job gets a new thread."""

    kind = "a thread per job"
    timeout_outcome = "its thread runs on"
    settings = (TOY_POOL,)
    size_setting = TOY_POOL

    async def start(self) -> None:
        pass

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()

        def job() -> RunRecord:
            loop.call_soon_threadsafe(self._started, job_id, threading.current_thread().name)
            return run_timed(workload, params)

        return asyncio.ensure_future(asyncio.to_thread(job))

    async def close(self, wait: bool = True) -> None:
        pass

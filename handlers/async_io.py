"""GET /async?delay=S&fanout=K: await K concurrent calls to the upstream on the IOLoop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from handlers.base import LabHandler
from handlers.envelope import envelope
from lab.modes import ASYNC_PARAMS
from workloads.params import parse_params


class AsyncHandler(LabHandler):
    stats_mode = "async"

    async def get(self) -> None:
        params = self.params(lambda query: parse_params("async", ASYNC_PARAMS, query))
        self.claim("async", "upstream")  # waiting takes none of the process: accept more
        started = time.time()
        replies = await self.until_disconnect(self._fan_out(params["delay"], params["fanout"]))
        finished = time.time()
        self.write(
            envelope(
                mode="async",
                workload="upstream",
                params=params,
                result={"calls": replies},
                server_pid=self.services.pid,
                task_id=self.services.task_id,
                # The waiting happens here: one thread, the IOLoop's, holds
                # every pending call at once.
                worker_pid=self.services.pid,
                worker_thread="MainThread",
                received=self.received,
                started=started,
                finished=finished,
                cpu=None,  # nothing ran on anyone's behalf: the calls only waited
            )
        )

    async def _fan_out(self, delay: float, fanout: int) -> list[dict[str, Any]]:
        upstream = self.services.upstream
        calls = [asyncio.ensure_future(upstream.delay(delay)) for _ in range(fanout)]
        try:
            return await asyncio.gather(*calls)
        except BaseException:
            for call in calls:  # one failed or we were cancelled: the rest are unwanted
                call.cancel()
            raise


routes = [(r"/async/?", AsyncHandler)]

"""GET /async?delay=S&fanout=K: await K concurrent calls to the upstream on the IOLoop."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tornado.httpclient import HTTPClientError
from tornado.simple_httpclient import HTTPTimeoutError

from handlers.base import LabHandler
from lab.envelope import envelope
from lab.errors import LabError
from workloads.params import FloatParam, IntParam, ParamError, parse_params

ASYNC_PARAMS = (
    FloatParam("delay", 1.0, 0.0, 30.0, "seconds the upstream waits before answering"),
    IntParam("fanout", 1, 1, 50, "concurrent upstream calls awaited together"),
)


class AsyncHandler(LabHandler):
    stats_mode = "async"

    async def get(self) -> None:
        try:
            params = parse_params("async", ASYNC_PARAMS, self.query)
        except ParamError as error:
            raise LabError(400, error.message) from None
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
            )
        )

    async def _fan_out(self, delay: float, fanout: int) -> list[dict[str, Any]]:
        calls = [asyncio.ensure_future(self._call(delay)) for _ in range(fanout)]
        try:
            return await asyncio.gather(*calls)
        except BaseException:
            for call in calls:  # one failed or we were cancelled: the rest are unwanted
                call.cancel()
            raise

    async def _call(self, delay: float) -> dict[str, Any]:
        url = f"{self.services.upstream_url}/delay?seconds={delay!r}"
        try:
            reply = await self.services.http.fetch(url)
        except HTTPTimeoutError:
            raise LabError(
                504,
                f"upstream {self.services.upstream_url} did not answer within "
                f"{self.services.config.upstream_timeout:g} s (--upstream-timeout)",
            ) from None
        except HTTPClientError as error:
            raise LabError(502, f"upstream {self.services.upstream_url} answered {error.code}") from None
        except OSError as error:
            why = error.strerror or error
            raise LabError(502, f"upstream {self.services.upstream_url} unreachable: {why}") from None
        body: dict[str, Any] = json.loads(reply.body)
        return body


routes = [(r"/async/?", AsyncHandler)]

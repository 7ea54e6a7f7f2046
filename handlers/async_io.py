"""GET /async?delay=S&fanout=K: await K concurrent calls to the upstream on the IOLoop."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tornado.httpclient import HTTPClientError
from tornado.simple_httpclient import HTTPTimeoutError

from handlers.base import LabHandler
from handlers.envelope import envelope
from lab.errors import LabError
from lab.modes import ASYNC_PARAMS
from workloads.params import parse_params


class AsyncHandler(LabHandler):
    stats_mode = "async"

    async def get(self) -> None:
        params = self.params(lambda query: parse_params("async", ASYNC_PARAMS, query))
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
        upstream, allowance = self.services.upstream_url, self.services.config.upstream_timeout
        try:
            # The delay is asked for, not a fault: the timeout is the silence beyond it.
            reply = await self.services.http.fetch(
                f"{upstream}/delay?seconds={delay!r}", request_timeout=delay + allowance
            )
        except HTTPTimeoutError:
            raise LabError(
                504, f"upstream {upstream} did not answer within {allowance:g} s (--upstream-timeout) of the delay"
            ) from None
        except HTTPClientError as error:
            raise LabError(502, f"upstream {upstream} answered {error.code}") from None
        except OSError as error:
            raise LabError(502, f"upstream {upstream} unreachable: {error.strerror or error}") from None
        try:
            body = json.loads(reply.body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise LabError(502, f"upstream {upstream} answered something that is not a JSON object")
        return body


routes = [(r"/async/?", AsyncHandler)]

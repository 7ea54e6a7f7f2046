"""The async mode: `fanout` calls to the upstream, awaited together on the event loop; nothing computes.

The upstream is where lab/serve/main.py says (config.upstream: --upstream, or the
embedded one it started); lab/modes/upstream/client.py is how it is called.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Self

from lab.modes.upstream.client import Upstream
from workloads.timing import RunRecord, waited

if TYPE_CHECKING:
    from lab.modes.contract import ServerConfig


class AsyncRunner:
    """Awaits the upstream: one thread, the event loop's, holds every pending call at once."""

    inline = False
    settings = ()  # its flags, --upstream*, are the server's: lab/serve/main.py starts the embedded upstream

    def __init__(self, mode: str, url: str | None, client: str, allowance: float) -> None:
        self.mode = mode
        self.url = url
        self.client = client
        self.allowance = allowance
        self.idle = asyncio.Event()
        self.idle.set()  # its calls belong to requests, which the server waits for
        self._upstream: Upstream | None = None

    @classmethod
    def from_config(cls, mode: str, config: ServerConfig) -> Self:
        return cls(mode, config.upstream, config.upstream_client, config.upstream_timeout)

    async def start(self) -> None:
        if self.url is None:
            raise RuntimeError("no upstream URL: lab/serve/main.py starts the embedded upstream before the runners")
        self._upstream = Upstream(self.url, self.client, self.allowance)

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        started = time.time()
        replies = await self._fan_out(params["delay"], params["fanout"])
        # The waiting happens here, in the server process, on the loop's thread.
        return waited({"calls": replies}, started)

    async def _fan_out(self, delay: float, fanout: int) -> list[dict[str, Any]]:
        upstream = self._upstream
        if upstream is None:
            raise RuntimeError("the async runner was not started")
        if fanout == 1:  # the usual call: no task and no gather, which a crowd of waits pays for each
            return [await upstream.delay(delay)]
        calls = [asyncio.ensure_future(upstream.delay(delay)) for _ in range(fanout)]
        try:
            return await asyncio.gather(*calls)
        except BaseException:
            for call in calls:  # one failed or we were cancelled: the rest are unwanted
                call.cancel()
            raise

    def snapshot(self) -> dict[str, Any]:
        return {}  # no pool: its calls are requests in flight

    def facts(self) -> dict[str, Any]:
        return {"upstream": self.url, "upstream_client": self.client}

    def ready_note(self) -> str | None:
        return None  # the start-up line names the upstream, a server-wide setting

    async def close(self, wait: bool = True) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

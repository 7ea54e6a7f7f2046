"""The async mode: `fanout` calls to the upstream, awaited together on the event loop; nothing computes.
Or one of the lab's workloads written to be awaited (/async/mix): its computing on the loop, its waits awaited.

The upstream is where lab/serve/main.py says (config.upstream: --upstream, or the
embedded one it started); lab/modes/upstream/client.py is how it is called. Each
request is admitted against the process's descriptor budget first
(lab/web/descriptors.py): beyond it, 503 + Retry-After.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Self

from lab.modes.upstream import UPSTREAM
from lab.modes.upstream.client import DEFAULT_IDLE_S, Upstream
from lab.modes.upstream.settings import UPSTREAM_CLIENT, UPSTREAM_IDLE, UPSTREAM_TIMEOUT
from lab.web.descriptors import DescriptorBudget, open_files_limit
from workloads.registry import await_timed
from workloads.timing import RunRecord, waited

if TYPE_CHECKING:
    from lab.modes.contract import ServerConfig


class AsyncRunner:
    """Awaits the upstream: one thread, the event loop's, holds every pending call at once."""

    inline = False
    # How it calls the upstream; where the upstream is (--upstream) is the server's to say, as
    # lab/serve/main.py starts the embedded one before any fork.
    settings = (UPSTREAM_CLIENT, UPSTREAM_TIMEOUT, UPSTREAM_IDLE)

    def __init__(
        self,
        mode: str,
        url: str | None,
        client: str,
        allowance: float,
        *,
        processes: int = 1,
        idle: float = DEFAULT_IDLE_S,
    ) -> None:
        self.mode = mode
        self.url = url
        self.client = client
        self.allowance = allowance
        self.idle_timeout = idle  # --upstream-idle
        self.processes = processes  # server processes sharing the upstream
        self.idle = asyncio.Event()
        self.idle.set()  # its calls belong to requests, which the server waits for
        self.budget = DescriptorBudget(open_files_limit(), processes)
        self._upstream: Upstream | None = None
        self.awaiting = 0  # awaited workloads in flight

    @classmethod
    def from_config(cls, mode: str, config: ServerConfig) -> Self:
        return cls(
            mode,
            config.upstream,
            config[UPSTREAM_CLIENT],
            config[UPSTREAM_TIMEOUT],
            processes=config.process_count,
            idle=config[UPSTREAM_IDLE],
        )

    async def start(self) -> None:
        if self.url is None:
            raise RuntimeError("no upstream URL: lab/serve/main.py starts the embedded upstream before the runners")
        self._upstream = Upstream(self.url, self.client, self.allowance, self.idle_timeout)
        # The limit as lab/serve/main.py left it (raised), read in the process that serves.
        self.budget = DescriptorBudget(open_files_limit(), self.processes)

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        if workload != UPSTREAM:
            return await self._awaited(workload, params)
        started = time.time()
        fanout = params["fanout"]
        upstream = self._upstream
        if upstream is None:
            raise RuntimeError("the async runner was not started")
        upstream.trim(self.budget.admit(fanout, upstream.idle))  # 503 beyond the budget
        try:
            replies = await _fan_out(upstream, params["delay"], fanout)
        finally:
            self.budget.release(fanout)
        # The waiting happens here, in the server process, on the loop's thread.
        return waited({"calls": replies}, started)

    async def _awaited(self, workload: str, params: dict[str, Any]) -> RunRecord:
        """One of the lab's workloads written to be awaited (/async/mix), on this loop, timed by its own steps."""
        self.awaiting += 1
        try:
            return await await_timed(workload, params)
        finally:
            self.awaiting -= 1

    def snapshot(self) -> dict[str, Any]:
        """No pool: its waits, the descriptors they hold, and what the budget refused."""
        return {
            "kind": "upstream waits",
            "running": self.budget.waits + self.awaiting,
            "waiting": 0,  # nothing queues: admitted at once, or 503
            "rejected": self.budget.rejected,
            "idle_connections": self._upstream.idle if self._upstream is not None else 0,
            **self.budget.snapshot(),
        }

    def facts(self) -> dict[str, Any]:
        return {"upstream": self.url, "upstream_client": self.client}

    def ready_note(self) -> str | None:
        return None  # the start-up line names the upstream, a server-wide setting

    async def close(self, wait: bool = True) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None


async def _fan_out(upstream: Upstream, delay: float, fanout: int) -> list[dict[str, Any]]:
    if fanout == 1:  # the usual call: no task and no gather, which a crowd of waits pays for each
        return [await upstream.delay(delay)]
    calls = [asyncio.ensure_future(upstream.delay(delay)) for _ in range(fanout)]
    try:
        return await asyncio.gather(*calls)
    except BaseException:
        for call in calls:  # one failed or we were cancelled: the rest are unwanted
            call.cancel()
        raise

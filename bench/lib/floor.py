"""The bare Tornado floor: each of the lab's hops with nothing else around it (bench/bare_server.py serves it).

Same paths as the lab, so a load generator sends the same requests to both:

    GET|HEAD /ping                         {"pong": true}, answered on the event loop
    GET /blocking/count?n=N                count(n) on the event loop
    GET /threading/count?n=N               run_in_executor on a ThreadPoolExecutor(--thread-pool)
    GET /processing/count?n=N              run_in_executor on a ProcessPoolExecutor(--process-pool), spawned
    GET /interpreters/count?n=N            run_in_executor on an InterpreterPoolExecutor(--interpreter-pool)
    GET /distributed/count?n=N             Client.submit to the Dask scheduler --dask-scheduler
    GET /async?delay=S                     the lab's own upstream client, one GET /delay?seconds=S to --upstream
    GET /sleep?seconds=S                   asyncio.sleep(S): a wait with no upstream call

Each answers {"result": ...}: no envelope, no clocks, no lifecycle, no
stats, no Host check, no meters. A route whose pool or peer was not given
answers 404. What the lab spends above this on the same request is its own
bookkeeping (bench.overhead measures the two side by side).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import site
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tornado.web import Application, HTTPError, RequestHandler

from lab import ROOT
from lab.modes.upstream.client import Upstream
from workloads.cpu import count

MAX_N = 200_000_000
MAX_SECONDS = 60.0
UPSTREAM_ALLOWANCE_S = 30.0


@dataclass
class FloorPools:
    """What the floor's hops run on: given sizes, started by `start`, stopped by `close`."""

    thread_pool: int
    process_pool: int = 0
    interpreter_pool: int = 0
    upstream_url: str | None = None
    dask_scheduler: str | None = None
    executors: dict[str, Executor] = field(default_factory=dict)
    upstream: Upstream | None = None
    dask: Any = None  # a distributed.Client, loaded only when a scheduler is given

    async def start(self) -> None:
        self.executors["threading"] = ThreadPoolExecutor(self.thread_pool, thread_name_prefix="floor-thread")
        if self.process_pool:
            context = multiprocessing.get_context("spawn")  # as the lab's: no fork of a process with threads
            self.executors["processing"] = ProcessPoolExecutor(self.process_pool, mp_context=context)
        if self.interpreter_pool:
            from lab.modes.interpreters.worker import executor_class  # noqa: PLC0415 -- Python 3.12+ only

            self.executors["interpreters"] = executor_class()(
                self.interpreter_pool, initializer=site.addsitedir, initargs=(str(ROOT),)
            )
        loop = asyncio.get_running_loop()
        for executor in self.executors.values():  # every worker started (and imported) before anything is timed
            size = getattr(executor, "_max_workers", 1)
            await asyncio.gather(*(loop.run_in_executor(executor, count, 1) for _ in range(size)))
        if self.upstream_url:
            self.upstream = Upstream(self.upstream_url, "pooled", UPSTREAM_ALLOWANCE_S)
        if self.dask_scheduler:
            import distributed  # noqa: PLC0415 -- a second of imports, paid only with a scheduler

            self.dask = await distributed.Client(self.dask_scheduler, asynchronous=True, timeout=30)

    async def close(self) -> None:
        if self.dask is not None:
            await self.dask.close(timeout=5)
        if self.upstream is not None:
            self.upstream.close()
        for executor in self.executors.values():
            executor.shutdown(wait=True, cancel_futures=True)


class FloorHandler(RequestHandler):
    """A floor route: the pools injected, no etag (the lab computes none either)."""

    def initialize(self, pools: FloorPools) -> None:
        self.pools = pools

    def compute_etag(self) -> None:
        return None

    def number(self, name: str, default: str, parse: Callable[[str], Any], high: float) -> Any:
        try:
            value = parse(self.get_query_argument(name, default))
        except ValueError:
            raise HTTPError(400) from None
        if not 0 <= value <= high:
            raise HTTPError(400)
        return value


class PingHandler(FloorHandler):
    def get(self) -> None:
        self.write({"pong": True})

    head = get


class CountHandler(FloorHandler):
    """count(n) on the loop (blocking) or handed to the mode's executor or cluster."""

    async def get(self, mode: str) -> None:
        n = self.number("n", "1", int, MAX_N)
        if mode == "blocking":
            result = count(n)
        elif mode == "distributed" and self.pools.dask is not None:
            result = await self.pools.dask.submit(count, n, pure=False)
        elif mode in self.pools.executors:
            result = await asyncio.get_running_loop().run_in_executor(self.pools.executors[mode], count, n)
        else:
            raise HTTPError(404)
        self.write({"result": result})


class AsyncHandler(FloorHandler):
    """One call to the upstream, the lab's own client (lab/modes/upstream/client.py): the same exchange."""

    async def get(self) -> None:
        if self.pools.upstream is None:
            raise HTTPError(404)
        delay = self.number("delay", "1", float, MAX_SECONDS)
        self.write({"result": await self.pools.upstream.delay(delay)})


class SleepHandler(FloorHandler):
    """GET /sleep?seconds=S: await asyncio.sleep(S), then answer; nothing else."""

    async def get(self) -> None:
        seconds = self.number("seconds", "1", float, MAX_SECONDS)
        await asyncio.sleep(seconds)
        self.write({"slept": seconds})


def make_floor_app(pools: FloorPools) -> Application:
    """The floor's routes, each given the pools."""
    args = {"pools": pools}
    return Application(
        [
            (r"/ping", PingHandler, args),
            (r"/(blocking|threading|processing|interpreters|distributed)/count", CountHandler, args),
            (r"/async", AsyncHandler, args),
            (r"/sleep", SleepHandler, args),
        ]
    )

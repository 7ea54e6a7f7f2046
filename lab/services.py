"""What one server process owns: its pools, its HTTP client, its stats, its identity."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from tornado.ioloop import PeriodicCallback

from lab.accept import Occupancy
from lab.config import Config, cpu_count
from lab.gil import GilMeter, gil_enabled
from lab.modes import MODES, build_runners
from lab.runners import Runner
from lab.stats import Board, RequestStats
from lab.upstream_client import Upstream
from workloads.registry import WORKLOADS

log = logging.getLogger(__name__)

# How often pool gauges (running/waiting) reach the board between requests.
PUBLISH_EVERY_MS = 200
# A request's end reaches the board at once, or, while others are in flight, within this long:
# a thousand ends then cost a few hundred writes, not a thousand.
PUBLISH_AFTER_REQUEST_S = 0.005


@dataclass
class Services:
    """Created inside each server process, after any fork; closed on the way out."""

    config: Config
    # This server's own address, for calls it makes to itself (the page's
    # race driver); never taken from a request's Host header.
    base_url: str
    runners: dict[str, Runner]
    upstream: Upstream  # what /async awaits
    task_id: int | None
    board: Board
    requests: RequestStats
    restarts: int = 0
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    active_requests: int = 0
    # Work in-flight requests await (see LabHandler.until_disconnect).
    jobs: set[asyncio.Future[Any]] = field(default_factory=set)
    # The lab page's race, if one runs (handlers/race.py): at most one.
    races: set[asyncio.Future[None]] = field(default_factory=set)
    stopping: bool = False
    # What this process holds, for the fair accept policy (lab/accept.py).
    occupancy: Occupancy = field(default_factory=Occupancy)
    # This process's GIL contention over the last PUBLISH_EVERY_MS (None: not measured).
    gil: GilMeter = field(default_factory=GilMeter)
    gil_contention: float | None = None
    _idle: asyncio.Event = field(default_factory=asyncio.Event)
    _publisher: PeriodicCallback | None = None
    _published_at: float = 0.0
    _publish_soon: asyncio.Handle | None = None

    def __post_init__(self) -> None:
        self._idle.set()  # no request in flight yet

    @classmethod
    async def start(
        cls, config: Config, base_url: str, upstream_url: str, task_id: int | None, board: Board
    ) -> Services:
        runners = build_runners(config)
        try:
            for runner in runners.values():
                await runner.start()
        except BaseException:  # cancelled by a stop signal during start-up, or failed
            for runner in runners.values():
                await runner.close(wait=False)
            raise
        upstream = Upstream(upstream_url, config.upstream_client, config.upstream_timeout)
        # A child replacing a dead one inherits its slot: its totals and a restart.
        previous = board.read(task_id or 0)
        services = cls(
            config=config,
            base_url=base_url,
            runners=runners,
            upstream=upstream,
            task_id=task_id,
            board=board,
            requests=RequestStats(previous["requests"] if previous else None),
            restarts=previous["restarts"] + 1 if previous else 0,
        )
        services.gil.start()
        services.publish()
        services._publisher = PeriodicCallback(services._tick, PUBLISH_EVERY_MS)
        services._publisher.start()
        log.info(
            "ready: thread pool %d, process pool %d, max pending %d, job timeout %g s, upstream %s",
            config.thread_pool,
            config.process_pool,
            config.max_pending,
            config.job_timeout,
            upstream_url,
        )
        return services

    def facts(self) -> dict[str, Any]:
        """This server as the ideal and /stats see it: cores, processes, pool sizes (lab/modes.py's Facts)."""
        config = self.config
        return {
            "processes": config.process_count,
            "forked": config.forked,
            "cpu_count": cpu_count(),
            "thread_pool": config.thread_pool,
            "process_pool": config.process_pool,
            "gil_enabled": gil_enabled(),
            **{key: value for runner in self.runners.values() for key, value in runner.facts().items()},
        }

    def share(self, mode: str, workload: str) -> float:
        """The part of this process one run takes: 1 / the lanes its mode has here for it; 0 if it only waits."""
        facts = {
            **self.facts(),
            "processes": 1,
            "releases_gil": {workload: WORKLOADS[workload].releases_gil} if workload in WORKLOADS else {},
            "waits": {workload: WORKLOADS[workload].waits} if workload in WORKLOADS else {},
        }
        lanes = MODES[mode].capacity(facts, workload).lanes
        return 0.0 if lanes is None else 1.0 / lanes

    def snapshot(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "task_id": self.task_id,
            "started": self.started,
            "restarts": self.restarts,
            "active_requests": self.active_requests,
            "gil_contention": self.gil_contention,
            "requests": self.requests.modes,
            "pools": {mode: runner.snapshot() for mode, runner in self.runners.items()},
            "published": time.time(),
        }

    def _tick(self) -> None:
        """Every PUBLISH_EVERY_MS: the GIL meter's reading for the time since the last tick, then publish."""
        self.gil_contention = self.gil.read()
        self.publish()

    def publish(self) -> None:
        self._published_at = time.monotonic()
        if self._publish_soon is not None:
            self._publish_soon.cancel()
            self._publish_soon = None
        self.board.write(self.task_id or 0, self.snapshot())

    def _publish_request(self) -> None:
        """After a request: publish now, or, in a burst that was just published, once the burst allows.

        The last request in flight always publishes at once: an idle process
        has nothing to batch, and a client that has all its answers must find
        every one of them in /stats (bench/siege.sh's spread is a difference
        of two readings).
        """
        wait = self._published_at + PUBLISH_AFTER_REQUEST_S - time.monotonic()
        if wait <= 0 or not self.active_requests:
            self.publish()
        elif self._publish_soon is None:
            self._publish_soon = asyncio.get_running_loop().call_later(wait, self.publish)

    def request_started(self) -> None:
        self.active_requests += 1
        self._idle.clear()

    def request_finished(self, mode: str | None, status: int, seconds: float) -> None:
        """Called once per request that request_started() counted, as it ends."""
        self.active_requests -= 1
        if not self.active_requests:
            self._idle.set()
        if mode is not None:
            self.requests.record(mode, status, seconds)
            self._publish_request()  # so that /stats from any process counts this request

    async def requests_done(self) -> None:
        """Return once no request is in flight."""
        await self._idle.wait()

    async def drain(self, grace: float) -> bool:
        """Wait up to `grace` seconds for in-flight requests *and* pool jobs; True if all ended.

        A job can outlive its request (its client left, or it got a 504 from
        --job-timeout): stopping cleanly means waiting for it too.
        """
        try:
            async with asyncio.timeout(grace):
                await self.requests_done()
                for runner in self.runners.values():
                    await runner.idle.wait()
        except TimeoutError:
            return False
        return True

    def abandon(self) -> None:
        """The grace period is over: every awaited job ends now, its client gets a 503."""
        self.stopping = True
        for job in list(self.jobs):
            job.cancel()

    async def close(self, wait: bool = True) -> None:
        for race in list(self.races):
            race.cancel()  # its cleanup kills the load generator
        if self._publisher is not None:
            self._publisher.stop()
        self.gil.stop()
        self.upstream.close()
        for runner in self.runners.values():
            await runner.close(wait)
        self.publish()

"""What one server process owns: its runners, its requests' lifecycle, its stats, its identity."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from tornado.ioloop import PeriodicCallback

from lab.config import Config
from lab.instruments import freethreading
from lab.instruments.cores import CoreWatch
from lab.instruments.gil import GilMeter
from lab.instruments.stats import Board, RequestStats
from lab.machine import cpu_count
from lab.modes.contract import Runner, make_facts
from lab.modes.registry import MODES, build_runners
from lab.runs import KnownRuns
from lab.web.hosts import AllowedHosts
from lab.web.lifecycle import Lifecycle
from workloads import ml
from workloads.clocks import gil_enabled
from workloads.page import database
from workloads.registry import WORKLOADS

log = logging.getLogger(__name__)

# Connections a server process may open to a PostgreSQL --database, each pool of its own (the threads', the
# event loop's): opened as queries need them, one at start; enough for a thread pool of the largest default.
DATABASE_CONNECTIONS = 40

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
    task_id: int | None
    board: Board
    requests: RequestStats
    restarts: int = 0
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    # The lab page's race, if one runs (handlers/race.py): at most one.
    races: set[asyncio.Future[None]] = field(default_factory=set)
    # This process's GIL contention over the last PUBLISH_EVERY_MS (None: not measured).
    gil: GilMeter = field(default_factory=GilMeter)
    gil_contention: float | None = None
    # Over about the same window, the run-queue share of its threads' runnable time: starved
    # cores, which the GIL meter alone would read as contention (lab/instruments/cores.py: read
    # by a watcher process, so that this one makes no system call per thread for it).
    cores: CoreWatch = field(default_factory=CoreWatch)
    core_wait: float | None = None
    lifecycle: Lifecycle = field(init=False)
    # The names it answers to (the Host check, the race's Origin check).
    hosts: AllowedHosts = field(init=False)
    _publisher: PeriodicCallback | None = None
    _published_at: float = 0.0
    _publish_soon: asyncio.Handle | None = None
    _shares: dict[tuple[str, str], float] = field(default_factory=dict)
    # The runs its requests asked for, resolved and checked once (lab/runs.py).
    runs: KnownRuns = field(default_factory=KnownRuns)

    def __post_init__(self) -> None:
        self.lifecycle = Lifecycle(self.requests, self._publish_request)
        self.hosts = AllowedHosts(self.config.allow_host, self.config.host)

    @classmethod
    async def start(cls, config: Config, base_url: str, task_id: int | None, board: Board) -> Services:
        # `page` in this process (the event loop, its threads, its awaited queries) queries here, on
        # connections this process opens (workloads/page/database.py), never its parent's.
        database.use(config.database, DATABASE_CONNECTIONS)
        runners = build_runners(config)
        try:
            for runner in runners.values():
                await runner.start()
        except BaseException:  # cancelled by a stop signal during start-up, or failed
            for runner in runners.values():
                await runner.close(wait=False)
            await database.aclose()
            raise
        # A child replacing a dead one inherits its slot: its totals and a restart.
        previous = board.read(task_id or 0)
        services = cls(
            config=config,
            base_url=base_url,
            runners=runners,
            task_id=task_id,
            board=board,
            requests=RequestStats(previous["requests"] if previous else None),
            restarts=previous["restarts"] + 1 if previous else 0,
        )
        services.gil.start()
        services.cores.start()
        services.publish()
        services._publisher = PeriodicCallback(services._tick, PUBLISH_EVERY_MS)
        services._publisher.start()
        notes = [note for runner in runners.values() if (note := runner.ready_note())]
        notes += [f"max pending {config.max_pending}", f"job timeout {config.job_timeout:g} s"]
        if ml.lazy():
            notes.append("scikit-learn at each worker's first predict or train (--lazy-ml)")
        log.info("ready: %s, upstream %s", ", ".join(notes), config.upstream)
        if not task_id:  # once per server, not once per forked child
            freethreading.log_start()
        return services

    def facts(self) -> dict[str, Any]:
        """This server as the ideal and /stats see it: cores, processes, and what each runner adds (pool sizes...)."""
        config = self.config
        return {
            "processes": config.process_count,
            "forked": config.forked,
            "cpu_count": cpu_count(),
            "gil_enabled": gil_enabled(),
            "lazy_ml": ml.lazy(),
            **{key: value for runner in self.runners.values() for key, value in runner.facts().items()},
        }

    def share(self, mode: str, workload: str) -> float:
        """The part of this process one run takes: 1 / the lanes its mode has here for it; 0 if it only waits.

        What a request claims of its process (lab/web/lifecycle.py), which the
        fair and dispatch accept policies read. Kept per (mode, workload) from
        its first use: the pools' sizes are fixed, and a cluster's size when
        first used stands for it (the policies' estimate, not a limit).
        """
        key = (mode, workload)
        if key not in self._shares:
            traits = [WORKLOADS[workload].describe()] if workload in WORKLOADS else []
            lanes = MODES[mode].capacity(make_facts({**self.facts(), "processes": 1}, traits), workload).lanes
            self._shares[key] = 0.0 if lanes is None else 1.0 / lanes
        return self._shares[key]

    def snapshot(self) -> dict[str, Any]:
        pools = {mode: snap for mode, runner in self.runners.items() if (snap := runner.snapshot())}
        return {
            "pid": self.pid,
            "task_id": self.task_id,
            "started": self.started,
            "restarts": self.restarts,
            "active_requests": self.lifecycle.active,
            "gil_enabled": gil_enabled(),
            "gil_contention": self.gil_contention,
            "core_wait": self.core_wait,
            "requests": self.requests.modes,
            "pools": pools,
            "published": time.time(),
        }

    def _tick(self) -> None:
        """Every PUBLISH_EVERY_MS: the GIL and core meters' readings for the time since the last tick, then publish."""
        self.gil_contention = self.gil.read()
        self.core_wait = self.cores.read()
        self.publish()

    def publish(self) -> None:
        self._published_at = time.monotonic()
        if self._publish_soon is not None:
            self._publish_soon.cancel()
            self._publish_soon = None
        self.board.write(self.task_id or 0, self.snapshot())

    def _publish_request(self, active: int) -> None:
        """After a request, in a forked child: publish now, or, in a burst just published, once the burst allows.

        The last request in flight always publishes at once: an idle process
        has nothing to batch, and a client that has all its answers must find
        every one of them in /stats, whichever child answers it
        (bench/siege.sh's spread is a difference of two readings). A server of
        one process has no sibling to read its slot: its /stats and /metrics
        publish it themselves before they read, so a request's end costs it
        no write (a whole snapshot in JSON, about a tenth of a millisecond).
        """
        if not self.config.forked:
            return
        wait = self._published_at + PUBLISH_AFTER_REQUEST_S - time.monotonic()
        if wait <= 0 or not active:
            self.publish()
        elif self._publish_soon is None:
            self._publish_soon = asyncio.get_running_loop().call_later(wait, self.publish)

    async def drain(self, grace: float) -> bool:
        """Wait up to `grace` seconds for in-flight requests *and* pool jobs; True if all ended.

        A job can outlive its request (its client left, or it got a 504 from
        --job-timeout): stopping cleanly means waiting for it too.
        """
        try:
            async with asyncio.timeout(grace):
                await self.lifecycle.done()
                for runner in self.runners.values():
                    await runner.idle.wait()
        except TimeoutError:
            return False
        return True

    async def close(self, wait: bool = True) -> None:
        for race in list(self.races):
            race.cancel()  # its cleanup kills the load generator
        if self._publisher is not None:
            self._publisher.stop()
        self.gil.stop()
        self.cores.stop()
        for runner in self.runners.values():
            await runner.close(wait)
        await database.aclose()
        self.publish()

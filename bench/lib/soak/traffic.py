"""The soak's steady traffic: the mix at a fixed rate, a /ping probe, and the page's race now and then.

Arrivals are evenly spaced (open model: the next request leaves on time
whether or not the last one was answered), cycling through the mix in a
shuffled order, up to a cap on the mix's requests in flight: an arrival
that finds `cap` of them unanswered is held back (counted, not sent), so a
host that slows down (its other guests, its other users) is not buried
under a queue the soak made. Everything can be paused, and `drain` waits
until nothing the traffic sent is still in flight: the lab is quiet, and
what it still holds is its own.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from bench.lib.soak.link import Link
from bench.lib.soak.mix import Entry

RACE_CONCURRENCY = 2
RACE_TIMEOUT_S = 180.0


@dataclass
class Traffic:
    """The mix at `rate` requests/s, /ping every `ping_every` s, a race every `race_every` s (0: none)."""

    link: Link
    mix: Sequence[Entry]
    rate: float
    ping_every: float
    race_every: float
    cap: int
    seed: int = 0
    held_back: int = 0  # arrivals not sent: `cap` of the mix's requests were in flight
    mixing: int = 0  # the mix's requests in flight
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: set[asyncio.Task[Any]] = field(default_factory=set)
    racing: asyncio.Lock = field(default_factory=asyncio.Lock)

    def start(self) -> list[asyncio.Task[None]]:
        """The traffic's loops, running until cancelled."""
        self.flowing.set()
        loops = [self._arrivals(), self._pings()] + ([self._races()] if self.race_every > 0 else [])
        return [asyncio.create_task(loop) for loop in loops]

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `work` as part of the traffic: counted in flight until it ends."""
        task = asyncio.create_task(work)
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    async def drain(self) -> None:
        """Wait until every request the traffic sent has ended."""
        while self.in_flight:
            await asyncio.wait(list(self.in_flight))

    async def quiet(self) -> None:
        """Pause, then drain: nothing of ours is in flight until `resume`."""
        self.pause()
        await self.drain()

    async def _arrivals(self) -> None:
        order = list(self.mix)
        random.Random(self.seed).shuffle(order)
        loop = asyncio.get_running_loop()
        gap = 1 / self.rate
        due = loop.time()
        for entry in itertools.cycle(order):
            if not self.flowing.is_set():
                await self.flowing.wait()
                due = loop.time()  # after a pause, on time from now: no catching up in a burst
            if self.mixing < self.cap:
                self.spawn(self._mix(entry.target))
            else:
                self.held_back += 1
            due += gap
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def _mix(self, target: str) -> None:
        self.mixing += 1
        try:
            await self.link.send("mix", target)
        finally:
            self.mixing -= 1

    async def _pings(self) -> None:
        while True:
            await self.flowing.wait()
            self.spawn(self.link.send("ping", "/ping"))
            await asyncio.sleep(self.ping_every)

    async def _races(self) -> None:
        """The page's race, in each mode of the mix in turn, with its lightest workload."""
        firsts = {entry.mode: entry for entry in reversed(self.mix) if entry.mode is not None}
        for entry in itertools.cycle(list(firsts.values())):
            await asyncio.sleep(self.race_every)
            await self.flowing.wait()
            await self.spawn(self.race(entry))

    async def race(self, entry: Entry, *, fault: int | None = None, hang_up_after: float | None = None) -> None:
        """One race of `entry`'s mode and workload (one at a time: the lab runs one per server process)."""
        async with self.racing:
            await self.link.race(race_message(entry), RACE_TIMEOUT_S, fault=fault, hang_up_after=hang_up_after)


def race_message(entry: Entry) -> dict[str, Any]:
    """The page's race request for an entry: its mode, workload and params, a small concurrency."""
    params = dict(parse_qsl(urlsplit(entry.target).query))
    message: dict[str, Any] = {"mode": entry.mode, "params": params, "concurrency": RACE_CONCURRENCY}
    if entry.workload and "/" in entry.target.split("?")[0].strip("/"):
        message["workload"] = entry.workload
    return message

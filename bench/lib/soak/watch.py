"""The lab watched from outside: its /stats and its processes (bench/lib/soak/census.py), every few seconds.

Each tick reads /stats once, then measures every process of the lab's tree
(psutil, in a thread: the traffic's event loop keeps its pace), and keeps a
series per process key (role and age, never pid) and a compact /stats per
tick. Ticks and the settle checks' polls take turns (`lock`), so that a
count never sees the other's /stats connection.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench.lib.soak.census import Known, ProcSample, lab_tree, measure, unknown
from bench.lib.soak.link import Link

# The pool counters a tick keeps of /stats (the rest is in the lab's own /stats, any time).
POOL_KEYS = ("running", "waiting", "submitted", "rejected", "timed_out", "broken", "pool_restarts", "workers_lost",
             "idle_connections", "held")  # fmt: skip


def compact(stats: dict[str, Any], t: float) -> dict[str, Any]:
    """What a tick keeps of /stats: per server process its pid, restarts, RSS, active requests and pool counters."""
    return {
        "t": round(t, 1),
        "processes": [
            {"task_id": p.get("task_id"), "pid": p["pid"], "restarts": p.get("restarts"),
             "rss_bytes": p.get("rss_bytes"), "active_requests": p.get("active_requests"),
             "pools": {name: {k: pool[k] for k in POOL_KEYS if k in pool} for name, pool in p.get("pools", {}).items()}}
            for p in stats.get("processes", [])
        ],
        "requests": {mode: d.get("statuses", {}) for mode, d in stats.get("totals", {}).get("requests", {}).items()},
    }  # fmt: skip


@dataclass
class LabWatch:
    """The lab's processes under `root` (None: not visible from here) and its /stats, sampled over time."""

    link: Link
    root: int | None
    started: float = field(default_factory=time.time)
    known: Known = field(default_factory=Known)
    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    stats_series: list[dict[str, Any]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: list[ProcSample] = field(default_factory=list)
    seen: dict[tuple[int, float], str] = field(default_factory=dict)  # every process ever in the tree: its role

    def now(self) -> float:
        """Seconds since the watch began."""
        return time.time() - self.started

    async def refresh(self, kind: str) -> dict[str, Any]:
        """/stats now (asked again while a server process restarts); the pids it names are learnt."""
        stats = await self.link.stats_soon(kind)
        self.known = Known.read(stats)
        return stats

    async def look(self) -> list[ProcSample]:
        """Every process of the lab now; /stats is asked again once if a new process cannot be placed."""
        if self.root is None:
            return []
        root, known = self.root, self.known
        samples = await asyncio.to_thread(lambda: measure(lab_tree(root, known)))
        if unknown(samples):
            await self.refresh("sample")
            known = self.known
            samples = await asyncio.to_thread(lambda: measure(lab_tree(root, known)))
        for sample in samples:
            self.seen.setdefault((sample.pid, sample.created), sample.role)
        return samples

    async def tick(self, phase: str) -> list[ProcSample]:
        """One sample of everything, kept in the series under `phase` (warm-up, traffic, fault, settle)."""
        async with self.lock:
            stats = await self.refresh("sample")
            samples = await self.look()
        t = self.now()
        self.stats_series.append({**compact(stats, t), "phase": phase})
        self.keep(samples, t, phase)
        return samples

    def keep(self, samples: list[ProcSample], t: float, phase: str) -> None:
        self.last = samples
        for sample in samples:
            self.roles[sample.key] = sample.role
            self.series.setdefault(sample.key, []).append({"t": round(t, 1), "phase": phase, **sample.as_dict()})

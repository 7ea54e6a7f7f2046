"""Quiet checks: the traffic paused, the lab warmed to its bounds, then its processes counted until they match.

A lab grows some things on demand, up to a bound, and keeps them: the
embedded Dask cluster starts on its first task, and a forked child that
replaced a killed one starts with none of it. Counted as they happen to be, they would
differ from check to check with no leak at all. So before every count each
mode gets a warm burst: more waiting requests at once than its lanes, until
every server process has answered some (the envelope's `server.task_id`
says which did); then the soak waits for the lab to go quiet (no job running
or waiting, no idle upstream connection kept, no request but the /stats
asking) and counts. The first count after the warm-up is the baseline
(taken once it holds still); each later one polls until the counts equal
the baseline, or the time allowed runs out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.lib.soak.census import ProcSample, counts, descriptors, orphans
from bench.lib.soak.link import Link
from bench.lib.soak.mix import light
from bench.lib.soak.traffic import Traffic
from bench.lib.soak.verdict import Check, baseline_check
from bench.lib.soak.watch import LabWatch

WARM_SCALE = 0.5  # a warm burst's waits: half their default (sleep 0.5 s, async delay 0.5 s)
WARM_ROUNDS = 4  # bursts per mode at most, until every server process has answered one
POLL_S = 0.5
STABLE_POLLS = 4  # the baseline: this many polls in a row alike


@dataclass(frozen=True)
class Warm:
    """One mode's warm burst: a waiting request, sent `width` at once."""

    mode: str
    target: str
    width: int


def warm_plan(mix_doc: Mapping[str, Any]) -> list[Warm]:
    """Per mode of the mix, its waiting workload at WARM_SCALE, as many at once as its lanes plus one a process
    (async: four a process), at most a process's pool and as many waiting for it, per process."""
    facts, plan = mix_doc["facts"], list[Warm]()
    processes = int(facts.get("processes", 1))
    waiting = {w["name"]: w for w in mix_doc["workloads"] if w.get("waits")}
    for entry in mix_doc["entries"]:
        if entry.mode is None or any(w.mode == entry.mode for w in plan):
            continue
        if entry.lanes is None:  # async: it only waits, with its own params
            mode = next(m for m in mix_doc["modes"] if m["name"] == entry.mode)
            query = light(mode.get("params", []), WARM_SCALE, {})
            plan.append(Warm(entry.mode, _with(f"/{entry.mode}", query), 4 * processes))
        elif entry.workload in waiting:
            query = light(waiting[entry.workload]["params"], WARM_SCALE, {})
            width = min(entry.lanes + processes, 2 * entry.lanes)
            plan.append(Warm(entry.mode, _with(f"/{entry.mode}/{entry.workload}", query), width))
    return plan


def _with(path: str, query: Mapping[str, str]) -> str:
    return path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


async def warm(link: Link, plan: Sequence[Warm], tasks: set[Any]) -> None:
    """Each mode's burst, again until every server process (its task id) has answered one, WARM_ROUNDS at most."""
    for step in plan:
        seen: set[Any] = set()
        for _ in range(WARM_ROUNDS):
            answers = await asyncio.gather(*(link.send("warm", step.target) for _ in range(step.width)))
            for answer, _record in answers:
                body = answer.json()
                if answer.status == 200 and isinstance(body, dict):
                    seen.add(body.get("server", {}).get("task_id"))
            if tasks <= seen:
                break


def busy(stats: Mapping[str, Any]) -> bool:
    """Whether the lab is doing anything but answering this /stats: a job, an upstream connection, a request."""
    active = 0
    for process in stats.get("processes", []):
        active += int(process.get("active_requests") or 0)
        for pool in process.get("pools", {}).values():
            if pool.get("running") or pool.get("waiting") or pool.get("idle_connections") or pool.get("held"):
                return True
    return active > 1


@dataclass
class Settled:
    """One quiet check: when, how long it took to match (or to give up), and the counts and RSS it found."""

    label: str
    at: float
    waited_s: float
    counts: dict[str, dict[str, int]]
    rss: dict[str, int]
    per_key: dict[str, dict[str, int]]  # each process key's descriptors and threads
    matched: bool  # the baseline held still, or a later check found it again
    orphans: list[str]  # processes once the lab's, alive outside its tree
    # What the descriptors are, per process key: all of them at the baseline; at a later check, those of the
    # roles that differ from it (what a difference is made of).
    descriptors: dict[str, list[str]] = field(default_factory=dict)
    check: Check | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "at": round(self.at, 1), "waited_s": round(self.waited_s, 2),
                "matched": self.matched, "orphans": self.orphans, "counts": self.counts, "per_key": self.per_key,
                "rss_bytes": self.rss, "descriptors": self.descriptors,
                "check": None if self.check is None else self.check.as_dict()}  # fmt: skip


async def settle(watch: LabWatch, traffic: Traffic, plan: Sequence[Warm], label: str, *,
                 baseline: Settled | None, within: float) -> Settled:  # fmt: skip
    """Pause the traffic, warm every mode, then poll the lab's processes until they match `baseline`
    (None: until they hold still, which makes the baseline), `within` seconds at most; the traffic resumes
    either way."""
    await traffic.quiet()
    try:
        await watch.refresh("settle")
        await warm(watch.link, plan, set(watch.known.servers.values()))
        return await _poll(watch, label, baseline, within)
    finally:
        traffic.resume()


def _describe(samples: Sequence[ProcSample], roles: set[str] | None) -> dict[str, list[str]]:
    """The descriptors of every process of `roles` (None: of every role)."""
    return {s.key: descriptors(s.pid) for s in samples if roles is None or s.role in roles}


async def _poll(watch: LabWatch, label: str, baseline: Settled | None, within: float) -> Settled:
    began = time.monotonic()
    previous: dict[str, dict[str, int]] | None = None
    alike = 0
    while True:
        async with watch.lock:
            quiet = not busy(await watch.refresh("settle"))
            samples = await watch.look()
        found = counts(samples)
        waited = time.monotonic() - began
        if quiet and baseline is None:
            alike = alike + 1 if found == previous else 0
            previous = found
        matched = quiet and (alike >= STABLE_POLLS if baseline is None else found == baseline.counts)
        if matched or waited > within:
            watch.keep(samples, watch.now(), "settle")
            rss = {sample.key: sample.rss_bytes for sample in samples}
            per_key = {sample.key: {"fds": sample.fds, "threads": sample.threads} for sample in samples}
            left = await asyncio.to_thread(orphans, dict(watch.seen), samples)
            done = Settled(label, watch.now(), waited, found, rss, per_key, matched, left)
            if baseline is not None:
                done.check = baseline_check(label, baseline.counts, found, waited)
            differing = None if baseline is None else {r for r in found if found[r] != baseline.counts.get(r)}
            done.descriptors = await asyncio.to_thread(_describe, samples, differing)
            return done
        await asyncio.sleep(POLL_S)

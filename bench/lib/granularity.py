"""Where shipping work stops paying: task size (count's n) against the bytes a task carries and its link.

    table = measure(hosts, Plan(sizes_ms=(0, 1, 10, 100, 1000), rates=(None, "10mbit"), tasks=3, rounds=1))

The lab's workloads make their data where they run, so a request ships a
few hundred bytes whatever its size. A real task carries its data: here
each one carries PAYLOAD_BYTES of random bytes (incompressible, so Dask's
compression cannot shrink them; about a predict batch of 2,000 rows of 64
float64 pixels) as its argument, from a Dask client on the lab's host,
through the scheduler, to a worker host whose cable tbf narrows to `rate`
(both ways, on both worker hosts). Its work is count(n), with n calibrated
on a worker so that it computes for the task size asked. Tasks go one at a
time: what a task costs beyond its work is its trip.

Per rate: the measured bytes a task moves across a worker's cable, the trip
cost of a task with no work (n = 1), and from them the prediction: a trip
costs `c + bytes / rate`, where c is the trip at an unlimited link, and a
task is worth shipping once its work is at least its trip (efficiency, work
over wall time, 0.5). The measured break-even is where the measured
efficiency crosses 0.5, between the two task sizes around it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import distributed

from bench.lib.hosts import WORKERS, HostCluster
from bench.lib.netns import rate_bits
from lab.race.stats import median

PAYLOAD_BYTES = 1_000_000
CALIBRATION_N = 3_000_000


@dataclass(frozen=True)
class Plan:
    """Task sizes (ms of work; 0: none, n = 1), link rates (tc's units; None: unlimited), tasks per cell, rounds."""

    sizes_ms: tuple[float, ...]
    rates: tuple[str | None, ...]
    tasks: int
    rounds: int


def shipper() -> Callable[[bytes, int], tuple[int, float]]:
    """The function each task runs on a worker, made in a call so that it travels by value.

    distributed pickles a task with plain pickle when it can, which names a
    module-level function's module for the scheduler to import (it unpickles
    the graph, and has nothing of the bench); a function local to a call cannot
    be pickled so, and goes through cloudpickle, by value (as the lab's own
    task does, lab/modes/distributed/worker.py).
    """

    def ship(payload: bytes, n: int) -> tuple[int, float]:
        # count(n); the bytes it was sent and the seconds it computed. `workloads` is imported where this
        # runs: the lab ships it to the workers.
        import time  # noqa: PLC0415

        from workloads.cpu import count  # noqa: PLC0415

        started = time.perf_counter()
        count(n)
        return len(payload), time.perf_counter() - started

    return ship


SHIP = shipper()


def measure(hosts: HostCluster, plan: Plan) -> dict[str, Any]:
    """The granularity table: one row per (rate, size), and per rate the predicted and measured break-even."""
    cells = hosts.client.submit(asyncio.run, _cells(hosts, plan)).result()
    rows = [_summary(rate, size, samples) for (rate, size), samples in cells.items()]
    return {"payload_bytes": PAYLOAD_BYTES, "plan": plan.__dict__, "rows": rows, "break_even": break_even(rows)}


async def _cells(hosts: HostCluster, plan: Plan) -> dict[tuple[str | None, float], list[dict[str, float]]]:
    """Samples per (rate, size): every round visits every rate, every size (a slow minute hits them all alike)."""
    payload = os.urandom(PAYLOAD_BYTES)
    cells: dict[tuple[str | None, float], list[dict[str, float]]] = {}
    async with distributed.Client(hosts.scheduler, asynchronous=True, timeout=30) as client:  # type: ignore[no-untyped-call]
        per_ms = await _calibrate(client)
        try:
            for _ in range(plan.rounds):
                for rate in plan.rates:
                    for role in WORKERS:
                        hosts.net.shape(role, rate)
                    for size in plan.sizes_ms:
                        n = max(1, round(size * per_ms))
                        for _ in range(plan.tasks):
                            cells.setdefault((rate, size), []).append(await _one(hosts, client, payload, n))
        finally:
            for role in WORKERS:
                hosts.net.shape(role, None)
    return cells


async def _calibrate(client: distributed.Client) -> float:
    """count's iterations per millisecond on a worker (the best of a few runs: the host's quiet speed)."""
    runs = [await client.submit(SHIP, b"", CALIBRATION_N, pure=False) for _ in range(3)]
    return float(CALIBRATION_N / (min(seconds for _, seconds in runs) * 1000))


async def _one(hosts: HostCluster, client: distributed.Client, payload: bytes, n: int) -> dict[str, float]:
    """One task, alone: its wall time at the client, its work at the worker, the bytes across the workers' cables."""
    before = sum(hosts.net.bytes(role) for role in WORKERS)
    started = time.perf_counter()
    _, seconds = await client.submit(SHIP, payload, n, pure=False)
    wall = time.perf_counter() - started
    moved = sum(hosts.net.bytes(role) for role in WORKERS) - before
    return {"wall_s": wall, "work_s": seconds, "bytes": float(moved)}


def _summary(rate: str | None, size: float, samples: list[dict[str, float]]) -> dict[str, Any]:
    wall = median([s["wall_s"] for s in samples])
    work = median([s["work_s"] for s in samples])
    return {
        "rate": rate or "unlimited",
        "size_ms": size,
        "tasks": len(samples),
        "work_ms": round(work * 1000, 2),
        "wall_ms": round(wall * 1000, 2),
        "trip_ms": round(median([s["wall_s"] - s["work_s"] for s in samples]) * 1000, 2),
        "efficiency": round(median([s["work_s"] / s["wall_s"] for s in samples]), 3),
        "bytes_per_task": round(median([s["bytes"] for s in samples])),
    }


def break_even(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rate: the task size where work equals trip, predicted from bytes and rate, and measured; their ratio."""
    base = [r["trip_ms"] for r in rows if r["rate"] == "unlimited" and r["size_ms"] == 0]
    found = []
    for rate in dict.fromkeys(r["rate"] for r in rows):
        mine = sorted((r for r in rows if r["rate"] == rate and r["size_ms"] > 0), key=lambda r: r["work_ms"])
        moved = median([float(r["bytes_per_task"]) for r in rows if r["rate"] == rate])
        link_ms = 0.0 if rate == "unlimited" else moved * 8 / rate_bits(rate) * 1000
        predicted = base[0] + link_ms if base else None
        measured, verdict = _crossing(mine)
        found.append({
            "rate": rate,
            "bytes_per_task": round(moved),
            "link_ms": round(link_ms, 2),
            "predicted_ms": None if predicted is None else round(predicted, 2),
            "measured_ms": None if measured is None else round(measured, 2),
            "ratio": None if predicted is None or measured is None else round(measured / predicted, 2),
            "verdict": verdict,
        })  # fmt: skip
    return found


def _crossing(rows: list[dict[str, Any]]) -> tuple[float | None, str]:
    """The work (ms) where efficiency crosses 0.5, between the sizes around it (log scale), and what it means."""
    for below, above in itertools.pairwise(rows):
        if below["efficiency"] < 0.5 <= above["efficiency"]:
            x0, x1 = math.log(below["work_ms"]), math.log(above["work_ms"])
            share = (0.5 - below["efficiency"]) / (above["efficiency"] - below["efficiency"])
            return math.exp(x0 + share * (x1 - x0)), "measured between two sizes"
    if rows and rows[0]["efficiency"] >= 0.5:
        return None, f"pays at every size measured, the smallest ({rows[0]['work_ms']:g} ms) included"
    return None, "pays at no size measured"

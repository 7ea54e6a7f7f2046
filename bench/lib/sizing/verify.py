"""Step 4 of the advisor: every swept point measured under closed load and an open arrival rate, in rounds.

Each point's server is started once and paused (SIGSTOP) while the others
are measured, so an idle server's timers and meters take nothing from the
one under load, and resumed for its turn: closed load (`users` back to
back) while the host is sampled (bench/lib/locust.py's HostSampler: run
queue, user/idle/steal CPU), then the open rate. The load waits for every
answer before it ends; a request given up on (timed out) may still run in
the server, so before the next load the server is left to finish: under
half a core's worth of CPU. Rounds alternate their order (points.order).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.locust import HostSampler
from bench.lib.sizing import outside, traffic
from bench.lib.sizing.points import Swept, order
from bench.lib.sizing.targets import Server, Target, start
from lab.race.stats import percentile

Progress = Callable[[str], None]
# Servers started at once: a start is mostly imports, one core's work each.
STARTING_AT_ONCE = 2
MAX_USERS = 256  # asyncio holds that many connections in one client process without becoming the limit


@dataclass(frozen=True)
class Plan:
    """How each point is loaded: users and seconds of closed load, arrivals a second and seconds of open load."""

    rounds: int
    users: int
    closed_s: float
    warmup_s: float
    rate: float
    open_s: float
    in_flight: int


def _latency(tally: traffic.Tally) -> dict[str, Any]:
    """Answers a second and latency; an open load's answers a second over the time they took to come (the
    arrivals' window, or longer when the server fell behind and answered after it)."""
    times = sorted(1000 * a.seconds for a in tally.ok)
    span = tally.window_s
    if tally.answers:
        span = max(span, max(a.done for a in tally.answers) - min(a.due for a in tally.answers))
    return {
        "answers": len(tally.ok),
        "failed": tally.failed,
        "rps": round(len(tally.ok) / span, 2) if span else 0.0,
        "p50_ms": round(statistics.median(times), 1) if times else None,
        "p95_ms": round(percentile(times, 0.95) or 0.0, 1) if times else None,
    }


def closed_load(server: Server, plan: Plan) -> dict[str, Any]:
    """The closed load on one point: throughput and latency, the serving processes' CPU and switches per answer,
    the host meanwhile, and the serving processes' memory at the end."""
    processes = server.serving()
    before = outside.counters(processes)
    with HostSampler(lambda: (None, None), 0.5) as host:
        tally = traffic.closed(server.url, plan.users, plan.closed_s, warmup_s=plan.warmup_s)
    used = outside.counters(processes) - before
    count = max(1, tally.served)
    found = _latency(tally)
    rows = host.rows or [{"idle_pct": None, "run_queue": None}]
    return {
        **found,
        "cpu_ms": round(1000 * used.cpu_s / count, 2),
        "switches": round(used.switches / count, 2),
        "idle_pct": statistics.median(r["idle_pct"] for r in rows) if host.rows else None,
        "run_queue": statistics.median(r["run_queue"] for r in rows) if host.rows else None,
        "memory": outside.memory(processes),
    }


def open_load(server: Server, plan: Plan) -> dict[str, Any]:
    """The open rate on one point: what it answered, how fast, and what was shed."""
    tally = traffic.open_rate(server.url, plan.rate, plan.open_s, in_flight=plan.in_flight)
    return {**_latency(tally), "rate": plan.rate, "shed": tally.shed}


def measure_point(server: Server, plan: Plan, number: int) -> dict[str, Any]:
    """One round of one point: closed, then open load, the server left to finish each."""
    server.resume()
    server.check_alive()
    try:
        closed = closed_load(server, plan)
        outside.settle(server.serving)
        opened = open_load(server, plan)
        outside.settle(server.serving)
    finally:
        server.pause()
    server.check_alive()
    master = server.master()
    return {"point": server.point.label, "round": number, "closed": closed, "open": opened,
            "master_threads": master.num_threads() if master is not None else None}  # fmt: skip


def sweep(target: Target, points: list[Swept], plan: Plan, folder: Path, *, upstream: str,
          progress: Progress) -> list[dict[str, Any]]:  # fmt: skip
    """Every point, `plan.rounds` times; one row per point and round. Every server is stopped however it ends."""
    servers: dict[str, Server] = {}
    rows: list[dict[str, Any]] = []
    try:
        progress(f"starting {len(points)} servers: {', '.join(s.point.label for s in points)}")
        start_all(target, points, folder, upstream, servers)
        steps = len(points) * plan.rounds
        for number in range(1, plan.rounds + 1):
            for swept in order(points, number):
                progress(f"round {number}/{plan.rounds}, {len(rows) + 1}/{steps}: {swept.point.label} "
                         f"({plan.users} users, then {plan.rate:g}/s)")  # fmt: skip
                row = measure_point(servers[swept.point.label], plan, number)
                rows.append(row)
                progress(f"round {number}/{plan.rounds}, {len(rows)}/{steps}: {swept.point.label} "
                         f"{row['closed']['rps']:g} req/s, p95 {row['closed']['p95_ms']} ms")  # fmt: skip
    finally:
        with ThreadPoolExecutor(max(1, len(servers))) as stopping:  # each waits for its own group to exit
            list(stopping.map(Server.stop, servers.values()))
    return rows


def start_all(target: Target, points: list[Swept], folder: Path, upstream: str, into: dict[str, Server]) -> None:
    """Start every point's server, STARTING_AT_ONCE at a time, each paused once it answers, into `into` (so
    that the caller stops whatever did start, however this ends)."""

    def one(swept: Swept) -> None:
        server = start(target, swept.point, folder, upstream)
        into[swept.point.label] = server
        server.pause()

    with ThreadPoolExecutor(STARTING_AT_ONCE) as starting:
        for done in [starting.submit(one, swept) for swept in points]:
            done.result()


def summarise(points: list[Swept], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per point: the median over its rounds of each figure, its range of throughput, its last memory."""
    summary = {}
    for swept in points:
        mine = [r for r in rows if r["point"] == swept.point.label]
        if not mine:
            continue

        def middle(load: str, key: str, of: list[dict[str, Any]] = mine) -> float | None:
            known = [r[load][key] for r in of if r[load][key] is not None]
            return round(statistics.median(known), 2) if known else None

        closed = [r["closed"]["rps"] for r in mine]
        summary[swept.point.label] = {
            "closed_rps": middle("closed", "rps"), "closed_rps_range": [min(closed), max(closed)],
            "closed_p50_ms": middle("closed", "p50_ms"), "closed_p95_ms": middle("closed", "p95_ms"),
            "open_rps": middle("open", "rps"), "open_p95_ms": middle("open", "p95_ms"),
            "failed": sum(r["closed"]["failed"] + r["open"]["failed"] for r in mine),
            "shed": sum(r["open"]["shed"] for r in mine),
            "cpu_ms": middle("closed", "cpu_ms"), "switches": middle("closed", "switches"),
            "idle_pct": middle("closed", "idle_pct"), "memory": mine[-1]["closed"]["memory"],
            "rounds": len(mine),
        }  # fmt: skip
    return summary


def plan_for(points: list[Swept], throughput_rps: float, alone_ms: float, *, quick: bool, rounds: int | None,
             users: int | None, rate: float | None, seconds: float | None) -> Plan:  # fmt: skip
    """The load for a sweep: enough users to keep every point's threads busy (and twice what the predicted
    throughput holds in flight, by Little's law), an open rate of 90 % of the predicted throughput; each window
    at least 20 requests alone long."""
    alone_s = alone_ms / 1000
    slots = max(s.point.processes * s.point.threads for s in points)
    users = users or min(MAX_USERS, max(4, slots, round(2 * throughput_rps * alone_s)))
    window = seconds or min(30.0, max(2.0 if quick else 4.0, 20 * alone_s))
    rate = rate or round(0.9 * throughput_rps, 2)
    return Plan(
        rounds=rounds or (1 if quick else 2),
        users=users,
        closed_s=window,
        warmup_s=max(0.5 if quick else 1.0, 2 * alone_s),
        rate=rate,
        open_s=window,
        # One second's arrivals (or the users) in flight at most: an overloaded point sheds the rest.
        in_flight=max(users, round(rate)),
    )


def thread_memory_mb(summary: dict[str, dict[str, Any]]) -> float | None:
    """MB each added thread took, measured: over pairs of points with the same processes and different threads,
    the median of (USS difference) / (threads added in all); None without such a pair."""
    seen = []
    for label, found in summary.items():
        processes, threads = (int(x) for x in label.split(" x "))
        seen.append((processes, threads, float(found["memory"]["uss_mb"]), int(found["memory"]["threads"])))
    slopes = [
        (uss_b - uss_a) / (live_b - live_a)
        for p_a, t_a, uss_a, live_a in seen
        for p_b, t_b, uss_b, live_b in seen
        if p_a == p_b and t_b > t_a and live_b > live_a
    ]
    return round(statistics.median(slopes), 3) if slopes else None

"""bench.overhead's routes, how the floor is sized from the lab it stands beside, and its tables.

The floor (bench/bare_server.py) must do exactly the lab's hop: its thread,
process and interpreter pools are the sizes the lab's /stats reports, its
/async calls the lab's own upstream, its /distributed submits to the lab's
own Dask scheduler (started first, by one request).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.lib.alternate import ratios
from bench.lib.rounds import spread
from bench.lib.tables import Column, markdown_table, text_table
from lab.modes.interpreters.worker import unavailable as interpreters_unavailable
from lab.race.engine import get

ROUTES = ("ping", "blocking", "threading", "processing", "interpreters", "distributed", "async")
# A first /distributed request starts the lab's embedded Dask cluster: seconds of worker processes spawning.
CLUSTER_START_S = 180.0


@dataclass(frozen=True)
class Target:
    """A route as both servers serve it: its name and the path with its query."""

    route: str
    path: str


def _json(url: str, timeout: float) -> Any:
    status, body, _, _ = get(url, timeout)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}: {json.dumps(body)[:300]}")
    return body


def _target(route: str, args: argparse.Namespace, modes: Mapping[str, Mapping[str, Any]]) -> Target | str:
    """The route's target, or why it is skipped."""
    if route == "ping":
        return Target(route, "/ping")
    mode = modes.get(route)
    if mode is None:
        return f"{route}: the lab has no such mode"
    if not mode.get("available", True):
        return f"{route}: {mode.get('unavailable_reason')}"
    if route == "interpreters" and (problem := interpreters_unavailable()) is not None:
        return f"{route}: the floor runs here, and {problem}"
    if route == "async":
        return Target(route, f"/async?delay={args.delay:g}")
    return Target(route, f"/{route}/count?n={args.count}")


def lab_targets(base: str, args: argparse.Namespace) -> tuple[list[Target], list[str], list[str], list[int]]:
    """What to measure on the lab at `base`: the targets, the routes skipped (and why), the floor's flags, and the
    lab's serving processes (whose CPU is counted)."""
    modes = {mode["name"]: mode for mode in _json(f"{base}/modes", args.timeout)}
    found = [_target(route, args, modes) for route in args.routes]
    targets = [t for t in found if isinstance(t, Target)]
    skipped = [t for t in found if isinstance(t, str)]
    routes = {t.route for t in targets}
    if "distributed" in routes:  # the embedded cluster starts on first use; the floor needs its scheduler
        _json(f"{base}/distributed/count?n=1", CLUSTER_START_S)
    stats = _json(f"{base}/stats", args.timeout)
    facts = stats["server"]
    flags = ["--settled-collector", "--thread-pool", str(facts["thread_pool"])]  # the lab's collector is settled
    if "processing" in routes:
        flags += ["--process-pool", str(facts["process_pool"])]
    if "interpreters" in routes:
        flags += ["--interpreter-pool", str(facts["interpreter_pool"])]
    if "async" in routes:
        flags += ["--upstream", str(facts["upstream"])]
    if "distributed" in routes:
        flags += ["--dask-scheduler", str(facts["dask"]["scheduler"])]
    return targets, skipped, flags, [int(process["pid"]) for process in stats["processes"]]


# ---------- summaries ----------


def _median(values: Sequence[Any]) -> float | None:
    found = spread(values)
    return None if found is None else round(found["median"], 1)


def _hop(row: Mapping[str, Any]) -> tuple[str, int]:
    """A row's route and concurrency: what a hop's rounds are grouped by."""
    return str(row["route"]), int(row["concurrency"])


def hop_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per route and concurrency: each side's median over the rounds, and lab / floor round by round."""

    by_round = ratios(rows, "us_per_request", ("lab", "floor"), _hop)
    # The serving processes' CPU, lab / floor per round: the lab's own cost, which ab's share of the
    # machine and the kernel's part of each request do not dilute as they do the wall time's.
    cpu_by_round = ratios(rows, "server_cpu_us", ("lab", "floor"), _hop)
    summary = []
    for (route, c), found in by_round.items():
        mine = [r for r in rows if (r["route"], r["concurrency"]) == (route, c)]
        side = {name: [r for r in mine if r["side"] == name] for name in ("floor", "lab")}
        summary.append({
            "route": route, "concurrency": c,
            "floor_us": _median([r["us_per_request"] for r in side["floor"]]),
            "lab_us": _median([r["us_per_request"] for r in side["lab"]]),
            "ratios": found["rounds"], "ratio": found["median"],
            "floor_cpu_us": _median([r["server_cpu_us"] for r in side["floor"]]),
            "lab_cpu_us": _median([r["server_cpu_us"] for r in side["lab"]]),
            "cpu_lab_floor": cpu_by_round.get((route, c), {}).get("median"),
            # Context switches of the serving processes' threads a request: a count, steadier than a time on a
            # host whose speed moves from one minute to the next (each a wake-up, and a wait for the GIL).
            "floor_switches": _median([r.get("server_switches") for r in side["floor"]]),
            "lab_switches": _median([r.get("server_switches") for r in side["lab"]]),
            "client_cpu_share": max(r["client_cpu_share"] for r in mine),
            "failed": sum(r["failed"] for r in mine),
        })  # fmt: skip
    return summary


def noise_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency: the floor's /ping and its copy's, median over the rounds, and copy / floor round by
    round (1.00 on a quiet host)."""
    by_round = ratios(rows, "us_per_request", ("copy", "floor"), lambda r: int(r["concurrency"]))
    cpu_by_round = ratios(rows, "server_cpu_us", ("copy", "floor"), lambda r: int(r["concurrency"]))
    return [
        {
            "concurrency": c,
            "floor_us": _median([r["us_per_request"] for r in rows if (r["concurrency"], r["side"]) == (c, "floor")]),
            "copy_us": _median([r["us_per_request"] for r in rows if (r["concurrency"], r["side"]) == (c, "copy")]),
            "ratios": found["rounds"],
            "ratio": found["median"],
            "cpu_ratio": cpu_by_round.get(c, {}).get("median"),
            "failed": sum(r["failed"] for r in rows if r["concurrency"] == c),
        }
        for c, found in by_round.items()
    ]


def gil_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round: each side's /ping median and longest during the convoy, and lab / floor of each."""
    if not rows:
        return []
    medians = ratios(rows, "ping_median_ms", ("lab", "floor"), lambda r: "all")["all"]
    longest = ratios(rows, "ping_max_ms", ("lab", "floor"), lambda r: "all")["all"]
    by = {(r["round"], r["side"]): r for r in rows}
    summary = []
    for number in sorted({int(r["round"]) for r in rows}):
        floor, lab = by.get((number, "floor"), {}), by.get((number, "lab"), {})
        summary.append({
            "round": str(number),
            "floor_median_ms": floor.get("ping_median_ms"), "lab_median_ms": lab.get("ping_median_ms"),
            "median_ratio": _nth(medians["rounds"], number - 1),
            "floor_max_ms": floor.get("ping_max_ms"), "lab_max_ms": lab.get("ping_max_ms"),
            "max_ratio": _nth(longest["rounds"], number - 1),
            "pings": f"{floor.get('pings', 0)}/{lab.get('pings', 0)}",
            "failed": floor.get("failed", 0) + lab.get("failed", 0),
        })  # fmt: skip
    if summary:
        summary.append({"round": "median", "median_ratio": medians["median"], "max_ratio": longest["median"]})
    return summary


def _nth(values: Sequence[float], index: int) -> float | None:
    return values[index] if 0 <= index < len(values) else None


def accept_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per server (the lab, the floor) and concurrency: requests per second with each policy, and dispatch / all
    round by round."""

    def pair(row: Mapping[str, Any]) -> tuple[str, int]:
        return row.get("server", "lab"), row["concurrency"]  # (rows saved before the floor's carry no server)

    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(pair(row), []).append(row)

    def rate(group: Sequence[Mapping[str, Any]], policy: str) -> float | None:
        return _median([r["per_second"] for r in group if r["side"] == policy])

    return [
        {
            "server": server,
            "concurrency": c,
            "all_per_s": rate(groups[server, c], "all"),
            "dispatch_per_s": rate(groups[server, c], "dispatch"),
            "ratios": found["rounds"],
            "ratio": found["median"],
            "client_cpu_share": max(r["client_cpu_share"] for r in groups[server, c]),
            "failed": sum(r["failed"] for r in groups[server, c]),
        }
        for (server, c), found in sorted(
            ratios(rows, "per_second", ("dispatch", "all"), pair).items(),
            key=lambda item: (item[0][1], item[0][0] != "lab"),
        )
    ]


def callgrind_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per route and concurrency: each side's thousands of instructions a request, median over the rounds, and
    lab / floor round by round."""

    summary = []
    for (route, c), found in ratios(rows, "k_instructions", ("lab", "floor"), _hop).items():
        mine = [r for r in rows if _hop(r) == (route, c)]
        summary.append({
            "route": route, "concurrency": c,
            "floor_k": _median([r["k_instructions"] for r in mine if r["side"] == "floor"]),
            "lab_k": _median([r["k_instructions"] for r in mine if r["side"] == "lab"]),
            "ratios": found["rounds"], "ratio": found["median"],
            "idle_share": max(r["idle_share"] or 0.0 for r in mine),
            "requests": sum(r["requests"] for r in mine), "failed": sum(r["failed"] for r in mine),
        })  # fmt: skip
    return summary


def summaries(doc: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        "hops": hop_summary(doc.get("hops", [])),
        "gil": gil_summary(doc.get("gil", [])),
        "noise": noise_summary(doc.get("noise", [])),
        "accept": accept_summary(doc.get("accept", [])),
        "instruments": list(doc.get("instruments", [])),
        "callgrind": callgrind_summary(doc.get("callgrind", [])),
    }


# ---------- tables ----------

RATIOS = Column("ratios", "by round", "{}")
HOP_COLUMNS = (
    Column("route", "route", "{}"), Column("concurrency", "c", "{:d}"),
    Column("floor_us", "floor µs", "{:.0f}"), Column("lab_us", "lab µs", "{:.0f}"),
    RATIOS, Column("ratio", "lab/floor"),
    Column("floor_cpu_us", "floor CPU µs", "{:.0f}"), Column("lab_cpu_us", "lab CPU µs", "{:.0f}"),
    Column("cpu_lab_floor", "CPU lab/floor"),
    Column("floor_switches", "floor switches"), Column("lab_switches", "lab switches"),
    Column("client_cpu_share", "ab CPU"), Column("failed", "failed", "{:d}"),
)  # fmt: skip
GIL_COLUMNS = (
    Column("round", "round", "{}"),
    Column("floor_median_ms", "floor median ms", "{:.0f}"), Column("lab_median_ms", "lab median ms", "{:.0f}"),
    Column("median_ratio", "lab/floor"),
    Column("floor_max_ms", "floor max ms", "{:.0f}"), Column("lab_max_ms", "lab max ms", "{:.0f}"),
    Column("max_ratio", "lab/floor"), Column("pings", "pings", "{}"), Column("failed", "failed", "{:d}"),
)  # fmt: skip
ACCEPT_COLUMNS = (
    Column("server", "server", "{}"), Column("concurrency", "c", "{:d}"),
    Column("all_per_s", "all req/s", "{:.0f}"), Column("dispatch_per_s", "dispatch req/s", "{:.0f}"),
    RATIOS, Column("ratio", "dispatch/all"), Column("client_cpu_share", "ab CPU"), Column("failed", "failed", "{:d}"),
)  # fmt: skip
NOISE_COLUMNS = (
    Column("concurrency", "c", "{:d}"),
    Column("floor_us", "floor µs", "{:.0f}"), Column("copy_us", "copy µs", "{:.0f}"),
    RATIOS, Column("ratio", "copy/floor"), Column("cpu_ratio", "CPU copy/floor"), Column("failed", "failed", "{:d}"),
)  # fmt: skip
INSTRUMENT_COLUMNS = (Column("instrument", "instrument", "{}"), Column("us_per_call", "µs per call"))
CALLGRIND_COLUMNS = (
    Column("route", "route", "{}"), Column("concurrency", "c", "{:d}"),
    Column("floor_k", "floor k instr.", "{:.0f}"), Column("lab_k", "lab k instr.", "{:.0f}"),
    RATIOS, Column("ratio", "lab/floor"), Column("idle_share", "idle taken off"),
    Column("requests", "requests", "{:d}"), Column("failed", "failed", "{:d}"),
)  # fmt: skip
TITLES = {
    "hops": (
        "hops: µs per request (wall time over the batch), median over the rounds; lab/floor per round",
        HOP_COLUMNS,
    ),
    "gil": ("gil: /ping during ten GIL-bound /threading requests", GIL_COLUMNS),
    "noise": (
        "noise: the floor's /ping against a copy of itself; 1.00 on a quiet host, and any ratio above can stray as far",
        NOISE_COLUMNS,
    ),
    "accept": (
        "accept: HEAD /ping, a new connection each, --processes 2; the floor's dispatch is a bare parent's hop",
        ACCEPT_COLUMNS,
    ),
    "instruments": ("instruments: each alone, in the bench's own process", INSTRUMENT_COLUMNS),
    "callgrind": (
        "callgrind: thousands of instructions a request in the serving process, its idle rate taken off; "
        "median over the rounds, lab/floor per round",
        CALLGRIND_COLUMNS,
    ),
}


def _shown(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "ratios": " ".join(f"{r:.2f}" for r in row["ratios"])} if "ratios" in row else dict(row)
            for row in rows]  # fmt: skip


def report_lines(doc: Mapping[str, Any], *, markdown: bool = False) -> list[str]:
    """The run's header (when, where, which Python and commit, the command) and a table per part measured."""
    machine = doc.get("machine", {})
    lines = [
        f"{machine.get('recorded_at', '?')}: {machine.get('cores', '?')} cores ({machine.get('cpu_model', '?')}), "
        f"Python {machine.get('python', '?')}, commit {machine.get('commit', '?')}",
        f"command: {doc.get('command', '?')}",
    ]
    lines += [f"skipped: {line}" for line in doc.get("skipped", [])]
    for part, rows in doc.get("summaries", {}).items():
        if rows:
            title, columns = TITLES[part]
            table = markdown_table(_shown(rows), columns) if markdown else text_table(_shown(rows), columns)
            lines += ["", title, "", table]
    return lines

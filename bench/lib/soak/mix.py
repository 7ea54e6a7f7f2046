"""The soak's mix, from what the lab says it runs (/modes, /workloads), and the rate it can take.

Every mode the server can run (available in its /modes), with every
workload its /workloads says that mode runs; a mode that runs no workload
(async) with its own params; and /stats and /metrics. Each request is light:
every numeric param at `scale` (a twentieth) of its default, within its
limits, unless `-p WORKLOAD.NAME=VALUE` says otherwise. A workload that
appears on the server tomorrow is in the mix tomorrow.

The capacity the registry predicts for this mix: each entry's `t` (the
median of requests sent alone) and its lanes (lab/modes: how many of its
runs progress at once on this server) make a mode busy for t / lanes per
request; computing entries keep a core busy for t, and this machine has the
effective cores lab/race/capacity.py measures. With every entry sent
equally often, the capacity is the rate at which the first of these, a mode
or the cores, is full; the soak sends `load` (70 %) of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from bench.lib.soak.link import Link
from lab.modes.contract import make_facts
from lab.modes.registry import MODES
from lab.race import ideal
from lab.race.stats import median

LIGHT_SCALE = 0.05
CAP_FACTOR = 4
CAP_FLOOR = 8
STATS_ROUTES = ("/stats", "/metrics")


@dataclass
class Entry:
    """One kind of request in the mix: its target, its mode and workload, lanes, and t once timed."""

    target: str
    mode: str | None
    workload: str | None  # as the envelope names it ("upstream" for async); None for /stats, /metrics
    lanes: int | None  # None: it only waits (async), with no lane to fill
    computes: bool  # keeps a core busy while it runs
    t_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "mode": self.mode, "workload": self.workload, "lanes": self.lanes,
                "computes": self.computes, "t_s": round(self.t_s, 4)}  # fmt: skip


def light(params: Sequence[Mapping[str, Any]], scale: float, chosen: Mapping[str, str]) -> dict[str, str]:
    """Query values: `chosen` ones as given, numeric ones at `scale` of their default within their limits."""
    query: dict[str, str] = {}
    for param in params:
        name = param["name"]
        if name in chosen:
            query[name] = chosen[name]
        elif param.get("type") == "integer":
            query[name] = str(max(param["min"], min(param["max"], round(param["default"] * scale))))
        elif param.get("type") == "number":
            query[name] = f"{max(param['min'], min(param['max'], param['default'] * scale)):.3g}"
    return query


def _target(path: str, query: Mapping[str, str]) -> str:
    return f"{path}?{urlencode(query)}" if query else path


@dataclass(frozen=True)
class Choice:
    """What the command line chose of the mix: the params' scale, params given by hand, the modes (None: all)."""

    scale: float = LIGHT_SCALE
    params: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    modes: frozenset[str] | None = None


def entries(modes: Sequence[Mapping[str, Any]], workloads: Sequence[Mapping[str, Any]], facts: Mapping[str, Any],
            choice: Choice) -> tuple[list[Entry], list[str]]:  # fmt: skip
    """The mix for a server's /modes and /workloads; and the modes left out, each with why."""
    unknown = sorted((choice.modes or set()) - {mode["name"] for mode in modes})
    if unknown:
        raise RuntimeError(f"the server has no mode {', '.join(unknown)}; its modes: "
                           f"{', '.join(mode['name'] for mode in modes)}")  # fmt: skip
    mix: list[Entry] = []
    skipped: list[str] = []
    for mode in modes:
        why = _left_out(mode, choice)
        if why:
            skipped.append(f"{mode['name']}: {why}")
        else:
            mix += _mode_entries(mode, workloads, facts, choice)
    mix += [Entry(route, None, None, 1, True) for route in STATS_ROUTES]
    return mix, skipped


def _left_out(mode: Mapping[str, Any], choice: Choice) -> str | None:
    if choice.modes is not None and mode["name"] not in choice.modes:
        return "left out (--modes)"
    if not mode.get("available", True):
        return str(mode.get("unavailable_reason"))
    if mode["name"] not in MODES:
        return "not in this checkout's registry (the server runs other code)"
    return None


def _mode_entries(mode: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]], facts: Mapping[str, Any],
                  choice: Choice) -> list[Entry]:  # fmt: skip
    """One mode's part of the mix: its own route (a mode that runs no workload), or each workload it runs."""
    name = mode["name"]
    if not mode.get("runs_workloads", True):
        ran = mode.get("workload") or name
        query = light(mode.get("params", []), choice.scale, choice.params.get(name, {}))
        return [Entry(_target(f"/{name}", query), name, ran, ideal.lanes(name, ran, facts), False)]
    found = []
    for work in workloads:
        if name in work.get("modes", [name]):
            query = light(work["params"], choice.scale, choice.params.get(work["name"], {}))
            lanes = ideal.lanes(name, work["name"], facts)
            found.append(Entry(_target(f"/{name}/{work['name']}", query), name, work["name"], lanes,
                               not work.get("waits", False)))  # fmt: skip
    return found


async def read_mix(link: Link, choice: Choice) -> dict[str, Any]:
    """What the lab runs, as the mix: {"entries", "skipped", "facts", "modes", "workloads"}."""
    modes = await link.json("setup", "/modes")
    workloads = await link.json("setup", "/workloads")
    link.modes = frozenset(mode["name"] for mode in modes)
    stats = await link.stats("setup")
    facts = make_facts(stats["server"], workloads)
    mix, skipped = entries(modes, workloads, facts, choice)
    return {"entries": mix, "skipped": skipped, "facts": facts, "modes": modes, "workloads": workloads}


async def time_alone(link: Link, mix: Sequence[Entry], runs: int) -> None:
    """Each entry's t: the median of `runs` requests sent one at a time (after one unmeasured)."""
    for entry in mix:
        samples = []
        for number in range(runs + 1):
            answer, _ = await link.send("calibrate", entry.target)
            if answer.status != 200:
                raise RuntimeError(f"{entry.target} answered {answer.status or answer.error} when sent alone: "
                                   f"{answer.body[:200].decode(errors='replace')}")  # fmt: skip
            if number:
                samples.append(answer.received - answer.sent)
        entry.t_s = median(samples)


@dataclass(frozen=True)
class Prediction:
    """The mix's capacity (requests/s), what limits it, and the rate the soak sends."""

    capacity_rps: float
    bound: str  # "cores", or the mode whose lanes fill first
    effective_cores: float
    load: float

    cap: int = 0  # the mix's requests in flight at most (bench/lib/soak/traffic.py)

    @property
    def rate_rps(self) -> float:
        return self.capacity_rps * self.load

    def as_dict(self) -> dict[str, Any]:
        return {"capacity_rps": round(self.capacity_rps, 3), "bound": self.bound, "load": self.load,
                "rate_rps": round(self.rate_rps, 3), "effective_cores": round(self.effective_cores, 3),
                "in_flight_cap": self.cap}  # fmt: skip


def predict(mix: Sequence[Entry], effective_cores: float, load: float) -> Prediction:
    """The rate at which the first mode's lanes, or the cores, are full with every entry sent equally often."""
    count = len(mix)
    busy: dict[str, float] = {}  # lane-seconds a request of the mix, on average, asks of each mode (x count)
    for entry in mix:
        if entry.mode is not None and entry.lanes:
            busy[entry.mode] = busy.get(entry.mode, 0.0) + entry.t_s / entry.lanes
    core_s = sum(entry.t_s for entry in mix if entry.computes)
    limits = {mode: count / seconds for mode, seconds in busy.items() if seconds > 0}
    if core_s > 0:
        limits["cores"] = effective_cores * count / core_s
    if not limits:
        raise RuntimeError("nothing in the mix takes time: no capacity to predict")
    bound = min(limits, key=lambda name: limits[name])
    # At the rate sent, about rate x mean t requests are in flight (Little's law); four times that, and never
    # fewer than CAP_FLOOR, before an arrival is held back.
    in_flight = limits[bound] * load * sum(entry.t_s for entry in mix) / count
    return Prediction(limits[bound], bound, effective_cores, load, max(CAP_FLOOR, math.ceil(CAP_FACTOR * in_flight)))

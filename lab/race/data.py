"""What a race is and what it came to: its spec, its single-run time, its responses and probes, and their Summary.

Data and arithmetic only: lab/race/engine.py sends the requests and fills
these in; the Summary is what race.json, the tables and the page read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.modes.registry import MODES
from lab.race.capacity import Capacity
from lab.race.ideal import cpu_ideal_makespan, ideal_makespan, ideal_words, lanes, reachable_makespan
from lab.race.stats import median, percentile, ratio

Event = dict[str, Any]


@dataclass(frozen=True)
class RaceSpec:
    """One race: `concurrency` clients released together at `mode`'s route, each sending `reps` requests in a row.

    Another server (bench/compare.py's uWSGI and gunicorn) is raced with its
    own `url` and the `server` facts of the lab mode whose capacity model
    describes it (e.g. uWSGI's `--processes 2` is "blocking" in 2 processes):
    it has no /stats to read them from.
    """

    base: str
    mode: str
    workload: str
    params: dict[str, str]
    concurrency: int
    reps: int = 1
    # Solo requests whose median is t; with `solo_after` as many again after the race (as bench/siege.sh
    # does): on a host whose speed drifts, runs timed on both sides of the race stand for it better.
    solo_runs: int = 3
    solo_after: bool = False
    warmup_s: float = 0.0
    measure_capacity: bool = True
    ping_every: float = 0.005
    # > 0: the probes are reported as one "pings" event per that many seconds (a page drawing them
    # need not see each of hundreds).
    ping_batch: float = 0.0
    timeout: float = 300.0
    url: str | None = None
    server: dict[str, Any] | None = None

    @property
    def ran(self) -> str:
        """What this race runs, as its envelopes name it (async: "upstream", unless it awaits the workload)."""
        mode = MODES[self.mode]
        return self.workload if mode.runs(self.workload) else mode.workload or self.workload


@dataclass(frozen=True)
class Solo:
    """The single-run time t the ideal is computed from: the solo runs' seconds, and the server's facts."""

    samples: list[float]
    server: dict[str, Any]

    @property
    def seconds(self) -> float:
        """t: the median of the solo runs (one of them alone is often slowed by something else)."""
        return median(self.samples)


@dataclass
class Response:
    index: int
    sent: float
    received: float
    status: int
    body: Any

    @property
    def seconds(self) -> float:
        return self.received - self.sent


@dataclass
class Ping:
    sent: float
    received: float
    ms: float
    status: int
    # The answering process's GIL contention lately, as /ping reports it (None: not measured).
    gil: float | None = None
    # And its threads' run-queue share over the same window (lab/instruments/cores.py).
    core_wait: float | None = None


@dataclass
class Summary:
    mode: str
    workload: str
    concurrency: int
    solo_s: float
    elapsed_s: float
    mean_s: float
    shortest_s: float
    longest_s: float
    transactions: int
    failed: int
    ideal_s: float
    ratio: float
    cores: int
    processes: int
    lanes: int | None
    worker_pids: list[int] = field(default_factory=list)
    server_pids: list[int] = field(default_factory=list)
    # Answered requests per server process (pid as text, JSON's keys): how a forked server spread them.
    spread: dict[str, int] = field(default_factory=dict)
    ping_count: int = 0
    ping_p50_ms: float | None = None
    ping_p99_ms: float | None = None
    ping_max_ms: float | None = None
    # More context for tables and charts; the page reads only what it needs.
    url: str = ""
    params: dict[str, str] = field(default_factory=dict)
    solo_samples_s: list[float] = field(default_factory=list)
    started_at: float = 0.0
    p95_s: float = 0.0
    throughput_rps: float = 0.0
    reps: int = 1
    # The ideal in plain words (lab/race/ideal.py), for the page's summary.
    ideal_words: str = ""
    # Noise: (slowest - fastest) / median of the solo runs t comes from.
    solo_spread: float = 0.0
    # This machine's parallel capacity (lab/race/capacity.py), where runs could go at once: how much
    # longer one of `cores` runs took when all went together, and the ideal that leaves reachable.
    slowdown: float | None = None
    reachable_ideal_s: float | None = None
    reachable_ratio: float | None = None
    # The ideal from the burst's own CPU time (lab/race/ideal.py's cpu_ideal_makespan, with the
    # answered runs' median CPU time as t), and the makespan over it: unmoved by the host's speed.
    cpu_ideal_s: float | None = None
    cpu_ratio: float | None = None
    # Where the answered runs' time went, as shares of their summed run time (timing's split):
    # computing (1.0: every run computed all the time it was started), waiting for a core (the run
    # queue), waiting on purpose (a sleep, a query), blocked, and the part of blocked that was the GIL
    # (0 where each run's GIL is its own). None where the envelopes do not say.
    cpu_share: float | None = None
    core_wait_share: float | None = None
    io_wait_share: float | None = None
    blocked_share: float | None = None
    gil_wait_share: float | None = None
    # The server's GIL contention and core wait as the /ping probes saw them (None where not measured).
    gil_p50: float | None = None
    gil_max: float | None = None
    core_wait_p50: float | None = None
    core_wait_max: float | None = None


def spread_of(pids: Sequence[int]) -> dict[str, int]:
    """How many requests each server process answered, the busiest first."""
    return {str(pid): count for pid, count in Counter(pids).most_common()}


def ping_batch_event(batch: Sequence[Ping]) -> Event:
    """Several probes as one event: how many, how long they waited (median, worst), the GIL lately."""
    answered = [p for p in batch if p.status == 200]
    worst = max(answered, key=lambda p: p.ms, default=None)
    gils = [p.gil for p in answered if p.gil is not None]
    cores = [p.core_wait for p in answered if p.core_wait is not None]
    return {
        "event": "pings",
        "count": len(batch),
        "failed": len(batch) - len(answered),
        "from": batch[0].sent,
        "to": batch[-1].received,
        "p50_ms": percentile([p.ms for p in answered], 0.5),
        "max_ms": worst.ms if worst else None,
        "worst": {"sent": worst.sent, "received": worst.received, "ms": worst.ms} if worst else None,
        "gil": max(gils) if gils else None,
        "core_wait": max(cores) if cores else None,
    }


def summarise(
    spec: RaceSpec, solo: Solo, capacity: Capacity | None, responses: list[Response], pings: list[Ping], *, url: str
) -> Summary:
    """The race's Summary: its makespan against the ideal, the responses' times, the envelopes', the probes'."""
    ok = [r for r in responses if r.status == 200]
    seconds = [r.seconds for r in responses]
    start = min(r.sent for r in responses)
    end = max(r.received for r in responses)
    samples = solo.samples
    return Summary(
        mode=spec.mode,
        workload=spec.ran,
        concurrency=spec.concurrency,
        solo_s=round(solo.seconds, 4),
        elapsed_s=round(end - start, 4),
        mean_s=round(sum(seconds) / len(seconds), 4),
        shortest_s=round(min(seconds), 4),
        longest_s=round(max(seconds), 4),
        transactions=len(ok),
        failed=len(responses) - len(ok),
        cores=int(solo.server["cpu_count"]),
        processes=int(solo.server.get("processes", 1)),
        url=url,
        params=dict(spec.params),
        solo_samples_s=[round(s, 4) for s in samples],
        started_at=start,
        p95_s=round(percentile(seconds, 0.95) or 0.0, 4),
        throughput_rps=round(len(ok) / (end - start), 3) if end > start else 0.0,
        reps=spec.reps,
        solo_spread=round((max(samples) - min(samples)) / median(samples), 3) if samples else 0.0,
        **_against_the_ideal(spec, solo, capacity, end - start),
        **_against_its_cpu(spec, solo, ok, end - start),
        **_from_envelopes(ok),
        **_from_probes(pings),
    )


def _against_the_ideal(spec: RaceSpec, solo: Solo, capacity: Capacity | None, elapsed: float) -> dict[str, Any]:
    """The ideal makespan and the ratio to it; where runs could go at once, the ideal this machine can reach."""
    mode, name, server, t, n = spec.mode, spec.ran, solo.server, solo.seconds, spec.concurrency
    ideal = ideal_makespan(mode, name, server, t, n, reps=spec.reps)
    able = lanes(mode, name, server)
    reachable: float | None
    if capacity is not None:
        reachable = reachable_makespan(mode, name, server, t, n, at_once=capacity.at_once, reps=spec.reps)
    elif able is None or able < 2 or server.get("waits", {}).get(name, False):
        reachable = ideal  # no runs compete for cores: what the machine gives parallel work does not matter
    else:
        reachable = None  # not measured (--no-capacity)
    return {
        "ideal_s": round(ideal, 4),
        "ratio": round(elapsed / ideal, 3) if ideal > 0 else float("nan"),
        "lanes": able,
        "ideal_words": ideal_words(mode, name, server, t, n, reps=spec.reps),
        "slowdown": None if capacity is None else capacity.slowdown,
        "reachable_ideal_s": None if reachable is None else round(reachable, 4),
        "reachable_ratio": round(elapsed / reachable, 3) if reachable else None,
    }


def _against_its_cpu(spec: RaceSpec, solo: Solo, ok: list[Response], elapsed: float) -> dict[str, Any]:
    """The ideal from the answered runs' own CPU time, and the makespan's ratio to it."""
    cpu = [t["cpu_ms"] / 1000 for r in ok if isinstance(r.body, dict) and (t := r.body.get("timing"))
           and t.get("cpu_ms") is not None]  # fmt: skip
    cpu_t = median(cpu) if len(cpu) == len(ok) and cpu else None
    ideal = cpu_ideal_makespan(spec.mode, spec.ran, solo.server, cpu_t, spec.concurrency, reps=spec.reps)
    return {
        "cpu_ideal_s": None if ideal is None else round(ideal, 4),
        "cpu_ratio": ratio(elapsed, ideal) if ideal else None,
    }


def _from_envelopes(ok: list[Response]) -> dict[str, Any]:
    """What the answered requests' envelopes say: which processes ran and served them, computing or waiting."""
    bodies = [r.body for r in ok if isinstance(r.body, dict)]
    timings = [body["timing"] for body in bodies if "timing" in body]
    return {
        "worker_pids": sorted({body["worker"]["pid"] for body in bodies}),
        "server_pids": sorted({body["server"]["pid"] for body in bodies}),
        "spread": spread_of([body["server"]["pid"] for body in bodies]),
        "cpu_share": share_of(timings, "cpu_ms"),
        "core_wait_share": share_of(timings, "core_wait_ms"),
        "io_wait_share": share_of(timings, "io_wait_ms"),
        "blocked_share": share_of(timings, "blocked_ms"),
        "gil_wait_share": share_of(timings, "gil_wait_ms"),
    }


def share_of(timings: list[dict[str, Any]], part: str) -> float | None:
    """`part`'s share of the runs' summed run_ms, over the runs that report it (None: none does)."""
    known = [(t[part], t["run_ms"]) for t in timings if t.get(part) is not None]
    run_ms = sum(r for _, r in known)
    return round(sum(p for p, _ in known) / run_ms, 3) if known and run_ms else None


def _from_probes(pings: list[Ping]) -> dict[str, Any]:
    """How long the answered /ping probes waited, and the GIL contention they reported."""
    ping_ms = [p.ms for p in pings if p.status == 200]
    gils = [p.gil for p in pings if p.status == 200 and p.gil is not None]
    cores = [p.core_wait for p in pings if p.status == 200 and p.core_wait is not None]
    return {
        "ping_count": len(pings),
        "ping_p50_ms": percentile(ping_ms, 0.5),
        "ping_p99_ms": percentile(ping_ms, 0.99),
        "ping_max_ms": max(ping_ms) if ping_ms else None,
        "gil_p50": percentile(gils, 0.5),
        "gil_max": max(gils) if gils else None,
        "core_wait_p50": percentile(cores, 0.5),
        "core_wait_max": max(cores) if cores else None,
    }

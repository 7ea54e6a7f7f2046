"""The sizing model: a request's measured split and the machine's usable cores -> throughput and latency of P x T.

A request costs `cpu_ms` of CPU (the server's, all of it: the work and the
HTTP path), of which `gil_ms` holds the GIL, and waits `wait_ms` on purpose
(a query, an upstream call, a sleep); between one request and the next a
thread that always has one queued still idles `handoff_ms` (the server's
own hand-off: its event loop or accept thread passing the next request on,
the wake-ups in between), so a request holds its thread for
hold = cpu + wait + handoff; alone it is answered in `alone_ms` (the
client's view). The load that measures it runs on the same cores and costs
`client_cpu_ms` a request. P processes of T threads each on C usable cores
(the quota's worth) can never answer more than any of

    C / (cpu + client)   the cores: every request's CPU, and its client's, comes out of C cores' time
    P / gil        the GILs: at most one core of GIL-held work per process
    P * T / hold   the threads: a request holds its thread for hold

requests a second, and the lowest of them is the bound. What they do
answer: each process is a closed system of T threads, each cycling
between its GIL (a queue: gil of work a request) and hold - gil away from
it (its waits, and the work that releases the GIL), and Mean Value
Analysis gives that system's throughput exactly: it reaches P / gil only
slowly past T = hold / gil (1 + (wait + handoff) / cpu for Python code), because the
threads' GIL-held turns collide. So

    X(P, T) = min(C / (cpu + client), P * MVA(T; gil * slowdown, hold - gil)) * switching(P, T)

where slowdown is how much slower a process's GIL-held work runs for the
other processes computing at the same moments: (1 + K) / C when K others
compute, K binomial over the other P - 1, each computing its share of the
time (a fixed point; 1 while P <= C), and switching(P, T) = 1 / (1 + SWITCH_COST *
excess), excess being how many more threads are runnable than there are
cores when every thread is busy (one GIL holder a process, plus the work
that releases the GIL): the context switches and cache refills the
write-ups blame for 10 x 2 losing to 8 x 8. So the processes come out
about C * gil / cpu (C for Python code), and the threads a process
somewhat more than 1 + (wait + handoff) / cpu: a second thread covers the
first one's hand-off, which one thread a process leaves as idle cores; `--memory` rules out points whose
processes and threads do not fit. The recommendation is the point of
highest X, the smallest (fewest processes, then threads) of those within
TIE of it.

Latency, by Little's law: N users sending back to back keep N requests in
the server, so each takes N / X once X is the limit (alone_ms before); an
open arrival rate L uses rho = L / X of the bottleneck: a request waits
rho / (1 - rho) x (ca2 + cs2) / 2 services (Kingman's G/G/1 formula: ca2
the arrivals' squared coefficient of variation, 0 for the advisor's evenly
spaced ones, cs2 the request's own, measured alone; rho taken at most
0.95, as a run of seconds never settles nearer) and the 95th percentile
about three times the mean wait (an exponential tail); past 1 the queue
also grows by L - X a second for as long as the arrivals last.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# What each runnable thread beyond the cores costs the rest (context switches, caches refilled): an assumption
# written down here, set small so that it only breaks ties; the sweep measures what it really is.
SWITCH_COST = 0.02
# Points predicted within this share of the best are as good (no finer than the split's own noise): the smallest
# of them is recommended.
TIE = 0.02
MAX_THREADS = 64
TAIL_FACTOR = math.log(20)  # p95 of an exponential wait over its mean
SETTLES = 0.95  # the busiest share of capacity whose queue is taken as settled


@dataclass(frozen=True)
class Split:
    """What one request costs, measured: CPU ms (server-wide), of it GIL-held, waited on purpose, alone."""

    cpu_ms: float
    gil_ms: float
    wait_ms: float
    alone_ms: float
    # How much one request's time varies alone: its squared coefficient of variation (variance / mean²);
    # 1 for times as varied as an exponential's, 0 for a clockwork.
    variation: float = 1.0
    # A thread's idle time between requests when one is always queued (its server's hand-off), and the load
    # generator's CPU a request on the same cores: both measured (bench/lib/sizing/probe.py), 0 if unknown.
    handoff_ms: float = 0.0
    client_cpu_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.cpu_ms <= 0 or self.alone_ms <= 0:
            raise ValueError("a request must take some CPU and some time")

    @property
    def hold_ms(self) -> float:
        """How long a request holds the thread that serves it: its CPU, its wait, and the hand-off to the next."""
        return self.cpu_ms + self.wait_ms + self.handoff_ms


@dataclass(frozen=True)
class Memory:
    """Megabytes: pages all serving processes share (counted once), each process's own with one thread, each
    thread more's."""

    shared_mb: float = 0.0
    process_mb: float = 0.0
    thread_mb: float = 0.0

    def total(self, processes: int, threads: int) -> float:
        return self.shared_mb + processes * (self.process_mb + (threads - 1) * self.thread_mb)


@dataclass(frozen=True)
class Point:
    """One configuration: processes, each with `threads` threads serving requests."""

    processes: int
    threads: int

    @property
    def label(self) -> str:
        return f"{self.processes} x {self.threads}"


@dataclass(frozen=True)
class Capacity:
    """Requests per second a point can answer, and which limit binds: "cores", "GIL" or "threads"."""

    throughput_rps: float
    bound: str
    limits: dict[str, float]
    switching: float


def threads_throughput(threads: int, demand_s: float, think_s: float) -> float:
    """Requests a second of one process whose `threads` threads each cycle between the GIL (a queue: `demand_s` of
    GIL-held work a request) and `think_s` away from it (waits, work that releases the GIL): exact Mean Value
    Analysis of that closed system (Reiser and Lavenberg, 1980)."""
    if demand_s <= 0:
        return threads / think_s
    queue = throughput = 0.0
    for customers in range(1, threads + 1):
        response = demand_s * (1 + queue)  # the GIL-held work, behind the threads already queued for the GIL
        throughput = customers / (response + think_s)
        queue = throughput * response
    return throughput


def core_slowdown(processes: int, cores: float, busy: float) -> float:
    """How much slower a process computes for sharing `cores` with the others, each computing a `busy` share of
    the time, independently: E[max(1, (1 + K) / cores)] with K ~ Binomial(processes - 1, busy)."""
    others = processes - 1
    return sum(
        math.comb(others, k) * busy**k * (1 - busy) ** (others - k) * max(1.0, (1 + k) / cores)
        for k in range(others + 1)
    )


def process_throughput(point: Point, cores: float, gil_s: float, hold_s: float) -> float:
    """One process's requests a second (threads_throughput), its GIL-held work slowed by the other processes that
    compute at the same moments on the same cores: a fixed point, found by iterating from no slowdown."""
    slowdown = 1.0
    for _ in range(50):
        found = threads_throughput(point.threads, gil_s * slowdown, hold_s - gil_s)
        busy = min(1.0, found * gil_s * slowdown)  # the share of the time this process has a thread computing
        slowdown, before = core_slowdown(point.processes, cores, busy), slowdown
        if abs(slowdown - before) < 1e-6:
            break
    return threads_throughput(point.threads, gil_s * slowdown, hold_s - gil_s)


def capacity(split: Split, cores: float, point: Point) -> Capacity:
    """X(P, T): the model's throughput for `point` on `cores` cores' worth of CPU."""
    cpu_s, gil_s, hold_s = split.cpu_ms / 1000, split.gil_ms / 1000, split.hold_ms / 1000
    limits = {
        "cores": cores / (cpu_s + split.client_cpu_ms / 1000),
        "GIL": point.processes / gil_s if gil_s > 0 else math.inf,
        "threads": point.processes * point.threads / hold_s,
    }
    bound = min(limits, key=lambda name: limits[name])
    per_process = process_throughput(point, cores, gil_s, hold_s)
    # Runnable at once when every thread is busy: one GIL-holder a process at most, plus the work that releases
    # the GIL (threads waiting for a GIL sleep, and take no core).
    busy = point.threads / hold_s
    computing = point.processes * (min(1.0, busy * gil_s) + busy * (cpu_s - gil_s))
    switching = 1 / (1 + SWITCH_COST * max(0.0, computing - cores))
    finite = {name: round(value, 2) for name, value in limits.items() if math.isfinite(value)}
    throughput = min(limits["cores"], point.processes * per_process) * switching
    return Capacity(throughput, bound, finite, round(switching, 4))


def recommend(split: Split, cores: float, memory: Memory, allowed_mb: float | None, max_processes: int) -> Point:
    """The point of highest predicted throughput that fits `allowed_mb`; of those within TIE of it, the one with
    the fewest processes (a process costs more memory than a thread), then threads."""
    fits = [
        Point(p, t)
        for p in range(1, max_processes + 1)
        for t in range(1, MAX_THREADS + 1)
        if allowed_mb is None or memory.total(p, t) <= allowed_mb
    ]
    if not fits:
        return Point(1, 1)  # nothing fits: the least there is (the answer says it does not fit)
    best = max(capacity(split, cores, point).throughput_rps for point in fits)
    good = [point for point in fits if capacity(split, cores, point).throughput_rps >= best * (1 - TIE)]
    return min(good, key=lambda point: (point.processes, point.threads))


def closed_latency_s(split: Split, throughput_rps: float, users: int) -> float:
    """A request's time with `users` sending back to back: N / X (Little's law) once the server is the limit."""
    return max(split.alone_ms / 1000, users / throughput_rps)


def open_p95_s(split: Split, throughput_rps: float, rate: float, seconds: float, *, arrivals: float = 0.0) -> float:
    """The 95th percentile time at `rate` arrivals a second for `seconds`: the queue that settles (Kingman's
    G/G/1 wait, rho / (1 - rho) x (arrivals' + service's variation) / 2 services, with rho at most SETTLES: nearer
    to capacity a run of seconds never reaches its steady state), plus, past the capacity, what the queue grows
    by before the 95th percentile arrival. `arrivals` is the arrivals' variation: 0 for evenly spaced ones (the
    advisor's), 1 for Poisson's."""
    rho = min(SETTLES, rate / throughput_rps)
    settled = TAIL_FACTOR * rho / (1 - rho) * (arrivals + split.variation) / 2 / throughput_rps
    grown = max(0.0, rate - throughput_rps) * 0.95 * seconds / throughput_rps
    return split.alone_ms / 1000 + settled + grown


def predict(split: Split, cores: float, memory: Memory, point: Point, *, users: int, rate: float,
            seconds: float) -> dict[str, Any]:  # fmt: skip
    """Everything the model says of `point`: its throughput and bound, closed and open latency, its memory."""
    found = capacity(split, cores, point)
    closed_rps = min(found.throughput_rps, users / (split.alone_ms / 1000))
    return {
        "throughput_rps": round(found.throughput_rps, 2),
        "bound": found.bound,
        "limits_rps": found.limits,
        "switching": found.switching,
        "closed_rps": round(closed_rps, 2),
        "closed_p95_ms": round(1000 * closed_latency_s(split, closed_rps, users), 1),
        "open_rps": round(min(rate, found.throughput_rps), 2),
        "open_p95_ms": round(1000 * open_p95_s(split, found.throughput_rps, rate, seconds), 1),
        "memory_mb": round(memory.total(point.processes, point.threads), 1),
    }


def describe(split: Split) -> dict[str, Any]:
    """The split as it is written down in size.json."""
    return asdict(split)

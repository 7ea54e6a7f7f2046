"""The ideal makespan of a race: the best elapsed time a server allows, from its modes' capacity (lab/modes/).

With `lanes` runs making progress at once and one run taking `t` alone, N
simultaneous requests need ceil(N / lanes) rounds of `t`: 10·t for blocking
and GIL-holding threading, ceil(10/C)·t for processing and forked servers on
C cores, ceil(10/min(C, pool))·t for GIL-releasing work in threading, and
about one wait for async. This is the one implementation: the bench tools
and the lab page (which receives these numbers in the race's events) use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lab.modes.contract import Capacity, Facts
from lab.modes.registry import MODES


def capacity(mode: str, workload: str, server: Facts) -> Capacity:
    """The mode's capacity on this server for this workload (KeyError for an unknown mode)."""
    return MODES[mode].capacity(server, workload)


def lanes(mode: str, workload: str, server: Facts) -> int | None:
    """How many runs can make progress at once; None when every request only waits (async)."""
    return capacity(mode, workload, server).lanes


def rounds(lanes: int | None, concurrency: int, reps: int = 1) -> int:
    """Turns the busiest lane takes: every run of every client, and no client faster than its own `reps`."""
    if lanes is None:
        return reps  # every call waits at the upstream together
    return max(reps, math.ceil(concurrency * reps / lanes))


def ideal_makespan(mode: str, workload: str, server: Facts, solo_s: float, concurrency: int, *, reps: int = 1) -> float:
    """The best possible elapsed time for `concurrency` simultaneous runs of `solo_s` each.

    With `reps` > 1 each of the `concurrency` clients sends its requests one
    after another (siege -r): the work is concurrency x reps runs, and no
    client can finish in fewer than `reps` rounds.
    """
    return rounds(lanes(mode, workload, server), concurrency, reps) * solo_s


def cpu_ideal_makespan(
    mode: str, workload: str, server: Facts, cpu_s: float | None, concurrency: int, *, reps: int = 1
) -> float | None:
    """The ideal from the burst's own runs: ideal_makespan with their CPU time per run as `t`.

    A solo `t` is timed at one moment and the burst at another, on a host whose
    speed moves; the runs' CPU time is taken during the burst itself and leaves
    out time the host gave to others (its steal, its run queue), so this ideal
    does not drift with the host. None where the runs compute nothing worth
    timing (a workload that waits, /async) or did not report their CPU.
    """
    if not cpu_s or lanes(mode, workload, server) is None or server.get("waits", {}).get(workload, False):
        return None
    return ideal_makespan(mode, workload, server, cpu_s, concurrency, reps=reps)


def reachable_makespan(
    mode: str,
    workload: str,
    server: Facts,
    solo_s: float,
    concurrency: int,
    *,
    at_once: Callable[[int], float],
    reps: int = 1,
) -> float:
    """The ideal this machine can really reach: rounds as ideal_makespan counts them, but a round of m
    runs at once takes `at_once(m)` times as long as one alone, as measured here (lab/race/capacity.py)."""
    able = lanes(mode, workload, server)
    if able is None or able < 2:
        return ideal_makespan(mode, workload, server, solo_s, concurrency, reps=reps)
    if concurrency <= able:  # every client at once, each sending its requests one after another
        return reps * at_once(concurrency) * solo_s
    full, rest = divmod(concurrency * reps, able)
    return (full * at_once(able) + (at_once(rest) if rest else 0.0)) * solo_s


def seconds(value: float) -> str:
    """A duration as the page shows it: 45 ms, 0.39 s, 12.3 s."""
    if value < 0.1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def ideal_words(mode: str, workload: str, server: Facts, solo_s: float, concurrency: int, *, reps: int = 1) -> str:
    """The ideal in plain words, as the page shows it below the timeline.

    For example: 'the event loop runs one request at a time: 10 (times) 0.39 s', or
    '2 worker processes can compute at once on 2 cores: 5 rounds of 0.39 s'.
    """
    able = capacity(mode, workload, server)
    turns = rounds(able.lanes, concurrency, reps)
    t = seconds(solo_s)
    if able.lanes is None:
        return f"{able.because}, {t}." if turns == 1 else f"{able.because}, {turns} × {t}."
    if able.lanes == 1:
        return f"{able.because}: {turns} × {t}."
    return f"{able.because}: {turns} round{'s' if turns != 1 else ''} of {t}."

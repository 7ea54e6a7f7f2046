"""This machine's parallel capacity, measured: C copies of a pure-Python loop at once against one alone.

The ideal makespan assumes C cores run C workers each at full speed. A
virtual machine's cores are often shared with other guests, and two runs at
once can each take longer than one alone. C processes (spawned, so no
GIL is shared) wait for a signal; in each round either one of them or all of
them run the loop, and a round's makespan is timed. Rounds alternate, one
alone then all together, ROUNDS times, and the median of the pairs' ratios is
the `slowdown`: a host whose speed drifts from second to second moves both
halves of a pair alike. lab/race/ideal.py turns it into the ideal this machine
can reach.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

# About 0.1 s of counting on a current core: long enough to dwarf wake-up
# jitter, short enough that the whole measure adds about a second to a race.
LOOP_N = 2_500_000
ROUNDS = 3


@dataclass(frozen=True)
class Capacity:
    copies: int  # how many ran at once (the machine's cores)
    solo_s: float  # one copy alone (median)
    together_s: float  # the makespan of `copies` copies started together (median)
    slowdown: float  # median of together / alone over the rounds: 1.0 is truly parallel

    @property
    def effective_cores(self) -> float:
        """Cores' worth of parallel work this machine gave: copies / slowdown."""
        return self.copies / self.slowdown

    def at_once(self, runs: int) -> float:
        """How much longer one run takes when `runs` go at once (interpolated between 1 and `copies`)."""
        if self.copies < 2 or runs < 2:
            return 1.0
        return 1.0 + (self.slowdown - 1.0) * (min(runs, self.copies) - 1) / (self.copies - 1)


def _worker(pipe: Connection) -> None:
    while pipe.recv():  # a falsy message: stop
        started = time.perf_counter()
        i = 0
        while i < LOOP_N:
            i += 1
        pipe.send((started, time.perf_counter()))


def _round(pipes: list[Connection]) -> float:
    """Run the loop in these workers at once; the makespan (perf_counter is machine-wide on Linux)."""
    for pipe in pipes:
        pipe.send(True)
    spans = [pipe.recv() for pipe in pipes]
    return float(max(end for _, end in spans) - min(start for start, _ in spans))


def measure(copies: int, rounds: int = ROUNDS) -> Capacity:
    if copies < 2:
        return Capacity(copies, 0.0, 0.0, 1.0)
    context = multiprocessing.get_context("spawn")
    pipes, workers = [], []
    for _ in range(copies):
        ours, theirs = context.Pipe()
        worker = context.Process(target=_worker, args=(theirs,), daemon=True)
        worker.start()
        pipes.append(ours)
        workers.append(worker)
    try:
        _round(pipes)  # every worker up and warm; not timed
        solo, together = [], []
        for _ in range(rounds):
            solo.append(_round(pipes[:1]))
            together.append(_round(pipes))
    finally:
        for pipe in pipes:
            with contextlib.suppress(OSError):  # a worker that died already: the error to report is the first one
                pipe.send(False)
        for worker in workers:
            worker.join(10)
    slowdown = statistics.median(max(1.0, t / s) for s, t in zip(solo, together, strict=True))
    return Capacity(
        copies, round(statistics.median(solo), 4), round(statistics.median(together), 4), round(slowdown, 3)
    )

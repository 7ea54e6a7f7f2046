"""The async mode: a run that awaits a slow upstream (runner.py; the client: client.py; the embedded
upstream it calls: server.py), or awaits one of the lab's workloads written to be awaited (/async/mix).

Its folder is named for what it waits on: `async` is a Python keyword.
"""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory, waits
from workloads.params import FloatParam, IntParam, Param

UPSTREAM = "upstream"  # what the mode runs itself, as its envelopes name it
# The lab's workloads it awaits at /async/{workload} (those written to be awaited: tests/test_mix.py checks).
AWAITS = ("mix", "page")

ASYNC_PARAMS: tuple[Param, ...] = (
    FloatParam("delay", 1.0, 0.0, 30.0, "seconds the upstream waits before answering"),
    IntParam("fanout", 1, 1, 50, "concurrent upstream calls awaited together"),
)
# What async runs, described as /workloads describes a workload: a call that only waits, without the GIL.
UPSTREAM_TRAITS = {"name": UPSTREAM, "releases_gil": True, "waits": True}


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    if workload not in AWAITS:
        return Capacity(None, "every call waits at the upstream at the same time, so about one wait")
    if waits(facts, workload):
        return Capacity(None, "every run waits on the event loop at the same time, so about one wait")
    return Capacity(1, "the event loop's one thread computes one run at a time; only their waits overlap")


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.upstream.runner import AsyncRunner  # noqa: PLC0415

    return AsyncRunner


MODE = Mode(
    "async",
    "awaits a slow upstream: one thread waits for many calls at once. Great for waiting, no help for computing.",
    "upstream",
    capacity,
    runner=runner,
    summary="as async I/O",
    workload=UPSTREAM,
    params=ASYNC_PARAMS,
    awaits=AWAITS,
)

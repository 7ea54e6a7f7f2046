"""The async mode: a run that awaits a slow upstream (runner.py; the client: client.py; the embedded
upstream it calls: server.py).

Its folder is named for what it waits on: `async` is a Python keyword.
"""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode
from workloads.params import FloatParam, IntParam, Param

ASYNC_PARAMS: tuple[Param, ...] = (
    FloatParam("delay", 1.0, 0.0, 30.0, "seconds the upstream waits before answering"),
    IntParam("fanout", 1, 1, 50, "concurrent upstream calls awaited together"),
)
# What async runs, described as /workloads describes a workload: a call that only waits, without the GIL.
UPSTREAM_TRAITS = {"name": "upstream", "releases_gil": True, "waits": True}


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    return Capacity(None, "every call waits at the upstream at the same time, so about one wait")


MODE = Mode(
    "async",
    "awaits a slow upstream: one thread waits for many calls at once. Great for waiting, no help for computing.",
    "upstream",
    capacity,
    runner="lab.modes.upstream.runner.AsyncRunner",
    summary="as async I/O",
    workload="upstream",
    params=ASYNC_PARAMS,
)

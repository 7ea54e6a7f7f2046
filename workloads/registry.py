"""The workload registry: what runs, with which params, and how it is timed."""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workloads import cpu, io, mix, ml, numeric, page
from workloads.clocks import THREAD, Clocks, gil_enabled, thread_core_wait
from workloads.params import ChoiceParam, FloatParam, IntParam, Param, parse_params
from workloads.timing import RunRecord, time_await, time_call


@dataclass(frozen=True)
class Workload:
    name: str
    func: Callable[..., Any]
    description: str
    params: tuple[Param, ...]
    # Declared here, measured by tests/test_gil.py (how long another thread
    # waits for the GIL while this one runs), which fails if they disagree: a
    # declaration nobody measured would be the folklore this lab replaces.
    # Measuring at start-up instead would cost seconds and be noisier.
    releases_gil: bool
    # It spends its time waiting, not computing: it needs a free thread or
    # worker, not a core, so the ideal does not cap it by the core count.
    waits: bool = False
    # Extension modules it imports ("numpy"): a mode whose workers cannot load one refuses it (lab/modes/registry.py).
    needs: tuple[str, ...] = ()
    # The same work written to be awaited on an event loop (its waits awaited, not slept), where there is one.
    awaited: Callable[..., Coroutine[Any, Any, Any]] | None = None

    def parse(self, query: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        return parse_params(self.name, self.params, query)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "releases_gil": self.releases_gil,
            "waits": self.waits,
            "needs": list(self.needs),
            "awaitable": self.awaited is not None,
            "params": [p.describe() for p in self.params],
        }


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "count",
            cpu.count,
            "Pure-Python counting loop: the GIL is held from start to end.",
            (IntParam("n", 30_000_000, 1, 200_000_000, "loop iterations"),),
            releases_gil=False,
        ),
        Workload(
            "fib",
            cpu.fib,
            "Naive recursive Fibonacci: millions of Python calls, GIL held throughout.",
            (IntParam("n", 34, 1, 38, "which Fibonacci number (cost grows ~1.6x per step)"),),
            releases_gil=False,
        ),
        Workload(
            "matmul",
            numeric.matmul,
            "numpy matrix product: BLAS runs without the GIL (capped to 1 BLAS thread).",
            (
                IntParam("n", 1000, 1, 2000, "matrix size (n x n)"),
                IntParam("repeat", 15, 1, 50, "how many products"),
            ),
            releases_gil=True,
            needs=("numpy",),
        ),
        Workload(
            "train",
            ml.train,
            "scikit-learn random forest fit (1 job, fixed seed); tree building releases the GIL.",
            (
                ChoiceParam("dataset", "digits", tuple(ml.DATASETS), "bundled scikit-learn dataset"),
                IntParam("trees", 300, 1, 2000, "number of trees"),
            ),
            releases_gil=True,
            needs=("numpy", "scikit-learn"),
        ),
        Workload(
            "predict",
            ml.predict,
            "scikit-learn inference with a forest trained once per worker process.",
            (IntParam("rows", 80_000, 1, 2_000_000, "digit images to classify"),),
            releases_gil=True,
            needs=("numpy", "scikit-learn"),
        ),
        Workload(
            "sleep",
            io.sleep,
            "time.sleep: a stand-in for blocking I/O; the GIL is released while waiting.",
            (FloatParam("seconds", 1.0, 0.0, 30.0, "how long to wait"),),
            releases_gil=True,
            waits=True,
        ),
        Workload(
            "mix",
            mix.mix,
            "compute_ms of pure-Python work (GIL held, timed by the thread's CPU clock), then wait_ms of "
            "waiting on purpose (time.sleep; asyncio.sleep when awaited): the dial from CPU-bound to I/O-bound.",
            (
                FloatParam("compute_ms", 300.0, 0.0, 5000.0, "milliseconds of CPU time computing"),
                FloatParam("wait_ms", 700.0, 0.0, 5000.0, "milliseconds waiting, after the computing"),
            ),
            releases_gil=False,
            awaited=mix.amix,
        ),
        Workload(
            "page",
            page.page,
            "A database query (SQLite, or PostgreSQL with --database), then a tornado.template render of its "
            "rows: the query computes without the GIL (SQLite) or waits (PostgreSQL), and lets go of it for each "
            "row it fetches; the render holds it, about 12 us a row.",
            (
                IntParam("rows", 1000, 1, page.SEED_ROWS, "rows the query returns and the template renders"),
                FloatParam("db_ms", 50.0, 0.0, 5000.0, "milliseconds the database spends on the query"),
            ),
            releases_gil=True,
            awaited=page.apage,
        ),
    )
}

DEFAULT_WORKLOAD = "count"


def described() -> list[dict[str, Any]]:
    """Every workload as /workloads lists it (the peers' WSGI app lists them alike)."""
    # Whether threads share a GIL at all: on a free-threaded interpreter
    # (gil_enabled false) every workload runs in parallel in threads.
    enabled = gil_enabled()
    return [{**w.describe(), "gil_enabled": enabled} for w in WORKLOADS.values()]


def run_timed(name: str, params: dict[str, Any], clocks: Clocks = THREAD) -> RunRecord:
    """Run workload `name`, timing it where it runs: in the worker, not the caller (workloads/timing.py)."""
    return time_call(WORKLOADS[name].func, params, clocks=clocks)


async def await_timed(name: str, params: dict[str, Any]) -> RunRecord:
    """Await workload `name`'s awaitable form on this event loop, timing its own steps and waits."""
    awaited = WORKLOADS[name].awaited
    if awaited is None:
        raise ValueError(f"{name} cannot be awaited")
    return await time_await(awaited, params)


def warm_up() -> int:
    """Pay a worker's one-off costs (scikit-learn and the predict model, unless ml.lazy()) before it is timed,
    and open the calling thread's schedstat file, which workloads/clocks.py keeps open for every run's split.
    Where that thread runs the jobs (the event loop's for /blocking, a process-pool worker's), its descriptors
    are the same from its first job on; a Dask worker warms up in a thread of its own, and its task thread
    opens its file at its first task."""
    if not ml.lazy():
        ml.predictor()
    thread_core_wait()
    return os.getpid()

"""A run, resolved once: which workload, with which params, in which mode; and the envelope its record becomes.

Tornado-free, so that the lab's handlers (handlers/run.py, handlers/race.py)
and the peers' WSGI app (peers/app.py, which uWSGI and gunicorn load in every
worker) resolve a request alike and answer with the same envelope. A run
that cannot be served is `Refused`, with the status its client gets.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.modes.contract import Mode
from workloads.params import Param, ParamError, parse_params
from workloads.registry import DEFAULT_WORKLOAD, WORKLOADS
from workloads.timing import RunRecord

Query = Mapping[str, Sequence[str]]


@dataclass
class Refused(Exception):
    """A run this server will not make: the HTTP status its client gets, and why."""

    status: int
    message: str


@dataclass(frozen=True)
class Own:
    """What a mode runs instead of one of the lab's workloads (async: the upstream), and its params."""

    workload: str
    params: tuple[Param, ...]
    owner: str  # who the params belong to, in their error messages
    awaits: tuple[str, ...] = ()  # the lab's workloads it also awaits, at /{mode}/{workload}


@dataclass(frozen=True)
class Run:
    """One run: the mode it runs in, the workload (or what the mode runs itself) and its parsed params."""

    mode: str
    workload: str
    params: dict[str, Any]


def own(mode: Mode) -> Own | None:
    """What `mode` runs itself, or None if it runs the lab's workloads."""
    return Own(mode.workload, mode.params, mode.name, mode.awaits) if mode.workload is not None else None


def resolve(mode: str, name: str | None, query: Query, *, runs: Own | None = None) -> Run:
    """The run a request asks for: workload `name` (None: `runs`, or the default workload), with the query's params.

    Refused 404 for a workload that does not exist or that a mode running its
    own (`runs`) cannot await, 400 for params out of their limits
    (workloads/params.py).
    """
    try:
        if runs is not None and name is None:
            return Run(mode, runs.workload, parse_params(runs.owner, runs.params, query))
        workload = WORKLOADS.get(name or DEFAULT_WORKLOAD)
        shown = name if len(name or "") <= 60 else f"{(name or '')[:60]}…"
        if runs is not None and (workload is None or workload.awaited is None or workload.name not in runs.awaits):
            raise Refused(404, _not_awaited(mode, runs, shown))
        if workload is None:
            raise Refused(404, f"unknown workload {shown!r}; workloads: {', '.join(WORKLOADS)}")
        return Run(mode, workload.name, workload.parse(query))
    except ParamError as error:
        raise Refused(400, error.message) from None


def _not_awaited(mode: str, runs: Own, shown: str | None) -> str:
    """Why /{mode}/{shown} is not served by a mode that runs its own workload at /{mode}."""
    if not runs.awaits:
        return f"/{mode} runs its own {runs.workload} call at /{mode}, no workload"
    return f"/{mode} awaits only workloads written to be awaited ({', '.join(runs.awaits)}), not {shown!r}"


def check(mode: Mode, run: Run) -> None:
    """Refused 501 where this Python cannot run the mode at all, 422 where the mode cannot run the workload."""
    problem = mode.unavailable()
    if problem is not None:
        raise Refused(501, f"/{mode.name} cannot run on this server: {problem}")
    entry = WORKLOADS.get(run.workload)
    refusal = mode.refusal(run.workload, entry.needs) if entry is not None else None
    if refusal is not None:
        raise Refused(422, refusal)


class KnownRuns:
    """The runs a server has resolved and checked, by mode, workload and raw query string: a burst asks for the
    same run again and again, and resolving it (parsing every param against its limits) is a good part of
    the lab's own cost of a request (docs/results.md#overhead). Only runs that pass are kept, and a bounded
    number of them: a crowd of different queries empties the store, it does not grow it. A kept run's params
    are shared by the requests that asked for it, and read, never changed (the envelope, the runners).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._runs: dict[tuple[str, str | None, str], Run] = {}

    def get(self, mode: Mode, name: str | None, raw_query: str, query: Query) -> Run:
        """The run of /{mode}/{name}?{raw_query} (`query` is raw_query decoded), resolved and checked; or Refused."""
        key = (mode.name, name, raw_query)
        run = self._runs.get(key)
        if run is None:
            run = resolve(mode.name, name, query, runs=own(mode))
            check(mode, run)
            if len(self._runs) >= self.size:
                self._runs.clear()
            self._runs[key] = run
        return run


def _ms(seconds: float) -> float:
    """Milliseconds to the microsecond: round(seconds * 1000, 3), without round()'s decimal digits, which
    cost three times as much, eight times an envelope."""
    return round(seconds * 1e6) / 1000


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else _ms(seconds)


def envelope(run: Run, record: RunRecord, *, received: float, pid: int, task_id: int | None) -> dict[str, Any]:
    """The answer to `run`: `server` (pid, task_id) handled the HTTP request; `record` says where the work ran.

    `started`/`finished` come from the worker itself, so `queued_ms` is the
    real wait for a pool (or for the event loop) and `run_ms` the real run.
    `cpu_ms` is the CPU time the run used where it ran (None where nothing
    ran: /async only waits); the rest of run_ms it was started but not
    running: `core_wait_ms` waiting for a core (the kernel's run queue),
    `io_wait_ms` waiting on purpose (a sleep, a query: workloads/waits.py)
    and `blocked_ms` the rest, of which `gil_wait_ms` is the part that was the
    GIL: all of it on a thread that shares its GIL, 0 on one alone with its
    own (workloads/clocks.py; None where it cannot be told). A cluster worker
    (distributed mode) also has an address, a sub-interpreter (interpreters
    mode) its interpreter id.
    """
    responded = time.time()
    worker: dict[str, Any] = {"pid": record["pid"], "thread": record["thread"]}
    if "address" in record:
        worker["address"] = record["address"]
    if "interpreter" in record:
        worker["interpreter"] = record["interpreter"]
    started, finished = record["started"], record["finished"]
    return {
        "mode": run.mode,
        "workload": run.workload,
        "params": run.params,
        "result": record["result"],
        "server": {"pid": pid, "task_id": task_id},
        "worker": worker,
        "timing": {
            "received": received,
            "started": started,
            "finished": finished,
            "queued_ms": _ms(started - received),
            "run_ms": _ms(finished - started),
            "cpu_ms": _ms_or_none(record["cpu"]),
            "core_wait_ms": _ms_or_none(record["core_wait"]),
            "io_wait_ms": _ms_or_none(record["io_wait"]),
            "blocked_ms": _ms_or_none(record["blocked"]),
            "gil_wait_ms": _ms_or_none(record["gil_wait"]),
            "total_ms": _ms(responded - received),
        },
    }

"""The mode registry: every way the lab runs a request, each in one place.

A mode is a name, the runner that does its work in each server process, how
many runs it can make progress on at once (its lanes, from which the ideal
makespan follows) and one sentence saying why it behaves as it does. The
routes, the runners each server builds, their flags (each runner class
declares its own `settings`), --help, the race's choices, the 404 hint,
`/modes` (which the page and bench/siege.sh read), the bench's choices and
the ideal all derive from MODES: adding a mode is an entry here plus its
runner.

Nothing here imports numpy, Tornado or a runner: the bench reads this
registry too. Runners are named by import path and loaded on demand
(`runner_class`), as Tornado's `import_object` names things.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from workloads.params import FloatParam, IntParam, Param, parse_params

if TYPE_CHECKING:
    from lab.config import Config
    from lab.runners import Runner
    from lab.settings import Setting

# Addresses of this machine, as a cluster's workers report their host.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

# A server's facts as /stats reports them under "server", plus what /workloads
# says of each workload: {"releases_gil": {name: bool}, "waits": {name: bool}}.
Facts = Mapping[str, Any]


def make_facts(server: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The Facts shape: a server's facts and the traits of its workloads, each described as /workloads lists it."""
    listed = list(workloads)
    return {
        **server,
        "releases_gil": {w["name"]: bool(w["releases_gil"]) for w in listed},
        "waits": {w["name"]: bool(w.get("waits", False)) for w in listed},
    }


@dataclass(frozen=True)
class Capacity:
    """How many runs of one workload a server can make progress on at once, and why, in words."""

    lanes: int | None  # None: nothing computes, every request just waits, all together
    because: str


@dataclass(frozen=True)
class Mode:
    name: str
    # One sentence: what the mode does with a request and what follows (the page's mode note).
    why: str
    # Where the work runs, which is what the page's explanations depend on:
    # "event loop", "threads", "processes" (each with its own GIL),
    # "interpreters" (sub-interpreters in the server process, each with its
    # own GIL), "cluster" (worker processes a scheduler hands tasks to) or
    # "upstream".
    runs_on: str
    capacity: Callable[[Facts, str], Capacity]
    # "module.Class" of this mode's runner (RunnerFactory): built in every
    # server process; its class declares the mode's own flags.
    runner: str
    # Where a request's work goes, in a few words, for --help: "in a thread pool".
    summary: str
    # What the mode runs when it is not one of the lab's workloads (as its
    # envelopes name it), and that thing's own query params.
    workload: str | None = None
    params: tuple[Param, ...] = ()
    # Extension modules its workers cannot load, and why: a workload that
    # needs one is refused with that reason (a 422), never sent to fail there.
    cannot_load: tuple[str, ...] = ()
    cannot_load_because: str = ""

    @property
    def runs_workloads(self) -> bool:
        """Served at /{mode}[/{workload}] with the workload's params; otherwise at /{mode} with its own."""
        return self.workload is None

    def parse(self, query: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        """This mode's own params from a query (a mode that runs no workload takes them)."""
        return parse_params(self.name, self.params, query)

    def refusal(self, workload: str, needs: Sequence[str]) -> str | None:
        """Why this mode cannot run `workload` (which imports `needs`), or None."""
        missing = [module for module in needs if module in self.cannot_load]
        if not missing:
            return None
        return f"/{self.name} cannot run {workload}: it needs {' and '.join(missing)}, {self.cannot_load_because}"

    def unavailable(self) -> str | None:
        """Why this server's Python cannot run this mode at all (its runner's `unavailable`), or None."""
        check = getattr(runner_class(self), "unavailable", None)
        return check() if check is not None else None

    def describe(self) -> dict[str, Any]:
        problem = self.unavailable()
        return {
            "name": self.name,
            "available": problem is None,
            "unavailable_reason": problem,
            "why": self.why,
            "runs_on": self.runs_on,
            "runs_workloads": self.runs_workloads,
            "workload": self.workload,
            "params": [param.describe() for param in self.params],
            "flags": [setting.flag for setting in runner_class(self).settings],
        }


class RunnerFactory(Protocol):
    """A runner class: the flags it owns, and how it builds itself for one mode from the config."""

    @property
    def settings(self) -> tuple[Setting[Any], ...]: ...

    def from_config(self, mode: str, config: Config) -> Runner: ...


# ---------- the parallel capacity of each mode ----------


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}es" if word.endswith("s") else f"{count} {word}s"


def cores(facts: Facts) -> int:
    return int(facts["cpu_count"])


def processes(facts: Facts) -> int:
    return int(facts.get("processes", 1))


def gil_enabled(facts: Facts) -> bool:
    """False for a free-threaded interpreter running without its GIL."""
    return bool(facts.get("gil_enabled", True))


def releases_gil(facts: Facts, workload: str) -> bool:
    """Threads can run it in parallel: it lets go of the GIL, or there is none."""
    return not gil_enabled(facts) or bool(facts.get("releases_gil", {}).get(workload, False))


def waits(facts: Facts, workload: str) -> bool:
    """The workload waits instead of computing: it needs a free thread, not a core."""
    return bool(facts.get("waits", {}).get(workload, False))


def on_cores(total: int, facts: Facts, workload: str) -> int:
    """Runs that can progress at once on this machine: computing work is capped by its cores."""
    return total if waits(facts, workload) else min(total, cores(facts))


def _each_process(facts: Facts) -> str:
    count = processes(facts)
    return "" if count == 1 else f" in each of {count} server processes"


def _blocking(facts: Facts, workload: str) -> Capacity:
    return Capacity(
        on_cores(processes(facts), facts, workload), f"the event loop runs one request at a time{_each_process(facts)}"
    )


def _threading(facts: Facts, workload: str) -> Capacity:
    pool = int(facts["thread_pool"])
    if not releases_gil(facts, workload):
        return Capacity(
            on_cores(processes(facts), facts, workload),
            f"{workload} holds the GIL, so however many threads there are, it runs one request at a time"
            + _each_process(facts),
        )
    lanes = on_cores(processes(facts) * pool, facts, workload)
    limits = _plural(pool, "thread") + ("" if waits(facts, workload) else f", {_plural(cores(facts), 'core')}")
    reason = f"{workload} releases the GIL" if gil_enabled(facts) else "this interpreter runs with no GIL"
    return Capacity(lanes, f"{reason}, so {_plural(lanes, 'request')} can run at once ({limits})")


def _processing(facts: Facts, workload: str) -> Capacity:
    lanes = on_cores(processes(facts) * int(facts["process_pool"]), facts, workload)
    if waits(facts, workload):
        return Capacity(lanes, f"{_plural(lanes, 'worker process')} can wait at once")
    return Capacity(lanes, f"{_plural(lanes, 'worker process')} can compute at once on {_plural(cores(facts), 'core')}")


def _interpreting(facts: Facts, workload: str) -> Capacity:
    lanes = on_cores(processes(facts) * int(facts["interpreter_pool"]), facts, workload)
    if waits(facts, workload):
        return Capacity(lanes, f"{_plural(lanes, 'sub-interpreter')} can wait at once")
    return Capacity(
        lanes,
        f"{_plural(lanes, 'sub-interpreter')}, each with its own GIL, can compute at once "
        f"on {_plural(cores(facts), 'core')}",
    )


def _cluster(facts: Facts, workload: str) -> Capacity:
    dask = facts.get("dask") or {}
    workers = dask.get("workers") or []
    if not workers:  # not started yet (the embedded cluster starts on first use): as planned
        threads = local = int(dask.get("threads") or cores(facts))
    else:
        threads = sum(int(w.get("threads") or 0) for w in workers)
        local = sum(int(w.get("threads") or 0) for w in workers if w.get("host") in LOCAL_HOSTS)
    if dask.get("embedded", True):
        # Each forked server process has a cluster of its own, on this machine.
        threads, local = processes(facts) * threads, processes(facts) * local
    # Threads on this machine share its cores; others bring their own.
    lanes = threads if waits(facts, workload) else min(local, cores(facts)) + (threads - local)
    where = "" if local < threads else f" on {_plural(cores(facts), 'core')}"
    return Capacity(lanes, f"{_plural(lanes, 'Dask worker thread')} can run a task at once{where}")


def _awaiting(facts: Facts, workload: str) -> Capacity:
    return Capacity(None, "every call waits at the upstream at the same time, so about one wait")


ASYNC_PARAMS: tuple[Param, ...] = (
    FloatParam("delay", 1.0, 0.0, 30.0, "seconds the upstream waits before answering"),
    IntParam("fanout", 1, 1, 50, "concurrent upstream calls awaited together"),
)
# What async runs, described as /workloads describes a workload: a call that only waits, without the GIL.
UPSTREAM_TRAITS = {"name": "upstream", "releases_gil": True, "waits": True}

MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        Mode(
            "blocking",
            "runs the work on the event loop itself: requests are served one after another, "
            "and not even /ping is answered meanwhile.",
            "event loop",
            _blocking,
            runner="lab.runners.BlockingRunner",
            summary="on the event loop",
        ),
        Mode(
            "threading",
            "hands it to a pool of threads. The loop stays free, but pure-Python code holds the GIL: "
            "only one thread computes at a time.",
            "threads",
            _threading,
            runner="lab.runners.ThreadRunner",
            summary="in a thread pool",
        ),
        Mode(
            "processing",
            "hands it to a pool of worker processes, each with its own interpreter and its own GIL, "
            "so CPU work runs on every core.",
            "processes",
            _processing,
            runner="lab.runners.ProcessRunner",
            summary="in a process pool",
        ),
        Mode(
            "interpreters",
            "hands it to a pool of sub-interpreters inside the server process, each with its own GIL "
            "(PEP 684, PEP 734): pure-Python code runs on every core in one process. Extension modules "
            "that do not support them yet, numpy among them, cannot be loaded there.",
            "interpreters",
            _interpreting,
            runner="lab.interpreters.InterpreterRunner",
            summary="in a pool of sub-interpreters",
            cannot_load=("numpy", "scikit-learn"),
            cannot_load_because="which cannot be imported in a sub-interpreter (numpy does not support "
            "per-interpreter GILs yet: numpy issue 24755); run it in /threading or /processing",
        ),
        Mode(
            "distributed",
            "sends it to a Dask cluster as a task: a scheduler hands it to a free worker process, on this machine "
            "or another, each worker with its own GIL. More machines, more cores; each task pays a hop.",
            "cluster",
            _cluster,
            runner="lab.dask_runner.DaskRunner",
            summary="on a Dask cluster",
        ),
        Mode(
            "async",
            "awaits a slow upstream: one thread waits for many calls at once. Great for waiting, "
            "no help for computing.",
            "upstream",
            _awaiting,
            runner="lab.async_runner.AsyncRunner",
            summary="as async I/O",
            workload="upstream",
            params=ASYNC_PARAMS,
        ),
    )
}


def runner_class(mode: Mode) -> RunnerFactory:
    """The class `mode.runner` names, imported on first use."""
    module, _, name = mode.runner.rpartition(".")
    return cast(RunnerFactory, getattr(importlib.import_module(module), name))


def mode_settings() -> list[Setting[Any]]:
    """Every flag the modes' runners declare, in registry order (lab/config.py puts them in --help and Config)."""
    return [setting for mode in MODES.values() for setting in runner_class(mode).settings]


def build_runners(config: Config) -> dict[str, Runner]:
    """A fresh runner for every mode (per server process, after any fork), each told its mode's name."""
    return {name: runner_class(mode).from_config(name, config) for name, mode in MODES.items()}


def preflight(config: Config) -> str | None:
    """Why this server cannot start, in one line, or None: asked of every runner that has a `preflight`.

    Runs in the parent before any fork, so that a forked server exits once
    instead of restarting children that fail one after another.
    """
    for mode in MODES.values():
        check = getattr(runner_class(mode), "preflight", None)
        problem: str | None = check(config) if check is not None else None
        if problem:
            return problem
    return None

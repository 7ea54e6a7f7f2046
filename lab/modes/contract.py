"""What a mode is: its entry (`Mode`), its capacity, and the runner each server process builds for it.

A mode is a name, the runner that does its work in each server process, how
many runs it can make progress on at once (its lanes, from which the ideal
makespan follows) and one sentence saying why it behaves as it does. Each
mode declares its own entry in its folder (lab/modes/<mode>/__init__.py) and
lab/modes/registry.py lists them. The entry's `runner` imports the runner
class when it is asked for (a server building its runners, --help, /modes):
nothing here imports numpy, Tornado or a runner, so the bench reads it too.

A runner reads the server's configuration through `ServerConfig`, the part
of lab/config.py's Config it needs, so that no mode imports the config (the
config lists the modes' flags: it sits above them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from workloads.params import Param, parse_params

if TYPE_CHECKING:
    from lab.settings import Setting
    from workloads.timing import RunRecord

T = TypeVar("T")

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
    # The class of this mode's runner, imported when called: built in every
    # server process; it declares the mode's own flags.
    runner: Callable[[], RunnerFactory]
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
    # The lab's workloads a mode that runs its own also awaits, at /{mode}/{workload}, on its event loop:
    # those written to be awaited (workloads/registry.py's `awaited`; tests/test_async_workloads.py checks).
    awaits: tuple[str, ...] = ()

    @property
    def runs_workloads(self) -> bool:
        """Served at /{mode}[/{workload}] with the workload's params; otherwise at /{mode} with its own."""
        return self.workload is None

    def runs(self, workload: str | None) -> bool:
        """Whether /{mode}/{workload} runs that workload: any, where the mode runs workloads; those it awaits."""
        return workload is not None and (self.runs_workloads or workload in self.awaits)

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
        check = getattr(self.runner(), "unavailable", None)
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
            "awaits": list(self.awaits),
            "workload": self.workload,
            "params": [param.describe() for param in self.params],
            "flags": [setting.flag for setting in self.runner().settings],
        }


class ServerConfig(Protocol):
    """What a runner reads of the server's configuration (lab/config.py's Config is one)."""

    @property
    def max_pending(self) -> int: ...
    @property
    def job_timeout(self) -> float: ...
    @property
    def process_count(self) -> int: ...
    @property
    def upstream(self) -> str | None: ...
    @property
    def database(self) -> str | None: ...

    def __getitem__(self, setting: Setting[T]) -> T:
        """The value of a flag a runner declares (config[THREAD_POOL])."""
        ...


class Runner(Protocol):
    """How one mode runs a workload in a server process (built by lab.modes.registry.build_runners)."""

    mode: str  # its name in the registry, given by build_runners
    inline: bool  # runs on the event loop's own thread, start to end
    idle: asyncio.Event  # set while no job runs or waits

    async def start(self) -> None: ...

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord: ...

    def snapshot(self) -> dict[str, Any]:
        """Its part of /stats "pools" (uwsgitop's view); empty: nothing to show, left out."""
        ...

    def facts(self) -> dict[str, Any]:
        """What this mode adds to the server's facts (/stats "server", and the ideal's input)."""
        ...

    def ready_note(self) -> str | None:
        """A few words for the start-up log line ("thread pool 6"), or None."""
        ...

    async def close(self, wait: bool = True) -> None: ...


class RunnerFactory(Protocol):
    """A runner class: the flags it owns, and how it builds itself for one mode from the config."""

    @property
    def settings(self) -> tuple[Setting[Any], ...]: ...

    def from_config(self, mode: str, config: ServerConfig) -> Runner: ...


# ---------- what a mode's capacity is made of ----------


def plural(count: int, word: str) -> str:
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


def each_process(facts: Facts) -> str:
    count = processes(facts)
    return "" if count == 1 else f" in each of {count} server processes"

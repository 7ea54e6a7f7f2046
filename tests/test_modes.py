"""The mode registry is the one home of a mode: a new one needs an entry and its runner, nothing else."""

from __future__ import annotations

import ast
import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from bench import race as race_cli
from bench import siege_steps
from bench.ideal import ideal_makespan, ideal_words, lanes
from lab import ROOT
from lab.config import Config
from lab.modes import MODES, Capacity, Facts, Mode, build_runners
from tests.inproc import InProcessLab, serve_in_process
from tests.lab_server import get
from workloads.registry import RunRecord, run_timed


class ToyRunner:
    """A mode invented for this test: runs the workload in a fresh thread per request, no pool at all."""

    mode = "toy"
    inline = False

    def __init__(self) -> None:
        self.idle = asyncio.Event()
        self.idle.set()

    @classmethod
    def from_config(cls, config: Config) -> Self:
        return cls()

    async def start(self) -> None:
        pass

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        return await asyncio.to_thread(run_timed, workload, params)

    def snapshot(self) -> dict[str, Any]:
        return {"kind": "a thread per request"}

    def facts(self) -> dict[str, Any]:
        return {"toy": {"threads_started": "one per request"}}

    async def close(self, wait: bool = True) -> None:
        pass


def _toy_capacity(facts: Facts, workload: str) -> Capacity:
    return Capacity(3, "three toys at once")


TOY = Mode(
    "toy",
    "starts a new thread for every request.",
    "threads",
    _toy_capacity,
    runner="tests.test_modes.ToyRunner",
)


@pytest.fixture
def toy_lab(monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessLab]:
    # The registry entry is the whole change: no route, handler, list or formula is touched.
    monkeypatch.setitem(MODES, "toy", TOY)
    yield from serve_in_process()


def test_a_new_mode_is_served_listed_and_raced_from_its_registry_entry(toy_lab: InProcessLab) -> None:
    reply = get(f"{toy_lab.url}/toy/fib?n=10")
    assert reply.status == 200, reply.body
    body = reply.json()
    assert (body["mode"], body["workload"], body["result"]) == ("toy", "fib", 55)
    assert body["worker"]["pid"] == os.getpid() and body["worker"]["thread"] != threading.current_thread().name
    assert get(f"{toy_lab.url}/toy?n=5").json()["workload"] == "count"  # the default workload, as every mode
    assert get(f"{toy_lab.url}/toy/nope").status == 404

    assert [m["name"] for m in get(f"{toy_lab.url}/modes").json()][-1] == "toy"
    assert "toy" in get(f"{toy_lab.url}/race/options").json()["modes"]
    assert "/toy" in get(f"{toy_lab.url}/nope").json()["error"]["message"]
    stats = get(f"{toy_lab.url}/stats").json()
    assert stats["processes"][0]["pools"]["toy"] == {"kind": "a thread per request"}
    assert stats["server"]["toy"] == {"threads_started": "one per request"}
    assert stats["totals"]["requests"]["toy"] | {"mean_ms": 0, "max_ms": 0} == {
        "count": 3,
        "errors": 1,
        "mean_ms": 0,
        "max_ms": 0,
    }


def test_the_bench_and_its_ideal_take_a_new_mode_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODES, "toy", TOY)
    facts = {"cpu_count": 2, "processes": 1, "thread_pool": 6, "process_pool": 2}
    assert lanes("toy", "count", facts) == 3
    assert ideal_makespan("toy", "count", facts, 1.0, 10) == 4.0  # ceil(10/3) rounds
    assert ideal_words("toy", "count", facts, 1.0, 10) == "three toys at once: 4 rounds of 1.00 s."
    assert race_cli.build_parser().parse_args(["--mode", "toy"]).mode == "toy"
    step = ["prepare", "--base", "http://h:1", "--name", "toy", "--mode", "toy", "--dir", "."]
    assert siege_steps.build_parser().parse_args(step).mode == "toy"


def test_every_mode_with_a_runner_is_built_and_described() -> None:
    runners = build_runners(Config(thread_pool=2, process_pool=1))
    assert set(runners) == {name for name, mode in MODES.items() if mode.runner}
    assert all(runner.mode == name for name, runner in runners.items())
    for mode in MODES.values():
        described = mode.describe()
        assert described["name"] == mode.name and described["why"].endswith(".")
        assert mode.runs_workloads == (mode.runner is not None)


def test_modes_route_lists_the_registry(app: InProcessLab) -> None:
    listed = get(f"{app.url}/modes").json()
    assert [m["name"] for m in listed] == list(MODES)
    by_name = {m["name"]: m for m in listed}
    assert by_name["async"]["runs_workloads"] is False and by_name["async"]["workload"] == "upstream"
    assert {p["name"] for p in by_name["async"]["params"]} == {"delay", "fanout"}
    assert by_name["processing"]["runs_on"] == "processes"


# ---------- the house's layers: handlers -> lab -> workloads, and bench beside them ----------


def _imports(package: str) -> dict[str, set[str]]:
    """Every module of `package` and the top-level names of what it imports (TYPE_CHECKING ones included)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(Path(package) / path.name)] = names
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("lab", ("handlers", "bench")),  # the machinery serves requests' code, never the other way round
        ("workloads", ("handlers", "lab", "bench", "tornado")),  # pure functions
        ("handlers", ("bench",)),  # the page's race runs bench.race as a separate program
    ],
)
def test_imports_only_run_downwards(package: str, forbidden: tuple[str, ...]) -> None:
    for module, names in _imports(package).items():
        wrong = {name for name in names if name.split(".")[0] in forbidden}
        assert not wrong, f"{module} imports {sorted(wrong)}"


def test_only_the_race_command_line_imports_itself() -> None:
    # The other bench tools (and anything else) use the engine, not the CLI module.
    for package in ("bench", "lab", "handlers"):
        for module, names in _imports(package).items():
            assert "bench.race" not in names, module


def test_server_py_is_a_thin_shim() -> None:
    source = (ROOT / "server.py").read_text()
    assert source.count("noqa") <= 2 and len(source.splitlines()) < 30


def _worker(host: str, threads: int = 1) -> dict[str, object]:
    return {"address": f"tcp://{host}:1", "host": host, "threads": threads}


@pytest.mark.parametrize(
    ("dask", "processes", "lanes_expected"),
    [
        ({"embedded": True, "workers": [_worker("127.0.0.1"), _worker("127.0.0.1")]}, 1, 2),
        ({"embedded": True, "threads": 2, "workers": []}, 1, 2),  # not started yet: as planned
        ({"embedded": True, "workers": [_worker("127.0.0.1")]}, 2, 2),  # forked: a cluster per child
        ({"embedded": False, "workers": [_worker("127.0.0.1", 3)]}, 2, 2),  # one shared cluster, on 2 cores
        ({"embedded": False, "workers": [_worker("127.0.0.1", 2), _worker("10.0.0.7", 4)]}, 1, 6),  # + a machine
    ],
)
def test_the_distributed_ideal_counts_the_clusters_worker_threads(
    dask: dict[str, object], processes: int, lanes_expected: int
) -> None:
    facts = {"cpu_count": 2, "processes": processes, "thread_pool": 6, "process_pool": 2, "dask": dask}
    assert lanes("distributed", "count", facts) == lanes_expected
    assert ideal_makespan("distributed", "count", facts, 1.0, 10) == -(-10 // lanes_expected)

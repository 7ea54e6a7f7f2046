"""A mode is one folder, one registry entry and one test: nothing else in the house changes for it.

The toy mode is that whole change: its folder, tests/toymode/ (a Mode entry in
its __init__.py and a runner class that declares its own pool-size flag in
runner.py, as lab/modes/<name>/ has), its entry in MODES (made here with
monkeypatch, as registry.py's one line would), and this test, which finds the
mode in --help, /modes, /stats facts, the route, the race's choices and the
ideal without any other file edited; tests/test_layers.py holds the toy's
folder to the rules every mode's folder keeps.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from bench import race as race_cli
from bench import siege_steps
from lab.config import Config, build_parser, parse_args
from lab.modes.registry import MODES, build_runners
from lab.race.ideal import ideal_makespan, ideal_words, lanes
from tests import toymode
from tests.inproc import InProcessLab, serve_in_process
from tests.lab_server import get
from tests.toymode.runner import TOY_POOL

TOY = toymode.MODE


@pytest.fixture
def toy_lab(monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessLab]:
    # The registry entry is the whole change: no route, handler, flag list or formula is touched.
    monkeypatch.setitem(MODES, "toy", TOY)
    yield from serve_in_process(Config(thread_pool=2, process_pool=1, toy_pool=4, access_log=False))


def test_a_new_modes_flag_is_in_help_and_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODES, "toy", TOY)
    help_text = build_parser().format_help()
    assert "--toy-pool N" in help_text and "toys that run at once, per server process (default: 3)" in help_text
    assert "in a toy box (/toy)" in help_text  # the description names every mode
    assert parse_args(["--toy-pool", "5"])[TOY_POOL] == 5 and Config()[TOY_POOL] == 3
    with pytest.raises(SystemExit):
        parse_args(["--toy-pool", "0"])  # its own parser, its own limits


def test_a_new_mode_is_served_listed_and_raced_from_its_registry_entry(toy_lab: InProcessLab) -> None:
    reply = get(f"{toy_lab.url}/toy/fib?n=10")
    assert reply.status == 200, reply.body
    body = reply.json()
    assert (body["mode"], body["workload"], body["result"]) == ("toy", "fib", 55)
    assert body["worker"]["pid"] == os.getpid() and body["worker"]["thread"] != threading.current_thread().name
    assert get(f"{toy_lab.url}/toy?n=5").json()["workload"] == "count"  # the default workload, as every mode
    assert get(f"{toy_lab.url}/toy/nope").status == 404

    listed = get(f"{toy_lab.url}/modes").json()[-1]
    assert (listed["name"], listed["flags"]) == ("toy", ["--toy-pool"])
    assert "toy" in get(f"{toy_lab.url}/race/options").json()["modes"]
    assert "/toy" in get(f"{toy_lab.url}/nope").json()["error"]["message"]
    stats = get(f"{toy_lab.url}/stats").json()
    pool = stats["processes"][0]["pools"]["toy"]
    assert (pool["kind"], pool["size"]) == ("a thread per job", 4)
    assert stats["server"]["toy_pool"] == 4  # its facts, which its capacity reads
    toy = stats["totals"]["requests"]["toy"]
    # Two runs answered (their CPU time summed), one 404.
    assert (toy["count"], toy["errors"], toy["timed"]) == (3, 1, 2)
    assert toy["run_cpu_s"] > 0


def test_the_bench_and_its_ideal_take_a_new_mode_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODES, "toy", TOY)
    facts = {"cpu_count": 2, "processes": 1, "thread_pool": 6, "process_pool": 2, "toy_pool": 3}
    assert lanes("toy", "count", facts) == 3
    assert ideal_makespan("toy", "count", facts, 1.0, 10) == 4.0  # ceil(10/3) rounds
    assert ideal_words("toy", "count", facts, 1.0, 10) == "as many toys as the pool has: 4 rounds of 1.00 s."
    assert race_cli.build_parser().parse_args(["--mode", "toy"]).mode == ["toy"]
    step = ["prepare", "--base", "http://h:1", "--name", "toy", "--mode", "toy", "--dir", "."]
    assert siege_steps.build_parser().parse_args(step).mode == "toy"


def test_every_mode_has_a_runner_told_its_name() -> None:
    runners = build_runners(Config(thread_pool=2, process_pool=1))
    assert set(runners) == set(MODES)
    assert all(runner.mode == name for name, runner in runners.items())
    for mode in MODES.values():
        described = mode.describe()
        assert described["name"] == mode.name and described["why"].endswith(".")
    assert MODES["threading"].describe()["flags"] == ["--thread-pool"]


def test_modes_route_lists_the_registry(app: InProcessLab) -> None:
    listed = get(f"{app.url}/modes").json()
    assert [m["name"] for m in listed] == list(MODES)
    by_name = {m["name"]: m for m in listed}
    assert by_name["async"]["runs_workloads"] is False and by_name["async"]["workload"] == "upstream"
    assert {p["name"] for p in by_name["async"]["params"]} == {"delay", "fanout"}
    assert by_name["processing"]["runs_on"] == "processes"


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

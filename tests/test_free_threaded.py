"""The lab on a free-threaded interpreter (make test-ft): the GIL's state and who turned it on, the optional
dependencies it runs without, honest instruments, and shared state that adds up with threads truly in parallel.

The tests marked `free_threaded` need a free-threaded build (make python-ft); the rest run on any Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier

import pytest

from lab import ROOT
from lab.instruments import freethreading, gil
from lab.web import json_handler
from tests.builds import free_threaded
from tests.conftest import StartServer
from tests.envelopes import assert_envelope
from tests.lab_server import LabServer, Reply, get
from workloads.clocks import gil_enabled

# CPython 3.13t's warning when an import turns its GIL back on (Python/import.c).
WARNING = (
    "The global interpreter lock (GIL) has been enabled to load module 'legacy_ext', which has not declared "
    "that it can run safely without the GIL. To override this behavior and keep the GIL disabled (at your own "
    "risk), run with PYTHON_GIL=0 or -Xgil=0."
)

# A C extension that declares nothing about the GIL (no Py_mod_gil slot): importing it turns a free-threaded
# build's GIL back on.
LEGACY_EXTENSION = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "legacy_ext", NULL, 0, NULL};
PyMODINIT_FUNC PyInit_legacy_ext(void) { return PyModuleDef_Init(&def); }
"""


def test_the_warning_s_module_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(freethreading, "_enabled_by", [])
    monkeypatch.setattr(freethreading, "free_threaded_build", lambda: True)
    monkeypatch.setattr(freethreading, "gil_enabled", lambda: True)
    monkeypatch.delenv("PYTHON_GIL", raising=False)
    assert "went unseen" in str(freethreading.gil_enabled_by())
    freethreading._note("an unrelated warning")
    freethreading._note(WARNING)
    assert freethreading.gil_enabled_by() == "importing legacy_ext, a C extension not declared free-threading-safe"
    monkeypatch.setenv("PYTHON_GIL", "1")
    assert freethreading.gil_enabled_by() == "PYTHON_GIL=1"
    monkeypatch.setattr(freethreading, "gil_enabled", lambda: False)
    assert freethreading.gil_enabled_by() is None  # off: nothing turned it on


def test_missing_dependencies_are_named_with_what_the_lab_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "orjson" else real(name))
    missing = freethreading.missing()
    assert "orjson" in missing and "standard library" in missing["orjson"]
    assert set(missing) <= set(freethreading.OPTIONAL)


def test_json_answers_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_handler, "_fast_dumps", None)
    assert json.loads(json_handler.to_json({"a": [1, 2.5, None], "big": 2**70})) == {"a": [1, 2.5, None], "big": 2**70}


def test_the_gil_meter_reads_nothing_without_gilknocker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gil, "gilknocker", None)
    meter = gil.GilMeter()
    meter.start()
    try:
        assert meter.read() is None
    finally:
        meter.stop()


def test_stats_say_what_the_interpreter_is(server: LabServer) -> None:
    stats = get(f"{server.url}/stats").json()
    interpreter = stats["server"]["interpreter"]
    assert interpreter["free_threaded_build"] == freethreading.free_threaded_build()
    assert interpreter["gil_enabled"] == stats["server"]["gil_enabled"] == gil_enabled()
    assert all(process["gil_enabled"] == gil_enabled() for process in stats["processes"])
    assert interpreter["missing"] == freethreading.missing()  # the server's venv is this test's


@free_threaded
def test_no_gil_stats_log_and_time_split(server: LabServer) -> None:
    stats = get(f"{server.url}/stats").json()
    assert stats["server"]["gil_enabled"] is False
    assert stats["server"]["interpreter"]["gil_enabled_by"] is None
    assert all(process["gil_contention"] is None for process in stats["processes"])  # the meter: n/a
    assert "free-threaded build: the GIL is off" in server.log()
    for name in freethreading.missing():
        assert f"{name} is not installed" in server.log()
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(get, [f"{server.url}/threading/count?n=300000&_={i}" for i in range(4)]))
    assert all(reply.status == 200 for reply in replies)
    for reply in replies:
        assert_envelope(reply.json(), "threading", "count")  # blocked_ms is what the other parts leave of run_ms
    timings = [reply.json()["timing"] for reply in replies]
    assert all(t["gil_wait_ms"] is None for t in timings)  # no GIL to wait for: null, not 0
    assert all(t["core_wait_ms"] is not None for t in timings)  # the cores' wait: still measured (schedstat)


@free_threaded
def test_python_gil_1_runs_with_the_gil_and_says_why(start_server: StartServer) -> None:
    lab = start_server(env={"PYTHON_GIL": "1"})
    stats = get(f"{lab.url}/stats").json()
    assert stats["server"]["gil_enabled"] is True
    assert stats["server"]["interpreter"] | {"missing": None} == {
        "free_threaded_build": True,
        "gil_enabled": True,
        "gil_enabled_by": "PYTHON_GIL=1",
        "python_gil": "1",
        "missing": None,
    }
    assert "the GIL is on: turned on by PYTHON_GIL=1" in lab.log()
    timing = get(f"{lab.url}/threading/count?n=1000").json()["timing"]
    assert timing["gil_wait_ms"] is not None or timing["core_wait_ms"] is None


@free_threaded
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc) to build a test extension")
def test_an_extension_that_turns_the_gil_on_is_named(tmp_path: Path) -> None:
    source = tmp_path / "legacy_ext.c"
    source.write_text(LEGACY_EXTENSION)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_path("include")
    subprocess.run(
        ["cc", "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(tmp_path / f"legacy_ext{suffix}")],
        check=True,
    )
    script = (
        "import json, logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout);"
        "from lab.instruments import freethreading as ft; ft.watch_gil(); before = sys._is_gil_enabled();"
        "import legacy_ext; ft.log_start(); print(json.dumps([before, ft.report()]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path)])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    *lines, last = done.stdout.strip().splitlines()
    before, report = json.loads(last)
    assert before is False and report["gil_enabled"] is True
    assert report["gil_enabled_by"] == "importing legacy_ext, a C extension not declared free-threading-safe"
    assert "has been enabled to load module 'legacy_ext'" in done.stderr  # CPython's own warning still shows
    assert any("the GIL is on: turned on by importing legacy_ext" in line for line in lines), lines


CLIENTS = 20
EACH = 10
# Every mode with shared counters in the server process: its loop, its thread pool, its process pool.
ROUTES = ("/threading/count?n=20000", "/processing/count?n=20000", "/async?delay=0", "/blocking/count?n=2000")


def _crowd(url: str) -> list[Reply]:
    """CLIENTS threads released together, each sending EACH requests one after another, the modes in turn."""
    start = Barrier(CLIENTS)

    def client(c: int) -> list[Reply]:
        start.wait()
        return [get(f"{url}{ROUTES[(c + i) % len(ROUTES)]}&_={c}-{i}") for i in range(EACH)]

    with ThreadPoolExecutor(CLIENTS) as pool:
        return [reply for replies in pool.map(client, range(CLIENTS)) for reply in replies]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_crowd_of_threads_is_counted_exactly(start_server: StartServer, processes: str) -> None:
    lab = start_server("--processes", processes, "--thread-pool", "8", "--process-pool", "2")
    replies = _crowd(lab.url)
    assert [reply.status for reply in replies] == [200] * CLIENTS * EACH
    stats = get(f"{lab.url}/stats").json()
    per_mode = CLIENTS * EACH // len(ROUTES)
    totals = stats["totals"]["requests"]
    assert {mode: (int(r["count"]), int(r["errors"])) for mode, r in totals.items()} == {
        "threading": (per_mode, 0),
        "processing": (per_mode, 0),
        "async": (per_mode, 0),
        "blocking": (per_mode, 0),
    }
    assert sum(int(r["count"]) for r in totals.values()) == CLIENTS * EACH
    answering = stats["server"]["answered_by"]["pid"]
    # Nothing in flight but the /stats request itself.
    assert {p["pid"]: p["active_requests"] for p in stats["processes"]} == {
        p["pid"]: int(p["pid"] == answering) for p in stats["processes"]
    }
    for kind in ("threading", "processing"):
        pools = [process["pools"][kind] for process in stats["processes"]]
        assert sum(pool["submitted"] for pool in pools) == per_mode, pools
        assert all(pool["running"] == 0 and pool["waiting"] == 0 for pool in pools), pools
    pids = {reply.json()["server"]["pid"] for reply in replies}
    assert len(pids) == len(stats["processes"]) or processes == "1"

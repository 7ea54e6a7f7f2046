"""bench/siege.sh end to end: real servers, real siege, tiny workloads; nothing left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bench.lib.shapes import sentence
from bench.lib.siege import request_lines
from bench.lib.tables import ROW_KEYS
from lab import ROOT
from lab.machine import cpu_count
from lab.modes.registry import MODES as REGISTRY
from lab.race.stats import median
from tests.bench_helpers import Tracked
from tests.conftest import StartServer
from tests.twins import twin

SIEGE_SH = str(ROOT / "bench" / "siege.sh")
# Sleeps keep every endpoint short and make the numbers checkable without timing anything.
TINY = ["--workload", "sleep", "-p", "seconds=0.05", "--delay", "0.05", "--warmup", "0"]
MODES = ["blocking", "threading", "processing", "distributed", "async"]


@pytest.fixture
def siege() -> str:
    """siege's path; a failure, not a skip, without it (make test and CI install it)."""
    path = shutil.which("siege")
    if path is None:
        pytest.fail("siege is not installed: sudo apt-get install siege (make test installs it)")
    return path


def read_results(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((out / "summary.json").read_text())
    for row in rows:
        assert set(ROW_KEYS) <= set(row)
        # siege's own line per request, read back in the order they came back.
        lines = request_lines((out / f"{row['endpoint']}.siege.out").read_text())
        assert [line.seconds for line in lines] == row["responses_s"]
        assert len(lines) == row["transactions"]
        assert (out / f"{row['endpoint']}.plan.json").exists()
    return rows


def assert_sane(row: dict[str, Any]) -> None:
    assert row["transactions"] == 10, row
    assert row["failed"] == 0, row
    assert sum(row["spread"].values()) == 10, row  # every request, counted by the process that answered it
    assert row["ideal_s"] > 0 and row["ratio"] > 0, row
    assert 0 < row["shortest_s"] <= row["mean_s"] <= row["longest_s"] <= row["elapsed_s"] + 0.01, row


def assert_machine(out: Path) -> dict[str, Any]:
    machine: dict[str, Any] = json.loads((out / "machine.json").read_text())
    assert machine["cores"] == cpu_count() and machine["cpu_model"] and machine["python"]
    assert {"tornado", "numpy", "scikit-learn", "siege"} <= set(machine["versions"])
    assert machine["versions"]["siege"]
    assert any(pool["user_api"] == "blas" and pool["num_threads"] == 1 for pool in machine["native_threads"])
    assert "json_output = false" in machine["siege_rc"] and "verbose = true" in machine["siege_rc"]
    return machine


def test_missing_siege_is_exit_2_with_the_install_command(tmp_path: Path) -> None:
    # A PATH with every usual tool except siege.
    shim = tmp_path / "bin"
    shim.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else []:
            if tool.name != "siege" and not (shim / tool.name).exists():
                (shim / tool.name).symlink_to(tool)
    done = subprocess.run(["bash", SIEGE_SH], env={"PATH": str(shim), "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: siege is not installed; install it with: sudo apt-get install siege"
    ]
    assert done.stdout == ""


def test_help_and_bad_options() -> None:
    shown = subprocess.run([SIEGE_SH, "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert shown.returncode == 0
    assert "--url BASE" in shown.stdout and "sudo apt-get install siege" in shown.stdout
    # Every mode of the registry, not a list kept by hand.
    assert "lab/modes/registry.py: " + ", ".join(f"/{mode}" for mode in REGISTRY) in shown.stdout
    for bad in (["--bogus"], ["-c", "ten"], ["--url", "localhost:8000"], ["-p", "novalue"]):
        done = subprocess.run([SIEGE_SH, *bad], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 2, bad
        assert done.stderr.startswith("error: "), bad


@pytest.mark.siege
@pytest.mark.timeout(300)
def test_rounds_bench_every_endpoint_in_turn(siege: str, start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    out = tmp_path / "results"
    done = subprocess.run([SIEGE_SH, "--url", lab.url, *TINY, "--solo-runs", "1", "--rounds", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=270, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = read_results(out)
    assert [r["endpoint"] for r in rows] == [f"{mode}-r{n}" for n in (1, 2) for mode in MODES]
    assert [(r["group"], r["round"]) for r in rows] == [(mode, n) for n in (1, 2) for mode in MODES]
    summary = json.loads((out / "rounds.json").read_text())
    assert [(s["group"], s["rounds"]) for s in summary] == [(mode, 2) for mode in MODES]
    lines = done.stdout.splitlines()
    over = lines.index("over 2 rounds, in turn:")
    assert [line.split()[0] for line in lines[over + 3 : over + 3 + len(MODES)]] == MODES


@pytest.mark.siege
@pytest.mark.timeout(300)  # whole bench runs: servers, warm-up, five endpoints
def test_against_a_running_server(siege: str, start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    out = tmp_path / "results"
    done = subprocess.run([SIEGE_SH, "--url", lab.url, *TINY, "--out", str(out)],
                          capture_output=True, text=True, timeout=270, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = read_results(out)
    assert [r["endpoint"] for r in rows] == MODES
    for row in rows:
        assert_sane(row)
    by_name = {r["endpoint"]: r for r in rows}
    # The ideal is lab/race/ideal.py over t: the median of solo runs before and after siege, in this run.
    blocking = by_name["blocking"]
    assert len(blocking["solo_before_s"]) == len(blocking["solo_after_s"]) == 3
    assert blocking["solo_s"] == pytest.approx(median(blocking["solo_before_s"] + blocking["solo_after_s"]), abs=1e-3)
    assert blocking["ideal_s"] == pytest.approx(10 * blocking["solo_s"], abs=1e-3)
    assert by_name["processing"]["lanes"] == min(2, cpu_count())
    assert by_name["async"]["params"] == {"delay": 0.05, "fanout": 1}
    # The table on stdout, one line per endpoint, and where the results went.
    lines = done.stdout.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("endpoint "))
    assert [line.split()[0] for line in lines[table + 2 : table + 2 + len(MODES)]] == MODES
    # Above the table, siege's own line for each request, grouped per endpoint as siege printed them.
    for row in rows:
        head = lines.index(f"{row['endpoint']}: siege -c 10 -r 1 {row['url']}")
        shown = lines[head + 1 : head + 11]
        assert shown == [f"  {line.text}" for line in request_lines((out / f"{row['endpoint']}.siege.out").read_text())]
        assert all(line.startswith("  HTTP/1.1 200 ") and " secs: " in line for line in shown)
        assert head < table
    # Under it, the one sentence, made from this run's response times.
    assert lines[-3] == sentence(rows) and lines[-3].startswith("What the rows show: blocking answered")
    assert sentence(rows) in (out / "summary.md").read_text()
    assert f"results: {out}" in done.stdout
    assert "| endpoint | elapsed s |" in (out / "summary.md").read_text()
    machine = assert_machine(out)
    assert list(machine["servers"]) == [lab.url]


@pytest.mark.siege
@pytest.mark.timeout(300)  # whole bench runs: servers, warm-up, five endpoints
def test_own_servers_are_started_measured_and_all_stopped(siege: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    with Tracked([SIEGE_SH, *TINY, "--server-args", "--process-pool 1", "--out", str(out)]) as run:
        stdout, stderr = run.communicate(timeout=270)
        assert run.process.returncode == 0, stderr
        assert len(run.sessions) >= 3  # siege.sh's own, and one per server (setsid)
        assert run.survivors() == []
    rows = read_results(out)
    assert [r["endpoint"] for r in rows] == [*MODES, "forked-blocking", "forked-threading"]
    for row in rows:
        assert_sane(row)
    forked = rows[-1]
    assert forked["processes"] == cpu_count() and forked["url"] != rows[0]["url"]
    assert list(rows[0]["spread"].values()) == [10]  # the single-process server answered them all
    machine = assert_machine(out)
    assert any("--processes 0" in server["flags"] for server in machine["servers"].values())
    assert (out / "server-single.log").exists() and (out / "server-forked.log").exists()
    assert "forked-threading" in stdout


@pytest.mark.siege
@pytest.mark.timeout(300)  # whole bench runs: servers, warm-up, five endpoints
def test_ctrl_c_mid_siege_stops_everything_it_started(siege: str, tmp_path: Path) -> None:
    # /blocking of ten 3 s sleeps would take 30 s: interrupt while siege runs. It did not wait for the
    # measurement to end: it exited while a twin of the measurement, begun as siege was seen, still slept.
    argv = [SIEGE_SH, "--workload", "sleep", "-p", "seconds=3", "--solo-runs", "1", "--warmup", "0",
            "--server-args", "--process-pool 1", "--out", str(tmp_path / "results")]  # fmt: skip
    with Tracked(argv) as run:
        wait_for_descendant(run, "siege", "-R")
        with twin(30) as twin_sleeps:  # (tests/twins.py)
            os.kill(run.process.pid, signal.SIGINT)
            run.communicate(timeout=60)
            assert twin_sleeps()
        assert run.process.returncode == 130
        assert run.survivors() == []
        assert len(run.sessions) >= 3  # it had started both servers


@pytest.mark.siege
@pytest.mark.timeout(300)  # whole bench runs: servers, warm-up, five endpoints
def test_sigterm_during_start_up_stops_the_servers_being_started(siege: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    with Tracked([SIEGE_SH, *TINY, "--out", str(out)]) as run:
        wait_for_descendant(run, "bench.siege_steps", "ready")
        # Both servers are up far enough to have started their upstream, not yet ready.
        logs = [out / "server-single.log", out / "server-forked.log"]
        deadline = time.monotonic() + 60
        while not all(log.exists() and "serving on" in log.read_text() for log in logs):
            assert time.monotonic() < deadline, "the servers did not start"
            time.sleep(0.05)
        run.note()
        os.kill(run.process.pid, signal.SIGTERM)
        run.communicate(timeout=60)
        assert run.process.returncode == 143
        assert run.survivors() == []
        assert len(run.sessions) >= 3


def wait_for_descendant(run: Tracked, *words: str, timeout: float = 90) -> None:
    """Until a descendant's command line has all `words` (noting every process meanwhile)."""
    deadline = time.monotonic() + timeout
    while not run.descendants(*words):
        assert run.process.poll() is None, run.communicate(timeout=5)
        assert time.monotonic() < deadline, f"no {' '.join(words)} process in {timeout} s"
        time.sleep(0.05)
    run.note()

"""Locust against the lab: bench/locustfile.py under Locust's own CLI, and bench.load's headless run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import ROOT
from tests.bench_helpers import is_png
from tests.conftest import StartServer

pytestmark = pytest.mark.timeout(180)
PATH = "/threading/count?n=100000"


def _aggregated(path: Path) -> dict[str, str]:
    return next(row for row in csv.DictReader(path.read_text().splitlines()) if row["Name"] == "Aggregated")


def test_the_locustfile_runs_under_locust_s_own_command_line(start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--no-access-log")
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "bench/locustfile.py", "--headless", "--host", lab.url, "-u", "2",
         "-r", "2", "--lab-path", f"{PATH},/ping", "--run-time", "60s", "--csv", str(tmp_path / "run"),
         "--only-summary"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "LOCUST_LAB_REQUESTS": "12"},  # the locustfile's options from the environment too
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    totals = _aggregated(tmp_path / "run_stats.csv")
    assert (totals["Request Count"], totals["Failure Count"]) == ("12", "0")  # it stops at LOCUST_LAB_REQUESTS
    routes = {row["Name"] for row in csv.DictReader((tmp_path / "run_stats.csv").read_text().splitlines())}
    assert routes == {"/threading/count", "/ping", "Aggregated"}  # a mix, one row per route
    assert (tmp_path / "run_failures.csv").exists() and (tmp_path / "run_stats_history.csv").exists()


def test_bench_load_writes_the_seed_s_table_the_host_s_and_the_chart(start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--no-access-log")
    out = tmp_path / "load"
    done = subprocess.run([sys.executable, "-m", "bench.load", "--url", lab.url, "--path", PATH, "--users", "3",
                           "--requests", "30", "--every", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads((out / "load.json").read_text())
    seed = doc["locust"]
    assert seed and seed[-1]["reqs"] == 30 and seed[-1]["fails"] == 0
    assert all(set(row) >= {"t_s", "reqs", "fails", "avg_ms", "min_ms", "max_ms", "median_ms", "req_s"} for row in seed)
    assert [row["reqs"] for row in seed] == sorted(row["reqs"] for row in seed)  # totals only grow
    for row in doc["host"]:
        assert 0 <= row["idle_pct"] <= 100 and row["run_queue"] >= 1 and row["pool_waiting"] is not None
    assert done.stdout.splitlines()[0].split() == ["t_s", "reqs", "fails", "avg_ms", "min_ms", "max_ms",
                                                   "median_ms", "req_s"]  # fmt: skip
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv"):
        assert (out / name).exists()
    assert is_png(out / "load.png")


def _failures(lab_url: str, out: Path) -> int:
    done = subprocess.run([sys.executable, "-m", "bench.load", "--url", lab_url, "--path",
                           "/threading/sleep?seconds=0.2", "--users", "8", "--rate", "4", "--requests", "40",
                           "--every", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seed = json.loads((out / "load.json").read_text())["locust"]
    assert seed[-1]["reqs"] == 40
    return int(seed[-1]["fails"])


def test_arrivals_beyond_a_small_max_pending_get_503s_instead_of_a_queue(
    start_server: StartServer, tmp_path: Path
) -> None:
    # Eight users at up to 4 requests/s each on one thread that takes 0.2 s a request: far more arrive than
    # it serves. Bounded at one waiting job, the rest are turned away at once; unbounded, they all queue.
    bounded = start_server("--no-access-log", "--thread-pool", "1", "--max-pending", "1")
    unbounded = start_server("--no-access-log", "--thread-pool", "1")
    assert _failures(bounded.url, tmp_path / "bounded") > 0
    assert _failures(unbounded.url, tmp_path / "unbounded") == 0
    failures = (tmp_path / "bounded" / "locust_failures.csv").read_text()
    assert "503" in failures

"""bench/scale.py end to end on a tiny grid: every series holds its waits as its model allows, nothing left running."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale import build_parser
from tests.bench_helpers import Tracked, is_png


@pytest.mark.timeout(300)  # a whole bench run, with servers of its own
def test_a_tiny_scale_run_measures_each_series_and_stops_every_server(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    argv = [sys.executable, "-m", "bench.scale", "--levels", "6", "--seconds", "0.2", "--thread-pool", "2",
            "--process-pool", "1", "--out", str(out)]  # fmt: skip
    with Tracked(argv) as run:
        stdout, stderr = run.communicate(timeout=240)
        assert run.process.returncode == 0, stderr
        assert run.survivors() == []
    points = json.loads((out / "scale.json").read_text())["points"]
    by = {(p["series"], p["concurrency"]): p for p in points}
    assert set(by) == {(s, n) for s in ("async", "threads", "processes", "per-thread") for n in (6,)}
    assert all(p["failed"] == 0 and p["ok"] == p["concurrency"] for p in points)
    # Structure, not stopwatch: no series beats its own ideal, and the pools take the rounds they must.
    assert all(p["elapsed_s"] >= p["ideal_s"] * 0.95 for p in points)
    assert by[("threads", 6)]["ideal_s"] == 0.6 and by[("processes", 6)]["ideal_s"] == 1.2  # 6/2 and 6/1 rounds
    assert by[("async", 6)]["ideal_s"] == by[("per-thread", 6)]["ideal_s"] == 0.2  # every wait at once
    assert by[("per-thread", 6)]["peak_threads"] > by[("threads", 6)]["peak_threads"]
    assert "6 waits of 0.2 s took:" in stdout
    assert (out / "scale.md").exists() and is_png(out / "scale.png")


def test_ten_thousand_waits_are_accepted_and_their_open_files_checked_first() -> None:
    assert build_parser().parse_args(["--levels", "10,10000"]).levels == [10, 10_000]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--levels", "10001"])
    # Where the machine allows fewer open files than 10,000 waits need, the run ends at once, saying how.
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 20_512:
        done = subprocess.run([sys.executable, "-m", "bench.scale", "--levels", "10000"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "10,000 concurrent waits need 20,512 open files" in done.stderr

"""bench.gil_off: its arguments, and the figures it takes from alternating rounds (the races: bench.race's engine)."""

from __future__ import annotations

import subprocess
import sys

from bench import gil_off
from lab import ROOT


def _row(round_: int, side: str, workload: str, mode: str, elapsed: float, *, failed: int = 0) -> dict[str, object]:
    return {"round": round_, "side": side, "workload": workload, "mode": mode, "elapsed_s": elapsed, "failed": failed}


def test_threading_over_processing_per_lab_and_round() -> None:
    rows = [
        _row(1, "gil", "count", "threading", 4.0),
        _row(1, "gil", "count", "processing", 2.0),
        _row(1, "ft", "count", "threading", 2.2),
        _row(1, "ft", "count", "processing", 2.0),
        _row(2, "ft", "count", "threading", 3.0),
        _row(2, "ft", "count", "processing", 2.0),
        _row(2, "gil", "count", "threading", 5.0, failed=1),  # a round with a failed race has no ratio
        _row(2, "gil", "count", "processing", 2.5),
    ]
    found = gil_off.makespans(rows)
    assert found["gil count"] == {"rounds": [2.0], "median": 2.0}
    assert found["ft count"] == {"rounds": [1.1, 1.5], "median": 1.3}


def test_a_missing_python_or_a_bad_param_is_exit_2() -> None:
    run = [sys.executable, "-m", "bench.gil_off"]
    # --gil named too: the default (.venv-3.13's) exists only where make install PYTHON=... made it.
    for flag, other in (("--ft", "--gil"), ("--gil", "--ft")):
        argv = [*run, other, sys.executable, flag, "/nonexistent/python"]
        missing = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        assert missing.returncode == 2 and f"{flag} /nonexistent/python does not exist" in missing.stderr
        assert "Traceback" not in missing.stderr
    bad = subprocess.run([*run, "-p", "n=5"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "WORKLOAD:NAME=VALUE" in bad.stderr

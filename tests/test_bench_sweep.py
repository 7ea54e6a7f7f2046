"""bench/sweep.py: a tiny grid end to end (a server per point, all stopped), and its choice of the best point."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import pytest

from bench.sweep import _counts, best_point, runners_up
from lab.machine import cpu_count
from tests.bench_helpers import Tracked, is_png


def test_a_tiny_grid_writes_csv_json_heatmap_and_names_the_best_point(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [sys.executable, "-m", "bench.sweep", "--processes", "1,2", "--thread-pool", "1",
            "--workload", "sleep", "-p", "seconds=0.05", "-c", "4", "-r", "2",
            "--solo-runs", "1", "--warmup", "0", "--out", str(out)]  # fmt: skip
    with Tracked(argv) as run:
        stdout, stderr = run.communicate(timeout=120)
        assert run.process.returncode == 0, stderr
        assert len(run.sessions) == 3  # its own and one per grid point's server
        assert run.survivors() == []
    with (out / "sweep.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["processes"], r["pool"], r["pool_size"]) for r in rows] == [
        ("1", "thread-pool", "1"),
        ("2", "thread-pool", "1"),
    ]
    for row in rows:
        assert row["mode"] == "threading" and row["transactions"] == "8" and row["failed"] == "0"
        assert float(row["throughput_rps"]) > 0 and float(row["p95_s"]) > 0
        assert all(0 <= float(row[f"cpu{i}_pct"]) <= 100 for i in range(cpu_count()))
    assert rows[0]["server_pids"] == "1" and rows[1]["server_pids"] in {"1", "2"}  # the kernel picks the child
    doc = json.loads((out / "sweep.json").read_text())
    best = doc["best"]
    fastest = max(rows, key=lambda r: float(r["throughput_rps"]))
    assert (best["processes"], best["pool_size"]) == (int(fastest["processes"]), int(fastest["pool_size"]))
    assert f"best point for this machine: --processes {best['processes']} --thread-pool 1" in stdout
    assert is_png(out / "sweep.png")
    assert stdout.rstrip().splitlines()[-3:] == [
        f"wrote {out / name}" for name in ("sweep.csv", "sweep.json", "sweep.png")
    ]


def point(processes: int, size: int, rps: float, p95: float, failed: int = 0) -> dict[str, float | int]:
    return {"processes": processes, "pool_size": size, "throughput_rps": rps, "p95_s": p95,
            "failed": failed, "transactions": 10}  # fmt: skip


def test_best_point_is_the_fastest_clean_one_then_the_lowest_p95_then_the_smallest() -> None:
    assert best_point([point(1, 1, 5.0, 2.0), point(2, 1, 9.0, 1.1), point(4, 4, 9.5, 1.0, failed=1)]) == point(
        2, 1, 9.0, 1.1
    )
    assert best_point([point(2, 2, 9.0, 1.2), point(2, 1, 9.0, 1.1)]) == point(2, 1, 9.0, 1.1)
    assert best_point([point(4, 1, 9.0, 1.1), point(2, 1, 9.0, 1.1)]) == point(2, 1, 9.0, 1.1)
    assert best_point([point(1, 1, 0.0, 0.0, failed=10)]) is None


def test_points_within_five_percent_of_the_best_are_named_as_too_close_to_call() -> None:
    rows = [point(1, 1, 5.0, 2.0), point(2, 1, 10.0, 1.0), point(2, 2, 9.6, 1.1), point(4, 1, 9.9, 1.0, failed=1)]
    assert runners_up(rows, rows[1]) == [point(2, 2, 9.6, 1.1)]


def test_grid_values_are_checked() -> None:
    assert _counts("4,1,2,2") == [1, 2, 4]
    for bad in ("", "0", "1,x", "65"):
        with pytest.raises(argparse.ArgumentTypeError):
            _counts(bad)

"""bench/crowd.py: the lab's /async and the bare floor, alternating, failures counted, every server stopped."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import pytest

from bench.crowd import tally
from bench.limits import ensure_open_files
from tests.bench_helpers import Tracked


def test_a_failure_is_no_answer_or_any_status_outside_2xx() -> None:
    results = [(0.0, 1.0, 200), (0.0, 1.5, 204), (0.0, 3.0, 503), (0.0, 1.2, 0), (0.0, 1.1, 404)]
    assert tally(results) == {"median_s": 1.2, "longest_s": 3.0, "failed": 3}


def test_an_open_files_limit_that_cannot_be_raised_stops_the_run_with_the_command_to_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    with pytest.raises(SystemExit) as stopped:
        ensure_open_files(10**8)  # past any kernel's nr_open: not even root may have that many
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ulimit -Hn" in err and "Traceback" not in err
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == before


@pytest.mark.timeout(240)  # two servers of its own
def test_a_small_crowd_measures_both_sides_in_alternating_rounds_and_stops_both_servers(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.crowd", "-c", "20", "--rounds", "2", "--delay", "0.2",
            "--out", str(tmp_path)]  # fmt: skip
    with Tracked(argv) as run:
        stdout, stderr = run.communicate(timeout=200)
        assert run.process.returncode == 0, stderr
        assert run.survivors() == []
    doc = json.loads((tmp_path / "crowd.json").read_text())
    assert [(r["side"], r["round"]) for r in doc["rows"]] == [("bare", 1), ("lab", 1), ("bare", 2), ("lab", 2)]
    assert all(r["failed"] == 0 for r in doc["rows"])
    # Structure, not stopwatch: nobody answers before the wait it asked for is over.
    assert all(r["median_s"] >= 0.2 and r["longest_s"] >= r["median_s"] for r in doc["rows"])
    assert [line.split()[0] for line in doc["summary"]] == ["bare", "lab"]
    assert "over 2 rounds" in stdout

"""bench/crowd.py: the lab's /async and the bare floor, alternating, failures counted, every server stopped."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

import pytest

from bench import bare_server
from bench.crowd import summary, tally
from bench.lib.limits import SPARE_FILES, ensure_open_files, files_needed
from lab import collector
from tests.bench_helpers import Tracked
from tests.procs import wait_for


def test_a_failure_is_no_answer_or_any_status_outside_2xx() -> None:
    results = [(0.0, 1.0, 200), (0.0, 1.5, 204), (0.0, 3.0, 503), (0.0, 1.2, 0), (0.0, 1.1, 404)]
    assert tally(results) == {"median_s": 1.2, "longest_s": 3.0, "failed": 3}


def test_the_summary_compares_each_round_with_the_floor_of_the_same_round() -> None:
    def row(side: str, number: int, longest: float) -> dict[str, object]:
        return {"side": side, "round": number, "median_s": 1.0, "longest_s": longest, "failed": 0,
                "cpu_ms_per_request": 0.3}  # fmt: skip

    rows = [row("bare", 1, 2.0), row("lab", 1, 2.5), row("bare", 2, 4.0), row("lab", 2, 4.4)]
    # Over all rounds, the lab's longest (2.5-4.4) is 0.6-2.2x the floor's; round by round, 1.10-1.25x.
    assert summary(rows)[-1] == "lab/bare longest 1.10-1.25x, round by round"


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


def test_the_floor_settles_its_collector_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    settled: list[bool] = []
    monkeypatch.setattr(collector, "settle", lambda: settled.append(True))
    monkeypatch.setattr(asyncio, "run", lambda main: main.close())  # serve nothing
    bare_server.main(["--port", "0"])
    assert settled == []
    bare_server.main(["--port", "0", "--settled-collector"])
    assert settled == [True]


def test_the_busiest_process_sets_the_open_files_a_crowd_needs() -> None:
    assert files_needed(10_000) == 2 * 10_000 + SPARE_FILES  # one lab process: two sockets a wait
    # Forked, each process holds its share (and some): the client's one socket a wait is the floor.
    assert files_needed(10_000, 2) < files_needed(10_000)
    assert files_needed(10_000, 8) == 10_000 + SPARE_FILES


def test_a_crowd_too_big_for_one_process_is_told_how_many_would_share_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_allowed(*_: object) -> None:
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", not_allowed)
    concurrency = (4096 - SPARE_FILES) // 2 + 1  # just too many waits for one lab process
    with pytest.raises(SystemExit):
        ensure_open_files(concurrency, 1, can_fork=True)
    assert "fork the lab server (--processes 2)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ensure_open_files(concurrency, 1)  # a bench whose server cannot fork: no such advice
    assert "--processes" not in capsys.readouterr().err


@pytest.mark.timeout(240)  # two servers of its own
def test_a_small_crowd_measures_both_sides_in_alternating_rounds_and_stops_both_servers(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.crowd", "-c", "20", "--rounds", "2", "--delay", "0.2", "--settled-floor",
            "--out", str(tmp_path)]  # fmt: skip
    with Tracked(argv) as run:
        # The floor it measures is the one asked for: started with its collector settled.
        assert wait_for(lambda: run.descendants("bench.bare_server", "--settled-collector"), timeout=60)
        stdout, stderr = run.communicate(timeout=200)
        assert run.process.returncode == 0, stderr
        assert run.survivors() == []
    doc = json.loads((tmp_path / "crowd.json").read_text())
    assert [(r["side"], r["round"]) for r in doc["rows"]] == [("bare", 1), ("lab", 1), ("bare", 2), ("lab", 2)]
    assert doc["settled_floor"] is True
    assert all(r["failed"] == 0 for r in doc["rows"])
    # Structure, not stopwatch: nobody answers before the wait it asked for is over.
    assert all(r["median_s"] >= 0.2 and r["longest_s"] >= r["median_s"] for r in doc["rows"])
    assert [line.split()[0] for line in doc["summary"]] == ["bare", "lab", "lab/bare"]
    assert "over 2 rounds" in stdout

"""bench/race.py against a real server: the JSON-lines stream the lab page reads, the table, JSON and PNGs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import ROOT
from lab.modes.registry import MODES
from tests.bench_helpers import Tracked, is_png
from tests.builds import needs_matplotlib
from tests.conftest import StartServer

RACE = [sys.executable, "-m", "bench.race"]
TINY = ["--workload", "sleep", "-p", "seconds=0.05"]

# The fields the page's race driver relies on (bench/race.py EVENTS): they may grow, never shrink.
SOLO_FIELDS = {"event", "run", "of", "sent", "received", "seconds"}
RACE_FIELDS = {"event", "url", "mode", "workload", "params", "concurrency", "solo_s", "server"}
RESPONSE_FIELDS = {"event", "index", "sent", "received", "status", "body"}
PING_FIELDS = {"event", "sent", "received", "ms", "status", "gil"}
PINGS_FIELDS = {"event", "count", "failed", "from", "to", "p50_ms", "max_ms", "worst", "gil"}
SUMMARY_FIELDS = {
    "mode", "workload", "concurrency", "solo_s", "elapsed_s", "mean_s", "shortest_s", "longest_s",
    "transactions", "failed", "ideal_s", "ratio", "cores", "processes", "lanes", "worker_pids",
    "server_pids", "ping_count", "ping_p50_ms", "ping_p99_ms", "ping_max_ms",
}  # fmt: skip


def run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def test_jsonl_stream_keeps_the_page_contract(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    done = run([*RACE, "--url", lab.url, "--mode", "processing", *TINY, "-c", "4", "--jsonl"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress ticks in the stream's company
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    kinds = [e["event"] for e in events]
    assert kinds[:4] == ["solo", "solo", "solo", "race"] and kinds[-1] == "done"  # t's runs, each as it ends
    assert set(kinds) == {"solo", "race", "response", "pings", "done"}  # probes in batches (--ping-batch 0.1)
    assert all(set(e) >= SOLO_FIELDS for e in events[:3])
    race = events[3]
    assert set(race) >= RACE_FIELDS
    assert race["mode"] == "processing" and race["params"] == {"seconds": "0.05"}
    responses = [e for e in events if e["event"] == "response"]
    assert sorted(r["index"] for r in responses) == [0, 1, 2, 3]
    assert all(set(r) >= RESPONSE_FIELDS and r["status"] == 200 for r in responses)
    assert all(r["body"]["mode"] == "processing" for r in responses)
    assert all(set(e) >= PINGS_FIELDS for e in events if e["event"] == "pings")
    summary = events[-1]["summary"]
    assert set(summary) >= SUMMARY_FIELDS
    assert summary["transactions"] == 4 and summary["failed"] == 0 and summary["ratio"] > 0


def test_without_batching_every_probe_is_an_event_with_the_gil_reading(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--no-access-log")
    done = run([*RACE, "--url", lab.url, "--mode", "threading", *TINY, "-c", "2", "--jsonl", "--ping-batch", "0"])
    assert done.returncode == 0, done.stderr
    pings = [event for line in done.stdout.splitlines() if (event := json.loads(line))["event"] == "ping"]
    assert pings and all(set(p) >= PING_FIELDS for p in pings)
    assert not any('"pings"' in line for line in done.stdout.splitlines())
    summary = json.loads(done.stdout.splitlines()[-1])["summary"]
    assert summary["ping_count"] == len(pings)


@pytest.mark.timeout(300)  # a whole bench run on a lab server that starts a Dask cluster
@pytest.mark.timeout(240)
@needs_matplotlib
def test_rounds_alternate_the_modes_and_print_medians_and_ranges(start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    out = tmp_path / "rounds"
    done = run([sys.executable, "-m", "bench.race", "--url", lab.url, "--mode", "processing,threading", "--rounds",
                "2", "--workload", "count", "-p", "n=300000", "-c", "4", "--no-capacity", "--out", str(out),
                "--quiet"], timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads((out / "race.json").read_text())
    assert doc["order"] == ["processing", "threading", "processing", "threading"]
    assert [race["round"] for race in doc["races"]] == [1, 1, 2, 2]
    for race in doc["races"]:  # each round its own ideals
        assert race["summary"]["cpu_ideal_s"] > 0 and race["summary"]["cpu_ratio"] > 0
    assert [(s["endpoint"], s["rounds"]) for s in doc["rounds"]] == [("processing", 2), ("threading", 2)]
    for entry in doc["rounds"]:
        assert entry["elapsed_s"]["min"] <= entry["elapsed_s"]["median"] <= entry["elapsed_s"]["max"]
    lines = done.stdout.splitlines()
    over = lines.index("over 2 rounds, in turn:")
    assert [line.split()[0] for line in lines[over + 3 : over + 5]] == ["processing", "threading"]
    assert {p.name for p in out.glob("timeline-*.png")} == {
        f"timeline-{mode}-{n}.png" for mode in ("processing", "threading") for n in (1, 2)
    }


def test_an_unknown_mode_in_a_list_is_a_usage_error() -> None:
    done = run([sys.executable, "-m", "bench.race", "--mode", "processing,turbo", "--no-files"], timeout=30)
    assert done.returncode == 2 and "unknown mode turbo" in done.stderr


@needs_matplotlib
def test_all_modes_print_a_table_and_write_json_and_timelines(start_server: StartServer, tmp_path: Path) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    out = tmp_path / "race"
    # As a script, not a module: both ways must work.
    done = run([sys.executable, "bench/race.py", "--url", lab.url, "--all", *TINY, "--delay", "0.05",
                "--out", str(out)], timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Every mode the server can run (this Python's /modes): one it cannot is named, not raced.
    modes = ["blocking", "threading", "processing", "distributed", "async"]
    if MODES["interpreters"].unavailable() is None:
        modes.insert(3, "interpreters")
    else:
        assert "skipping interpreters: sub-interpreters with a GIL of their own need Python 3.12" in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["endpoint", "elapsed"] and "ping p99 ms" in lines[0]
    assert [line.split()[0] for line in lines[2 : 2 + len(modes)]] == modes
    written = [Path(line.removeprefix("wrote ")) for line in lines if line.startswith("wrote ")]
    assert written == [out / "race.json", *(out / f"timeline-{m}.png" for m in modes)]
    assert all(is_png(path) for path in written[1:])
    assert done.stderr.count("..........") == len(modes)  # one tick per finished request, ten per race
    doc: dict[str, Any] = json.loads((out / "race.json").read_text())
    assert [race["summary"]["mode"] for race in doc["races"]] == modes
    for race in doc["races"]:
        summary = race["summary"]
        assert summary["transactions"] == 10 and summary["failed"] == 0, summary
        assert summary["ratio"] > 0 and summary["ideal_s"] > 0
        assert len(race["responses"]) == 10 and race["pings"]
    blocking = doc["races"][0]["summary"]
    assert blocking["lanes"] == 1 and blocking["ideal_s"] == pytest.approx(10 * blocking["solo_s"], abs=1e-3)
    by_mode = {race["summary"]["mode"]: race["summary"] for race in doc["races"]}
    assert by_mode["async"]["params"] == {"delay": "0.05"}


def test_an_unreachable_server_is_an_error_event(refused_port: int) -> None:
    done = run([*RACE, "--url", f"http://127.0.0.1:{refused_port}", "--mode", "threading", "--jsonl"], timeout=30)
    assert done.returncode == 1
    [event] = [json.loads(line) for line in done.stdout.splitlines()]
    assert event["event"] == "error" and "stats" in event["message"]


def test_without_url_it_starts_and_stops_its_own_server(tmp_path: Path) -> None:
    argv = [*RACE, "--mode", "async", "--delay", "0.05", "-c", "3", "-r", "2", "--no-files", "--quiet",
            "--server-args", "--process-pool 1"]  # fmt: skip
    with Tracked(argv) as tracked:
        out, err = tracked.communicate(timeout=90)
        assert tracked.process.returncode == 0, err
        assert len(tracked.sessions) == 2  # its own, and the server's
        assert tracked.survivors() == []
    row = out.splitlines()[2].split()
    assert row[0] == "async" and row[5:7] == ["6", "0"]  # 3 clients x 2 requests each, none failed
    assert "wrote" not in out

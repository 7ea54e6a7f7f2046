"""bench/overhead.py: the lab and its floor in alternating rounds, ratios per round, --url, every server stopped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.lib import ab
from bench.lib.alternate import alternate, ratios
from bench.lib.callgrind import per_request
from bench.lib.tax import accept_summary, callgrind_summary, gil_summary, hop_summary, noise_summary
from bench.overhead import parse_args
from lab import ROOT
from tests.bench_helpers import Tracked
from tests.conftest import StartServer
from tests.lab_server import get

OVERHEAD = [sys.executable, "-m", "bench.overhead"]


def run(argv: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*OVERHEAD, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


# ---------- the rounds and their ratios ----------


def test_a_url_given_with_a_trailing_slash_is_the_base_every_path_is_joined_to() -> None:
    # bench/lib/args.py's --url, shared by every tool that measures a running lab: "/ping" is joined to it.
    assert parse_args(["--url", "http://127.0.0.1:8888/"]).url == "http://127.0.0.1:8888"
    assert parse_args(["--url", "http://127.0.0.1:8888"]).url == "http://127.0.0.1:8888"


def test_the_sides_alternate_and_swap_places_each_round() -> None:
    seen: list[tuple[str, str]] = []

    def measure(item: str, side: str) -> dict[str, str]:
        seen.append((item, side))
        return {"item": item}

    rows = alternate(["a", "b"], ("floor", "lab"), 3, measure)
    order = [(r["round"], r["item"], r["side"]) for r in rows]
    assert order == [
        (1, "a", "floor"), (1, "a", "lab"), (1, "b", "floor"), (1, "b", "lab"),
        (2, "a", "lab"), (2, "a", "floor"), (2, "b", "lab"), (2, "b", "floor"),
        (3, "a", "floor"), (3, "a", "lab"), (3, "b", "floor"), (3, "b", "lab"),
    ]  # fmt: skip
    assert seen == [(item, side) for _, item, side in order]
    assert [r["began"] for r in rows] == sorted(r["began"] for r in rows)


def test_each_rounds_ratio_comes_from_that_rounds_own_pair() -> None:
    # The floor doubles its time in round 2 (a slow minute) and so does the lab: per round the ratio is 1.5 each
    # time, though the lab's round 2 is 3x the floor's round 1.
    rows = [
        {"round": 1, "side": "floor", "x": 100.0}, {"round": 1, "side": "lab", "x": 150.0},
        {"round": 2, "side": "lab", "x": 300.0}, {"round": 2, "side": "floor", "x": 200.0},
        {"round": 3, "side": "floor", "x": 100.0}, {"round": 3, "side": "lab", "x": 120.0},
    ]  # fmt: skip
    assert ratios(rows, "x", ("lab", "floor"), lambda r: "g") == {"g": {"rounds": [1.5, 1.5, 1.2], "median": 1.5}}


def test_the_hop_summary_takes_the_cpu_ratio_round_by_round_too() -> None:
    # Round 2 is a slow minute for both sides. The CPU ratio is taken in each round (1.5, 1.4, 1.2: median 1.4),
    # not from each side's median over the rounds (360 / 300 = 1.2), which pairs numbers of different minutes.
    def row(round_: int, side: str, us: float, cpu: float) -> dict[str, Any]:
        return {"round": round_, "side": side, "route": "blocking", "concurrency": 1, "us_per_request": us,
                "server_cpu_us": cpu, "client_cpu_share": 0.1, "failed": 0}  # fmt: skip

    rows = [row(1, "floor", 300, 200), row(1, "lab", 420, 300), row(2, "lab", 800, 700), row(2, "floor", 500, 500),
            row(3, "floor", 300, 300), row(3, "lab", 390, 360)]  # fmt: skip
    (summary,) = hop_summary(rows)
    assert summary["ratios"] == [1.4, 1.6, 1.3] and summary["ratio"] == 1.4
    assert summary["cpu_lab_floor"] == 1.4
    assert (summary["floor_cpu_us"], summary["lab_cpu_us"]) == (300.0, 360.0)
    assert (summary["floor_switches"], summary["lab_switches"]) == (None, None)  # (rows from before they were kept)


def test_the_noise_summary_is_the_copy_over_the_floor_round_by_round() -> None:
    rows = [
        {"round": 1, "side": "floor", "concurrency": 1, "us_per_request": 100.0, "server_cpu_us": 50, "failed": 0},
        {"round": 1, "side": "copy", "concurrency": 1, "us_per_request": 120.0, "server_cpu_us": 60, "failed": 0},
        {"round": 2, "side": "copy", "concurrency": 1, "us_per_request": 90.0, "server_cpu_us": 50, "failed": 1},
        {"round": 2, "side": "floor", "concurrency": 1, "us_per_request": 100.0, "server_cpu_us": 40, "failed": 0},
    ]
    [row] = noise_summary(rows)
    assert row["ratios"] == [1.2, 0.9] and row["ratio"] == pytest.approx(1.05) and row["failed"] == 1
    assert row["cpu_ratio"] == pytest.approx((1.2 + 1.25) / 2)
    assert (row["floor_us"], row["copy_us"]) == (100.0, 105.0)


def test_the_accept_summary_is_dispatch_over_all_per_server_a_row_without_one_the_labs() -> None:
    def row(number: int, server: str | None, side: str, rate: float, share: float) -> dict[str, Any]:
        found = {"round": number, "side": side, "concurrency": 1, "per_second": rate, "client_cpu_share": share,
                 "failed": 1 if side == "dispatch" else 0}  # fmt: skip
        return found if server is None else found | {"server": server}

    rows = [row(1, None, "all", 1000, 0.3), row(1, None, "dispatch", 800, 0.4),  # saved before rows had a server
            row(1, "floor", "all", 1000, 0.5), row(1, "floor", "dispatch", 700, 0.2),
            row(2, "lab", "dispatch", 900, 0.1), row(2, "lab", "all", 1000, 0.1)]  # fmt: skip
    lab, floor = accept_summary(rows)
    assert (lab["server"], lab["ratios"], lab["all_per_s"], lab["dispatch_per_s"]) == ("lab", [0.8, 0.9], 1000, 850)
    assert (lab["client_cpu_share"], lab["failed"]) == (0.4, 2)
    assert (floor["server"], floor["ratios"], floor["client_cpu_share"], floor["failed"]) == ("floor", [0.7], 0.5, 1)


def test_the_callgrind_summary_is_lab_over_floor_instructions_round_by_round() -> None:
    rows = [
        {"round": 1, "side": "floor", "route": "ping", "concurrency": 1, "k_instructions": 1000.0,
         "idle_share": 0.0, "requests": 40, "failed": 0},
        {"round": 1, "side": "lab", "route": "ping", "concurrency": 1, "k_instructions": 1070.0,
         "idle_share": 0.15, "requests": 38, "failed": 0},
        {"round": 2, "side": "lab", "route": "ping", "concurrency": 1, "k_instructions": 1080.0,
         "idle_share": 0.17, "requests": 37, "failed": 0},
        {"round": 2, "side": "floor", "route": "ping", "concurrency": 1, "k_instructions": 1000.0,
         "idle_share": 0.0, "requests": 41, "failed": 0},
    ]  # fmt: skip
    assert callgrind_summary(rows) == [{
        "route": "ping", "concurrency": 1, "floor_k": 1000.0, "lab_k": 1075.0, "ratios": [1.07, 1.08], "ratio": 1.075,
        "idle_share": 0.17, "requests": 156, "failed": 0,
    }]  # fmt: skip


def test_a_batch_s_count_less_the_quieter_spell_s_rate_over_its_seconds_is_divided_by_its_requests() -> None:
    # Scripted counts, no valgrind: a spell before the batch that caught the end of what came before (3 million
    # a second), the batch (120 million over 4 s, 100 requests), a quiet spell after (1 million a second).
    class Scripted:
        def __init__(self) -> None:
            batch = ab.Batch(requests=100, failed=0, seconds=4.0, client_cpu_s=0.1, p50_ms=40.0, p99_ms=60.0)
            self.spells: list[tuple[object, int, float]] = [(None, 6_000_000, 2.0), (batch, 120_000_000, 4.0),
                                                            (None, 2_000_000, 2.0)]  # fmt: skip

        def over(self, work: object) -> tuple[object, int, float]:
            return self.spells.pop(0)

    found = per_request(Scripted(), "http://127.0.0.1:9/ping", concurrency=1, requests=100, seconds=2,  # type: ignore[arg-type]
                        timeout=5)  # fmt: skip
    assert found == {"requests": 100, "failed": 0, "k_instructions": 1160.0, "idle_k_per_s": 1000.0,
                     "idle_share": 0.033}  # fmt: skip


def test_a_round_missing_a_side_has_no_ratio() -> None:
    rows = [{"round": 1, "side": "floor", "x": 100.0}, {"round": 1, "side": "lab", "x": 110.0},
            {"round": 2, "side": "lab", "x": 130.0}]  # fmt: skip
    assert ratios(rows, "x", ("lab", "floor"), lambda r: 0)[0] == {"rounds": [1.1], "median": 1.1}


def test_the_gil_summary_gives_each_round_its_medians_and_longest_side_by_side() -> None:
    def row(number: int, side: str, median: float, longest: float) -> dict[str, Any]:
        return {"round": number, "side": side, "ping_median_ms": median, "ping_max_ms": longest, "pings": 5,
                "failed": 0}  # fmt: skip

    summary = gil_summary([row(1, "floor", 100, 400), row(1, "lab", 120, 400), row(2, "lab", 90, 600),
                           row(2, "floor", 100, 300)])  # fmt: skip
    assert [(s["round"], s["median_ratio"], s["max_ratio"]) for s in summary] == [
        ("1", 1.2, 1.0), ("2", 0.9, 2.0), ("median", 1.05, 1.5)
    ]  # fmt: skip


# ---------- ab ----------

REPORT = """Concurrency Level:      10
Time taken for tests:   2.004 seconds
Complete requests:      5000
Failed requests:        4000
   (Connect: 0, Receive: 1, Length: 3996, Exceptions: 3)
Non-2xx responses:      2
Keep-Alive requests:    5000
"""


def test_answers_of_another_length_are_not_failures_but_broken_ones_and_non_2xx_are() -> None:
    batch = ab.parse(REPORT, 0.5, {50: 1.5, 99: 4.0})
    assert (batch.requests, batch.failed, batch.seconds) == (5000, 1 + 3 + 2, 2.004)
    assert batch.us_per_request == pytest.approx(400.8) and batch.client_cpu_share == pytest.approx(0.5 / 2.004)
    assert (batch.p50_ms, batch.p99_ms) == (1.5, 4.0)


def test_ab_takes_whole_seconds_only() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        ab.ab_batch("http://127.0.0.1:1/ping", concurrency=1, seconds=0)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--routes", "ping,bogus"], "--routes takes"),
        (["--parts", "hops,x"], "--parts takes"),
        (["--concurrency", "0"], "--concurrency takes"),
        (["--seconds", "0"], "--seconds must be between"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv: list[str], says: str) -> None:
    done = run(["--no-files", *argv], timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_without_ab_it_says_how_to_install_it(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # no ab there (nor anything else)
    done = subprocess.run([*OVERHEAD, "--no-files"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2 and "apache2-utils" in done.stderr and done.stderr.count("\n") == 1


def test_without_valgrind_the_callgrind_part_says_how_to_install_it(tmp_path: Path) -> None:
    found = shutil.which("ab")
    assert found is not None
    (tmp_path / "ab").symlink_to(found)  # ab on the PATH, valgrind not
    done = subprocess.run([*OVERHEAD, "--no-files", "--parts", "callgrind"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": str(tmp_path)}, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "valgrind" in done.stderr and done.stderr.count("\n") == 1


def test_the_callgrind_part_is_skipped_with_a_reason_against_a_running_lab() -> None:
    done = run(["--no-files", "--parts", "callgrind", "--url", "http://127.0.0.1:9"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert "skipped: callgrind: it starts a lab of its own under valgrind, not with --url" in done.stdout


# ---------- against servers ----------


@pytest.mark.timeout(400)  # a lab of its own with a Dask-free start, a floor, the convoys
def test_against_a_running_lab_each_round_measures_both_sides_and_the_lab_gets_every_request(
    start_server: StartServer, tmp_path: Path
) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "3")
    argv = ["--url", lab.url, "--routes", "ping,threading", "--concurrency", "1,2", "--rounds", "2", "--seconds", "1",
            "--parts", "hops,gil", "--gil-load", "200000", "--gil-requests", "3", "--out", str(tmp_path)]  # fmt: skip
    done = run(argv, timeout=380)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "overhead.json").read_text())
    assert doc["floor_flags"] == ["--settled-collector", "--thread-pool", "3"]  # sized as the lab
    hops = doc["hops"]
    assert [(r["round"], r["route"], r["concurrency"], r["side"]) for r in hops[:4]] == [
        (1, "ping", 1, "floor"), (1, "ping", 1, "lab"), (1, "ping", 2, "floor"), (1, "ping", 2, "lab")
    ]  # fmt: skip
    assert [r["side"] for r in hops if r["round"] == 2][:2] == ["lab", "floor"]
    assert all(r["requests"] > 0 and r["failed"] == 0 for r in hops)
    # A /threading request hands its job to a pool thread and gets its result back: a wake-up or more each way.
    assert all(r["server_switches"] >= 1 for r in hops if r["route"] == "threading")
    for row in hop_summary(hops):
        pairs = {(r["round"], r["side"]): r["us_per_request"] for r in hops
                 if (r["route"], r["concurrency"]) == (row["route"], row["concurrency"])}  # fmt: skip
        assert row["ratios"] == [round(pairs[n, "lab"] / pairs[n, "floor"], 3) for n in (1, 2)]
    # Every request ab counted against the lab reached it (ab may stop with a few answered it did not count).
    sent = sum(r["requests"] for r in hops if r["side"] == "lab" and r["route"] == "threading")
    sent += sum(w["requests"] for w in doc["warmups"] if w["side"] == "lab" and w["route"] == "threading")
    sent += 2 * 3  # the convoys
    counted = get(f"{lab.url}/stats").json()["totals"]["requests"]["threading"]["count"]
    assert sent <= counted <= sent + 2 * (len(hops) + len(doc["warmups"]))
    assert [(r["round"], r["side"]) for r in doc["gil"]] == [(1, "floor"), (1, "lab"), (2, "lab"), (2, "floor")]
    assert all(r["pings"] >= 1 and r["failed"] == 0 for r in doc["gil"])
    text = (tmp_path / "overhead.md").read_text()
    assert "| route | c | floor µs | lab µs | by round | lab/floor |" in text and "commit" in text


@pytest.mark.timeout(400)  # three labs of its own (one, then two forked) and three floors (one, two forked)
def test_on_its_own_it_starts_the_lab_the_floor_and_the_forked_labs_and_stops_them_all(tmp_path: Path) -> None:
    argv = [*OVERHEAD, "--server-args", "--process-pool 1", "--routes", "ping", "--concurrency", "2", "--rounds", "2",
            "--seconds", "1", "--parts", "hops,noise,accept", "--out", str(tmp_path)]  # fmt: skip
    with Tracked(argv) as tracked:
        stdout, stderr = tracked.communicate(timeout=380)
        assert tracked.process.returncode == 0, stderr
        assert tracked.survivors() == []
    doc = json.loads((tmp_path / "overhead.json").read_text())
    # The floor against its copy, alternating as the lab against the floor: the run's own noise.
    assert [(r["round"], r["side"], r["route"]) for r in doc["noise"]] == [
        (1, "floor", "ping"), (1, "copy", "ping"), (2, "copy", "ping"), (2, "floor", "ping")]  # fmt: skip
    assert doc["summaries"]["noise"][0]["concurrency"] == 2 and len(doc["summaries"]["noise"][0]["ratios"]) == 2
    assert "copy/floor" in stdout
    # Each server's two policies back to back, the lab's then the floor's (forked too, a bare parent dispatching).
    assert [(r["round"], r["server"], r["side"]) for r in doc["accept"]] == [
        (1, "lab", "all"), (1, "lab", "dispatch"), (1, "floor", "all"), (1, "floor", "dispatch"),
        (2, "lab", "dispatch"), (2, "lab", "all"), (2, "floor", "dispatch"), (2, "floor", "all"),
    ]  # fmt: skip
    assert all(r["requests"] > 0 and r["failed"] == 0 for r in doc["accept"])
    assert "dispatch/all" in stdout
    assert [(row["server"], len(row["ratios"])) for row in doc["summaries"]["accept"]] == [("lab", 2), ("floor", 2)]


@pytest.mark.timeout(400)  # a lab and a floor under valgrind: each starts several times slower, runs ~40 times
def test_callgrind_counts_each_sides_instructions_a_request_in_turn_and_stops_both(tmp_path: Path) -> None:
    argv = [*OVERHEAD, "--server-args", "--process-pool 1", "--routes", "ping,threading", "--concurrency", "1",
            "--rounds", "1", "--seconds", "1", "--parts", "callgrind", "--out", str(tmp_path)]  # fmt: skip
    with Tracked(argv) as tracked:
        stdout, stderr = tracked.communicate(timeout=380)
        assert tracked.process.returncode == 0, stderr
        assert tracked.survivors() == []  # both servers, and valgrind with them
    rows = json.loads((tmp_path / "overhead.json").read_text())["callgrind"]
    assert [(r["route"], r["side"]) for r in rows] == [
        ("ping", "floor"), ("ping", "lab"), ("threading", "floor"), ("threading", "lab")]  # fmt: skip
    assert all(r["requests"] > 0 and r["failed"] == 0 and r["k_instructions"] > 0 for r in rows)
    # Counted a request, on each side: a /threading request does what a /ping does, and its hand-over to a pool
    # thread and back besides (about a fifth more on both sides here).
    counted = {(r["route"], r["side"]): r["k_instructions"] for r in rows}
    assert all(counted["threading", side] > counted["ping", side] for side in ("floor", "lab"))
    assert "lab/floor" in stdout and "callgrind: thousands of instructions a request" in stdout

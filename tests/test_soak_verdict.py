"""bench.soak's verdict rules and bookkeeping on synthetic samples: each built to pass, and each built to fail."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from bench.lib.soak.census import Known, ProcSample, measure, role_of, unknown
from bench.lib.soak.client import RACE_ERROR, Answer
from bench.lib.soak.faults import mixed_pools, process_pools
from bench.lib.soak.ledger import RACE_BUSY, Effect, Ledger, Record, Window, classify, tally
from bench.lib.soak.mix import Entry, light, predict
from bench.lib.soak.report import trend_samples
from bench.lib.soak.run import rehearsal_order
from bench.lib.soak.verdict import (
    accounting_check,
    baseline_check,
    growth_check,
    orphan_check,
    ping_check,
    t_975,
    trend,
    trend_check,
    unexpected_check,
)
from bench.soak import default_warmup
from handlers.race import BUSY
from tests.procs import wait_for

MB = 2**20
BASE = 150 * MB


@pytest.mark.parametrize(("df", "table"), [(3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (1000, 1.962)])
def test_the_t_quantile_matches_the_tables(df: int, table: float) -> None:
    assert t_975(df) == pytest.approx(table, abs=0.004)


def _series(per_hour_pct: float, noise_mb: float, samples: int = 180, every: float = 10.0, seed: int = 1):
    """RSS samples every `every` s growing `per_hour_pct` % of BASE an hour, with uniform noise of +-noise_mb."""
    rng = random.Random(seed)
    times = [i * every for i in range(samples)]
    values = [BASE * (1 + per_hour_pct / 100 * t / 3600) + rng.uniform(-noise_mb, noise_mb) * MB for t in times]
    return times, values


def test_a_clean_line_gives_its_slope_and_a_narrow_interval() -> None:
    times, values = _series(4.0, 0.0)
    found = trend(times, values)
    assert found is not None
    slope, low, high = found.per_hour_pct(BASE)
    assert slope == pytest.approx(4.0) and low == pytest.approx(4.0) and high == pytest.approx(4.0)


def test_a_leak_of_a_few_percent_an_hour_is_rising_and_fails() -> None:
    times, values = _series(3.0, 0.5)  # half an hour of 10 s samples, RSS noise of half a MB
    check = trend_check("server[0]", BASE, trend(times, values))
    assert not check.ok and check.numbers["status"] == "rising"
    assert check.numbers["low_pct_per_hour"] > 1.0


def test_flat_noise_is_flat_and_passes() -> None:
    times, values = _series(0.0, 2.0)
    check = trend_check("server[0]", BASE, trend(times, values))
    assert check.ok and check.numbers["status"] == "flat"
    assert check.numbers["low_pct_per_hour"] < 0 < check.numbers["high_pct_per_hour"]


def test_noise_too_wide_to_rule_out_a_rise_is_unclear_not_a_failure() -> None:
    times, values = _series(0.0, 20.0, samples=12)  # two minutes, 20 MB of noise
    check = trend_check("server[0]", BASE, trend(times, values))
    assert check.ok and check.numbers["status"] == "unclear"
    assert "soak longer" in check.detail


def test_a_small_but_certain_rise_under_the_limit_passes() -> None:
    times, values = _series(0.3, 0.05)
    check = trend_check("server[0]", BASE, trend(times, values))
    assert check.ok and check.numbers["status"] == "flat"
    assert 0 < check.numbers["low_pct_per_hour"] < 1.0


def test_too_few_samples_make_no_trend() -> None:
    assert trend([0, 10, 20], [1, 2, 3]) is None
    assert trend_check("x", BASE, None).numbers["status"] == "too few samples"


@pytest.mark.parametrize(
    ("readings", "ok"),
    [
        ([("after fault 0", BASE * 1.01), ("end", BASE * 1.04)], True),
        ([("after fault 0", BASE * 1.06), ("end", BASE * 1.02)], False),  # over the limit once is over it
        ([("end", BASE * 1.051)], False),
        ([("end", BASE * 0.7)], True),  # a fresh replacement holds less: only growth counts
    ],
)
def test_rss_growth_is_judged_at_every_quiet_check(readings, ok: bool) -> None:
    check = growth_check("processing-worker[0]#1", BASE, readings)
    assert check.ok is ok
    assert check.numbers["final_bytes"] == readings[-1][1]


def test_the_baseline_returns_only_when_every_count_is_equal() -> None:
    baseline = {"server[1]": {"processes": 1, "fds": 21, "threads": 12},
                "processing-worker[1]": {"processes": 2, "fds": 24, "threads": 4}}  # fmt: skip
    assert baseline_check("after fault 3", baseline, baseline, 2.5).ok
    one_more_fd = {**baseline, "server[1]": {"processes": 1, "fds": 22, "threads": 12}}
    check = baseline_check("after fault 3", baseline, one_more_fd, 60.0)
    assert not check.ok and check.numbers["differences"] == ["server[1]: fds 21 -> 22"]
    a_worker_short = {"server[1]": baseline["server[1]"], "processing-worker[1]": {"processes": 1, "fds": 12,
                                                                                  "threads": 2}}  # fmt: skip
    differences = baseline_check("end", baseline, a_worker_short, 60.0).numbers["differences"]
    assert "processing-worker[1]: processes 2 -> 1" in differences
    a_new_role = {**baseline, "race[0]": {"processes": 1, "fds": 5, "threads": 1}}
    assert not baseline_check("end", baseline, a_new_role, 60.0).ok


def test_ping_is_steady_until_its_p99_more_than_doubles() -> None:
    first = [5.0] * 98 + [40.0, 40.0]
    assert ping_check(first, [5.0] * 98 + [70.0, 70.0]).ok  # 70 <= 2 x 40 + 10
    check = ping_check(first, [5.0] * 98 + [120.0, 120.0])
    assert not check.ok and check.numbers["last_p99_ms"] == 120.0


def test_accounting_fails_on_a_single_request_with_no_answer_and_no_fault() -> None:
    healthy = {"sent": 10, "answered": 9, "counted_errors": 1, "unaccounted": 0}
    assert accounting_check(healthy).ok
    assert not accounting_check({"sent": 10, "answered": 8, "counted_errors": 1, "unaccounted": 1}).ok


def test_unexpected_statuses_and_orphans_fail() -> None:
    assert unexpected_check({}).ok
    check = unexpected_check({"503": 2, "404": 1})
    assert not check.ok and check.numbers["unexpected_5xx"] == 2
    assert orphan_check("end", []).ok
    assert not orphan_check("end", ["processing-worker[1] pid 4242 (its parent now pid 1)"]).ok


def _record(seq: int, status: int | None, error: str | None = None, *, mode: str = "processing", at: float = 100.0,
            fault: int | None = None) -> Record:  # fmt: skip
    return Record(seq, "mix", f"/{mode}/sleep", mode, at, at + 1, status, error, fault)


def test_a_fault_explains_what_it_was_designed_to_cause_in_its_window_only() -> None:
    burst = Window(0, 95.0, 105.0, (Effect(503, "processing"),))
    timeout = Window(1, 200.0, 220.0, (Effect(504, "processing", own_only=True), Effect(503, "processing")))
    kill = Window(2, 300.0, 310.0, (Effect(None),))
    records = [
        _record(0, 200),
        _record(1, 503),  # in the burst's window: expected
        _record(2, 503, at=150.0),  # between faults: unexpected
        _record(3, 503, mode="threading"),  # in the window, on another mode: unexpected
        _record(4, 504, at=210.0, fault=1),  # the job-timeout fault's own request
        _record(5, 504, at=210.0),  # a 504 beside it, not its own: unexpected
        _record(6, None, "reset", at=305.0),  # cut by the killed server process
        _record(7, None, "timeout", at=150.0),  # no answer, no fault: unaccounted
        _record(8, None, "aborted", at=150.0, fault=3),  # hung up on purpose
    ]
    classify(records, [burst, timeout, kill])
    outcomes = [r.outcome for r in records]
    assert outcomes == ["ok", "expected", "unexpected", "unexpected", "expected", "unexpected", "cut",
                        "unaccounted", "aborted"]  # fmt: skip
    assert (records[1].because, records[4].because, records[6].because) == (0, 1, 2)
    counted = tally(records)
    assert counted["sent"] == counted["answered"] + counted["counted_errors"] + counted["unaccounted"]
    assert (counted["answered"], counted["counted_errors"], counted["unaccounted"]) == (6, 2, 1)


def test_a_race_refused_busy_is_expected_only_just_after_the_fault_that_abandoned_one() -> None:
    disconnect = Window(0, 95.0, 160.0, (Effect(None, race_refusal=RACE_BUSY, sent_by=106.0),))
    kill = Window(1, 300.0, 310.0, (Effect(None),))
    ledger = Ledger()

    def race(message: str | None, at: float, error: str = RACE_ERROR) -> Record:
        body = json.dumps({"event": "error", "message": message}).encode() if message else b""
        return ledger.add("race", "/race", "blocking", Answer(at, at + 0.03, None, body, error))

    race(BUSY, 101.0)  # sent as the fault's race was hung up on: the lab was still stopping it
    race(BUSY, 150.0)  # in the window, long after the hang-up: unexpected
    race(BUSY, 200.0)  # busy with no race abandoned: unexpected
    race("the load generator exited with status 1 before the race ended", 101.0)  # another error: unexpected
    race("the load generator exited with status 1 before the race ended", 305.0)  # answered, not cut: unexpected
    race(None, 305.0, "race closed")  # closed with its killed server process, no event: cut
    ledger.add("mix", "/blocking/sleep", "blocking", Answer(101.0, 102.0, None, b"", "reset"))  # nothing cut here
    classify(ledger.records, [disconnect, kill])
    assert [r.outcome for r in ledger.records] == ["expected", "unexpected", "unexpected", "unexpected",
                                                   "unexpected", "cut", "unaccounted"]  # fmt: skip
    assert (ledger.records[0].because, ledger.records[5].because) == (0, 1)


def test_light_params_are_a_share_of_the_defaults_within_their_limits() -> None:
    params: list[dict[str, Any]] = [
              {"name": "n", "type": "integer", "default": 30_000_000, "min": 1, "max": 200_000_000},
              {"name": "fanout", "type": "integer", "default": 1, "min": 1, "max": 50},
              {"name": "seconds", "type": "number", "default": 1.0, "min": 0.0, "max": 30.0},
              {"name": "dataset", "type": "choice", "default": "digits", "choices": ["digits"]}]  # fmt: skip
    assert light(params, 0.05, {}) == {"n": "1500000", "fanout": "1", "seconds": "0.05"}
    assert light(params, 0.05, {"seconds": "2"})["seconds"] == "2"


def test_the_capacity_is_where_the_first_mode_or_the_cores_fill() -> None:
    mix = [Entry("/blocking/count", "blocking", "count", 2, True, t_s=0.4),
           Entry("/processing/count", "processing", "count", 2, True, t_s=0.4),
           Entry("/async", "async", "upstream", None, False, t_s=0.1)]  # fmt: skip
    # Cores: 0.8 s of computing per 3 requests on 2 effective cores: 7.5 requests/s. Each mode: 3 / 0.2 = 15/s.
    prediction = predict(mix, 2.0, 0.7)
    assert prediction.bound == "cores" and prediction.capacity_rps == pytest.approx(7.5)
    assert prediction.rate_rps == pytest.approx(5.25)
    # About 5.25/s x 0.3 s = 1.6 requests in flight at that rate: the cap is its floor, 8, not four times that.
    assert prediction.cap == 8
    waits = [Entry("/threading/sleep", "threading", "sleep", 12, False, t_s=1.0)]
    # 12 lanes of 1 s: 12/s; 70 % of it is 8.4/s, 8.4 requests in flight: the cap is four times that, rounded up.
    assert predict(waits, 2.0, 0.7).cap == 34
    single = [Entry("/blocking/sleep", "blocking", "sleep", 1, False, t_s=0.5)]  # waits: only its lane limits it
    assert predict(single, 2.0, 1.0).bound == "blocking" and predict(single, 2.0, 1.0).capacity_rps == 2.0


def test_the_census_names_the_embedded_cluster_and_the_core_meter_by_their_command_lines() -> None:
    # (The short soak runs no /distributed: this is where the role is proved.)
    cluster = SimpleNamespace(pid=42, cmdline=lambda: ["python", "-m", "lab.modes.distributed.cluster_process"])
    meter = SimpleNamespace(pid=44, cmdline=lambda: ["python", "-m", "lab.instruments.cores", "--pid", "7"])
    stranger = SimpleNamespace(pid=43, cmdline=lambda: ["python", "-c", "pass"])
    known = Known(forked=True, servers={7: 1})
    assert role_of(cluster, known, root=1, owner=1) == "dask-cluster[1]"  # type: ignore[arg-type]
    assert role_of(meter, known, root=1, owner=1) == "core-meter[1]"  # type: ignore[arg-type]
    assert role_of(stranger, known, root=1, owner=1) == "other[1]"  # type: ignore[arg-type]
    # Only a process it cannot name makes the soak ask /stats again (a pool worker it has not been told of).
    placed = [ProcSample(44, "core-meter[1]", "core-meter[1]", 0.0, rss_bytes=1, fds=3, threads=1, children=0)]
    assert not unknown(placed) and unknown([*placed, replace(placed[0], role="other[1]")])


def test_the_warm_up_is_a_fifth_of_the_soak_and_rehearses_the_kill_child_first() -> None:
    # An hour's soak measured a server's RSS still climbing at 6 minutes and level after 15 (bench/soak.py).
    assert default_warmup(60) == 720 and default_warmup(10) == 120 and default_warmup(1) == 60
    order = rehearsal_order(["kill-worker", "disconnect", "job-timeout", "burst", "kill-child"])
    assert order == ["kill-child", "kill-worker", "disconnect", "job-timeout", "burst"]
    assert rehearsal_order(["burst", "disconnect"]) == ["burst", "disconnect"]


def test_faults_strike_only_the_pools_of_modes_in_the_mix() -> None:
    # With --modes async the processing pool gets no traffic and no warm burst: striking it made every later
    # quiet check count its replacement's descriptors against a warmed pool's baseline.
    stats = {"processes": [{"task_id": 0, "pools": {
        "processing": {"kind": "processes", "worker_pids": [11, 12]},
        "interpreters": {"kind": "processes", "worker_pids": [13]},
        "threading": {"kind": "threads", "worker_pids": []}}}]}  # fmt: skip
    scene: Any = SimpleNamespace(mix_doc={"entries": [SimpleNamespace(mode="async"), SimpleNamespace(mode=None),
                                                      SimpleNamespace(mode="processing")]})  # fmt: skip
    assert mixed_pools(scene, stats) == [(0, "processing", [11, 12])]
    assert [pool[1] for pool in process_pools(stats)] == ["processing", "interpreters"]
    scene.mix_doc["entries"] = [SimpleNamespace(mode="async")]
    assert mixed_pools(scene, stats) == []


def test_a_trend_is_fitted_to_the_last_process_once_it_is_as_old_as_the_warm_up() -> None:
    def sample(t: float, pid: int, phase: str = "traffic") -> dict[str, Any]:
        return {"t": t, "pid": pid, "rss_bytes": 1, "phase": phase}

    # An hour, the middle at 30 min, a 12 min warm-up. The first process lives to 40 min, its replacement after.
    series = [*(sample(60.0 * m, 1) for m in range(40)), *(sample(60.0 * m, 2) for m in range(40, 60))]
    series.append(sample(60.0 * 59.5, 2, phase="settle"))
    fitted = trend_samples(series, middle=1800.0, warmup_s=720.0)
    assert [s["t"] / 60 for s in fitted] == [52.0 + m for m in range(8)]  # the replacement's, from 12 min old
    # A process there from the start: the last half only, its own warm-up long over.
    assert [s["t"] / 60 for s in trend_samples(series[:40], middle=1800.0, warmup_s=720.0)] == list(range(30, 40))
    # A replacement younger than the warm-up: nothing to fit (too few samples, not a trend).
    assert trend_samples([*series[:40], sample(3000.0, 3)], middle=1800.0, warmup_s=720.0) == []
    assert trend_samples([], middle=1800.0, warmup_s=720.0) == []


def test_the_census_counts_the_threads_a_process_keeps_not_one_that_comes_and_goes() -> None:
    # As the GIL meter does: a thread for a 10 ms sample, every 60 ms or so; and one thread kept throughout.
    script = textwrap.dedent("""
        import threading, time
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        while True:
            threading.Thread(target=time.sleep, args=(0.01,)).start()
            time.sleep(0.005)
    """)  # (a new one every 5 ms: one or two are almost always alive, so a plain count is almost always more)
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        process = psutil.Process(child.pid)
        assert wait_for(lambda: process.num_threads() >= 3)  # the main thread, the kept one, passing ones
        counted = [measure([(process, "server")])[0].threads for _ in range(10)]
        assert counted == [2] * 10
    finally:
        child.kill()
        child.wait()

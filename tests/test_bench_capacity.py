"""This machine's parallel capacity (lab/race/capacity.py) and the ideal it leaves reachable (lab/race/ideal.py)."""

from __future__ import annotations

import pytest

from lab.race import capacity
from lab.race.capacity import Capacity, measure
from lab.race.data import Ping, ping_batch_event
from lab.race.ideal import cpu_ideal_makespan, ideal_makespan, reachable_makespan

FACTS = {"cpu_count": 2, "processes": 1, "thread_pool": 6, "process_pool": 2, "releases_gil": {}, "waits": {}}


def test_a_measure_runs_copies_at_once_and_alone() -> None:
    found = measure(2, rounds=1)
    assert found.copies == 2 and found.solo_s > 0 and found.together_s > 0
    # One round: its slowdown is what it timed, together over alone (1 at the least), as the medians record it.
    assert found.slowdown == pytest.approx(max(1.0, found.together_s / found.solo_s), abs=0.005)


@pytest.mark.parametrize(
    ("makespans", "expected"),
    [
        # Pairs (alone, together) of 1 and 3, 2 and 2.2, 1 and 1.2: ratios 3, 1.1, 1.2, their median 1.2 (the
        # medians' ratio would say 2.2).
        ([1.0, 3.0, 2.0, 2.2, 1.0, 1.2], Capacity(2, 1.0, 2.2, 1.2)),
        # Ratios 0.5, 0.8 and 3: a pair that went faster together is no faster than parallel (1), median 1.
        ([2.0, 1.0, 1.0, 0.8, 1.0, 3.0], Capacity(2, 1.0, 1.0, 1.0)),
    ],
)
def test_the_slowdown_is_the_median_of_each_pairs_ratio(
    monkeypatch: pytest.MonkeyPatch, makespans: list[float], expected: Capacity
) -> None:
    timed = iter([0.0, *makespans])  # the warm-up round first
    monkeypatch.setattr(capacity, "_round", lambda pipes: next(timed))
    assert measure(2, rounds=3) == expected


def test_one_core_has_nothing_to_measure() -> None:
    assert measure(1) == Capacity(1, 0.0, 0.0, 1.0)


def test_a_slower_machine_stretches_each_round_of_the_ideal() -> None:
    half = Capacity(copies=2, solo_s=1.0, together_s=1.5, slowdown=1.5)
    assert (half.at_once(1), half.at_once(2), half.at_once(5)) == (1.0, 1.5, 1.5)
    # 10 runs, 2 at a time: 5 rounds, each 1.5 t here instead of t.
    assert ideal_makespan("processing", "count", FACTS, 1.0, 10) == 5.0
    assert reachable_makespan("processing", "count", FACTS, 1.0, 10, at_once=half.at_once) == pytest.approx(7.5)
    # 9 runs: 4 full rounds and one run alone.
    assert reachable_makespan("processing", "count", FACTS, 1.0, 9, at_once=half.at_once) == pytest.approx(7.0)
    # One at a time (blocking): the machine's parallel capacity does not matter.
    assert reachable_makespan("blocking", "count", FACTS, 1.0, 10, at_once=half.at_once) == 10.0
    perfect = Capacity(copies=2, solo_s=1.0, together_s=1.0, slowdown=1.0)
    assert reachable_makespan("processing", "count", FACTS, 1.0, 10, at_once=perfect.at_once) == 5.0


def test_a_batch_of_probes_keeps_the_worst_wait_and_the_gil_reading() -> None:
    batch = [Ping(1.0, 1.002, 2.0, 200, 0.1), Ping(1.01, 1.31, 300.0, 200, 0.9), Ping(1.32, 1.33, 0.0, 0, None)]
    event = ping_batch_event(batch)
    assert event["event"] == "pings" and (event["count"], event["failed"]) == (3, 1)
    assert event["worst"] == {"sent": 1.01, "received": 1.31, "ms": 300.0} and event["max_ms"] == 300.0
    assert (event["from"], event["to"], event["gil"]) == (1.0, 1.33, 0.9)


def test_the_ideal_from_the_bursts_own_cpu_time() -> None:
    waits = {**FACTS, "waits": {"sleep": True}}
    # The same rounds as the nominal ideal, with each run's CPU time in the burst as t.
    assert cpu_ideal_makespan("processing", "count", FACTS, 0.3, 10) == pytest.approx(1.5)
    assert cpu_ideal_makespan("threading", "count", FACTS, 0.2, 10) == pytest.approx(2.0)  # one GIL: one lane
    # Nothing computed worth timing, or nothing reported: no such ideal.
    assert cpu_ideal_makespan("threading", "sleep", waits, 0.001, 10) is None
    assert cpu_ideal_makespan("async", "async", FACTS, 0.001, 10) is None
    assert cpu_ideal_makespan("processing", "count", FACTS, None, 10) is None

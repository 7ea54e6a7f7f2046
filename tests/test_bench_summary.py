"""Bench arithmetic with known numbers: the ideal (lab/race/ideal.py), siege parsing, summary rows, tables."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.lib.results import new_results_dir
from bench.lib.siege import StepError, parse_siege
from bench.lib.tables import ROW_KEYS, markdown_table, text_table
from bench.siege_steps import summary_row
from lab.race.engine import mode_url
from lab.race.ideal import ideal_makespan, lanes
from lab.race.stats import median, percentile, ratio


def facts(cores: int = 2, processes: int = 1, thread_pool: int = 6, process_pool: int = 2) -> dict[str, Any]:
    return {
        "cpu_count": cores,
        "processes": processes,
        "thread_pool": thread_pool,
        "process_pool": process_pool,
        "releases_gil": {"count": False, "fib": False, "matmul": True, "sleep": True},
        "waits": {"count": False, "fib": False, "matmul": False, "sleep": True},
    }


@pytest.mark.parametrize(
    ("mode", "workload", "server", "expected"),
    [
        ("blocking", "count", facts(), 10.0),  # serial: 10 t
        ("threading", "count", facts(), 10.0),  # the GIL makes threads serial
        ("threading", "matmul", facts(), 5.0),  # releases the GIL: min(cores, pool) lanes
        ("threading", "sleep", facts(), 2.0),  # waits, so not capped by cores: ceil(10/6)
        ("processing", "count", facts(), 5.0),  # ceil(10/2) rounds
        ("processing", "count", facts(cores=4, process_pool=4), 3.0),  # the published 4-core figure: 3 rounds
        ("processing", "count", facts(process_pool=8), 5.0),  # more workers than cores do not help
        ("threading", "count", facts(processes=2), 5.0),  # forked: one GIL per process
        ("async", "upstream", facts(), 1.0),  # one upstream delay
    ],
)
def test_ideal_makespan_of_ten_requests(mode: str, workload: str, server: dict[str, Any], expected: float) -> None:
    assert ideal_makespan(mode, workload, server, 1.0, 10) == expected


def test_ideal_with_repetitions_counts_every_run_and_each_clients_own_rounds() -> None:
    server = facts()
    assert ideal_makespan("processing", "count", server, 0.5, 10, reps=2) == 5.0  # 20 runs on 2 lanes
    assert ideal_makespan("processing", "count", server, 1.0, 1, reps=3) == 3.0  # one client: 3 in a row
    assert ideal_makespan("async", "upstream", server, 1.0, 10, reps=3) == 3.0
    assert lanes("threading", "matmul", facts(thread_pool=1)) == 1


def test_median_ratio_and_percentile() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        median([])
    assert ratio(5.0, 2.5) == 2.0
    assert math.isnan(ratio(1.0, 0.0))
    assert percentile([5.0, 1.0, 4.0, 2.0, 3.0], 0.5) == 3.0
    assert percentile([float(i) for i in range(1, 21)], 0.95) == 19.0
    assert percentile([], 0.5) is None


def test_mode_urls() -> None:
    assert mode_url("http://h:1/", "blocking", None, {}) == "http://h:1/blocking"
    assert mode_url("http://h:1", "threading", "fib", {"n": "30"}) == "http://h:1/threading/fib?n=30"
    assert mode_url("http://h:1", "async", "count", {"delay": "0.5"}) == "http://h:1/async?delay=0.5"


SIEGE_JSON = """{\t"transactions":\t\t\t          10,
\t"availability":\t\t\t      100.00,
\t"elapsed_time":\t\t\t        4.10,
\t"data_transferred":\t\t        0.00,
\t"response_time":\t\t        2.30,
\t"transaction_rate":\t\t        2.44,
\t"throughput":\t\t\t        0.00,
\t"concurrency":\t\t\t        5.61,
\t"successful_transactions":\t           8,
\t"failed_transactions":\t\t           1,
\t"longest_transaction":\t\t        4.10,
\t"shortest_transaction":\t\t        0.41
}
"""


def test_siege_json_is_found_after_the_first_run_banner_and_before_trailing_noise() -> None:
    banner = (
        "New configuration template added to /root/.siege\nRun siege -C to view the current settings in that file\n"
    )
    parsed = parse_siege(banner + SIEGE_JSON + "{not json}\n")
    assert parsed["elapsed_time"] == 4.10 and parsed["transactions"] == 10
    with pytest.raises(StepError):
        parse_siege("siege aborted due to excessive socket failure\n")
    with pytest.raises(StepError):
        parse_siege('{"unrelated": 1}')


def test_summary_row_counts_http_errors_as_failures_and_divides_by_the_ideal() -> None:
    plan = {
        "name": "processing",
        "url": "http://h:1/processing",
        "mode": "processing",
        "workload": "count",
        "params": {"n": 20_000_000},
        "server": facts(),
        "solo_s": 0.4,
        "solo_samples_s": [0.41, 0.4, 0.39],
        # /stats' sums of the runs' CPU seconds and runs, before and after siege: 10 runs of 0.3 s.
        "cpu_before": [1.0, 4],
        "cpu_after": [4.0, 14],
    }
    row = summary_row(plan, parse_siege(SIEGE_JSON), concurrency=10, reps=1)
    assert list(row)[: len(ROW_KEYS)] == list(ROW_KEYS)
    assert row["transactions"] == 10
    assert row["failed"] == 3  # 1 socket failure + 2 replies that were not successful
    assert row["ideal_s"] == 2.0  # ceil(10 / 2 workers) x 0.4 s
    assert row["ratio"] == 2.05
    assert row["cpu_ideal_s"] == 1.5 and row["cpu_ratio"] == pytest.approx(4.1 / 1.5, abs=0.001)  # 5 x 0.3 s
    assert (row["elapsed_s"], row["mean_s"], row["shortest_s"], row["longest_s"]) == (4.1, 2.3, 0.41, 4.1)
    assert row["lanes"] == 2 and row["cores"] == 2


def test_tables_show_missing_values_as_a_dash() -> None:
    rows = [
        {"endpoint": "blocking", "elapsed_s": 4.0, "mean_s": 2.2, "shortest_s": 0.4, "longest_s": 4.0,
         "transactions": 10, "failed": 0, "ideal_s": 4.0, "ratio": 1.0},
        {"endpoint": "async", "elapsed_s": 1.01, "mean_s": 1.0, "shortest_s": 1.0, "longest_s": 1.01,
         "transactions": 10, "failed": 0, "ideal_s": None, "ratio": float("nan")},
    ]  # fmt: skip
    lines = text_table(rows).splitlines()
    assert lines[0].split() == ["endpoint", "elapsed", "s", "mean", "s", "shortest", "s", "longest", "s",
                                "trans", "failed", "ideal", "s", "ratio", "cpu", "ratio"]  # fmt: skip
    assert lines[2].split() == ["blocking", "4.00", "2.20", "0.40", "4.00", "10", "0", "4.00", "1.00", "-"]
    assert lines[3].split()[-3:] == ["-", "-", "-"]
    assert len({len(line) for line in lines[:3]}) == 1  # aligned columns
    markdown = markdown_table(rows).splitlines()
    assert markdown[0].count("|") == len(ROW_KEYS) + 2  # and cpu ratio
    assert markdown[2].startswith("| blocking | 4.00 |")


def test_a_ratio_below_one_is_never_shown_bare() -> None:
    # t timed on a slow moment: the nominal ratio is starred and explained; the burst's own is beside it.
    slow = {"endpoint": "threading", "elapsed_s": 2.47, "ideal_s": 3.65, "ratio": 0.68, "cpu_ratio": 1.04}
    fine = {"endpoint": "processing", "elapsed_s": 1.8, "ideal_s": 1.68, "ratio": 1.07, "cpu_ratio": 1.02}
    lines = text_table([slow, fine]).splitlines()
    assert "0.68*" in lines[2] and "1.04" in lines[2] and "*" not in lines[3]
    assert lines[4].startswith("* threading: ratio 0.68 is below 1 because t was timed on a slower moment")
    assert "own CPU time it took 1.04x" in lines[4] and len(lines) == 5
    assert "0.68\\*" in markdown_table([slow]) and "* threading: ratio 0.68" in markdown_table([slow])
    assert len(text_table([fine]).splitlines()) == 3  # nothing to explain


def test_results_folders_never_collide(tmp_path: Any) -> None:
    first, second = new_results_dir("race-", tmp_path), new_results_dir("race-", tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    assert first.name.startswith("race-")

"""bench/lib/rounds.py: rounds in turn, medians and ranges, and the instability warning (made-up numbers)."""

from __future__ import annotations

from bench.lib.rounds import instability, schedule, summarise, table


def test_rounds_alternate_the_endpoints() -> None:
    assert schedule(["processing", "threading"], 2) == [
        (1, "processing"), (1, "threading"), (2, "processing"), (2, "threading")
    ]  # fmt: skip
    assert schedule(["blocking"], 1) == [(1, "blocking")]


def _row(endpoint: str, t: float, elapsed: float, cpu_ratio: float | None = 1.1) -> dict[str, object]:
    return {"endpoint": endpoint, "solo_s": t, "elapsed_s": elapsed, "ideal_s": 5 * t, "ratio": elapsed / (5 * t),
            "cpu_ratio": cpu_ratio}  # fmt: skip


def test_each_figure_gets_its_median_and_range() -> None:
    rows = [_row("processing", 1.0, 5.5), _row("threading", 1.0, 10.0), _row("processing", 1.1, 6.0),
            _row("threading", 1.05, 10.4), _row("processing", 1.05, 5.0, None)]  # fmt: skip
    processing, threading = summarise(rows)
    assert (processing["endpoint"], processing["rounds"], threading["rounds"]) == ("processing", 3, 2)
    assert processing["elapsed_s"] == {"median": 5.5, "min": 5.0, "max": 6.0}
    assert processing["cpu_ratio"] == {"median": 1.1, "min": 1.1, "max": 1.1}  # the round without one left out
    assert processing["unstable"] is None and threading["unstable"] is None  # t within 10 %
    printed = table([processing, threading])
    assert printed.splitlines()[2].split()[:3] == ["processing", "3", "5.5"]
    assert "warning" not in printed


def test_a_host_whose_t_moved_more_than_15_percent_is_called_unstable() -> None:
    [entry] = summarise([_row("processing", 0.5, 3.1), _row("processing", 0.98, 6.2), _row("processing", 0.55, 3.2)])
    assert entry["unstable"] == (
        "the host was unstable during processing: t ranged 0.5-0.98 s (87% of its median) over 3 rounds; "
        "trust the cpu ratio over the ratio"
    )
    assert table([entry]).splitlines()[-1] == f"warning: {entry['unstable']}"
    assert instability("x", {"median": 1.0, "min": 0.93, "max": 1.07}, 3) is None  # 14 %: steady enough
    assert instability("x", {"median": 1.0, "min": 0.5, "max": 2.0}, 1) is None  # one round says nothing

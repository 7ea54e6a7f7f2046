"""bench/lib/findings.py: the sentences bench/compare.py writes from the measured rows: they must follow the numbers."""

from __future__ import annotations

from typing import Any

import pytest

from bench.compare import median_rounds, rounds_lines
from bench.lib import findings


def row(server: str, config: str, elapsed: float, *, workload: str = "count", spread: tuple[int, ...] = (10,),
        ping: float | None = 100.0, mode: str = "blocking", processes: int | None = 1, threads: int | None = 1,
        concurrency: int = 10, delay: str = "1.0", ratio: float = 1.0) -> dict[str, Any]:  # fmt: skip
    return {
        "server": server, "config": config, "workload": workload, "elapsed_s": elapsed, "ratio": ratio,
        "spread": {str(1000 + i): n for i, n in enumerate(spread)}, "ping_max_ms": ping, "mode_model": mode,
        "processes": None if server == "lab" else processes, "threads": None if server == "lab" else threads,
        "concurrency": concurrency, "params": {"delay": delay} if workload == "upstream" else {"n": "20000000"},
        "peak_threads": 3, "rss_mb": 100.0,
    }  # fmt: skip


@pytest.fixture(autouse=True)
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(findings, "cpu_count", lambda: 2)


@pytest.mark.parametrize("finder", [findings.side_by_side, findings.processes,
                                    findings.grid, findings.coroutines])  # fmt: skip
def test_no_rows_no_findings(finder: Any) -> None:
    assert finder([]) == []


def test_processes_beat_threads_only_when_every_spread_row_was_faster() -> None:
    spread = row("uwsgi", "-p 2", 3.0, spread=(5, 5), ping=2000.0, processes=2)
    single = row("uwsgi", "-p 1 --threads 10", 6.0, ping=5000.0, mode="threading", threads=10)
    [cpu, _ping] = findings.side_by_side([spread, single])
    assert "beat every one" in cpu and "overlap" not in cpu
    slow = row("lab", "--processes 2 --accept all, /threading", 7.0, spread=(9, 1), mode="threading")
    [cpu, _ping] = findings.side_by_side([spread, single, slow])
    assert "overlap" in cpu and "beat" not in cpu and "--accept all" in cpu.split("overlap")[1]


def test_the_ping_sentence_credits_the_event_loop_only_where_it_hands_work_out() -> None:
    quiet_peer = row("uwsgi", "-p 2", 3.0, spread=(5, 5), ping=40.0, processes=2)
    busy = row("gunicorn", "sync -w 1", 6.0, ping=45.0)
    [_cpu, ping] = findings.side_by_side([quiet_peer, busy])
    assert "40 ms" in ping and "hands the work out" not in ping
    assert "45 ms" not in ping  # within 10x of the calm one: nothing to say about it
    lab = row("lab", "/processing", 3.5, spread=(5, 5), ping=12.0, mode="processing")
    unanswered = row("lab", "/blocking", 7.0, ping=None)
    stuck = row("uwsgi", "-p 1 --threads 10", 7.0, ping=6000.0, mode="threading", threads=10)
    [_cpu, ping] = findings.side_by_side([quiet_peer, lab, unanswered, stuck])
    assert "12 ms at worst on lab /processing, whose event loop only hands the work out" in ping
    assert "6.0 s on uwsgi -p 1 --threads 10" in ping


def test_waits_held_at_once_are_told_from_waits_taken_in_rounds() -> None:
    rows = [row("lab", "/async", 1.02, workload="upstream", mode="async", ping=5.0),
            row("uwsgi", "-p 1", 10.04, workload="upstream", ping=9000.0)]  # fmt: skip
    [waiting] = findings.side_by_side(rows)
    assert "lab /async held them all at once" in waiting and "uwsgi -p 1 took 10.04 s (10 rounds)" in waiting


def test_processes_finding_follows_the_fastest_count() -> None:
    rows = [row("uwsgi", f"-p {n}", t, processes=n) for n, t in ((1, 6.0), (2, 3.2), (3, 4.0), (4, 4.4))]
    [found] = findings.processes(rows)
    assert "-p 1 took 6.00 s and -p 2 3.20 s, 1.88x faster" in found and "take turns" in found
    rows = [row("gunicorn", f"sync -w {n}", t, processes=n) for n, t in ((1, 3.0), (2, 3.3))]
    [found] = findings.processes(rows)
    assert "did not help" in found and "faster" not in found and "take turns" not in found


def test_grid_advice_comes_from_the_rows() -> None:
    def grid(p: int, t: int, cpu_s: float, io_s: float, ratio: float) -> list[dict[str, Any]]:
        mode = "threading" if t > 1 else "blocking"
        config, spread = f"-p {p} --threads {t}", (5, 5) if p > 1 else (10,)
        return [row("uwsgi", config, cpu_s, spread=spread, processes=p, threads=t, ratio=ratio, mode=mode),
                row("uwsgi", config, io_s, workload="upstream", processes=p, threads=t, mode=mode)]  # fmt: skip

    rows = (
        grid(1, 1, 6.0, 10.0, 1.0) + grid(1, 4, 6.2, 3.0, 1.02) + grid(2, 1, 3.1, 5.0, 1.0) + grid(2, 4, 3.3, 2.0, 1.05)
    )
    found = findings.grid(rows)
    assert "the best with 2 took 3.10 s" in found[0]
    assert "the GIL lets one of them compute" in found[1]
    assert found[-1].startswith("So: for computing, 2 processes, one thread each")
    assert "for 10 waits at once" not in found[-1]  # 8 threads in all still took two rounds
    rows += grid(1, 10, 6.1, 1.01, 1.0)
    assert "for 10 waits at once, 10 threads in all (-p 1 --threads 10)" in findings.grid(rows)[-1]


def test_coroutines_count_the_rounds_threads_need() -> None:
    rows = [row("uwsgi", "-p 1 --gevent 1000", 1.3, workload="upstream", mode="async", concurrency=200),
            row("uwsgi", "-p 1 --threads 10", 20.1, workload="upstream", mode="threading", threads=10,
                concurrency=200)]  # fmt: skip
    found = findings.coroutines(rows)
    assert "uwsgi -p 1 --gevent 1000 held every wait at once" in found[1]
    assert "ceil(200/10) = 20 rounds: 20.10 s (20 measured)" in found[2]


def test_with_rounds_the_findings_read_each_configuration_s_median_round() -> None:
    rounds = [{**row("uwsgi", "-p 2", elapsed), "round": n} for n, elapsed in ((1, 3.0), (2, 9.0), (3, 4.0))]
    rounds += [{**row("lab", "/processing", 5.0), "round": 1}]
    medians = median_rounds(rounds)
    assert [(r["server"], r["elapsed_s"], r["round"]) for r in medians] == [("uwsgi", 4.0, 3), ("lab", 5.0, 1)]
    lines = rounds_lines(rounds)
    assert lines[1] == "## Over the rounds" and "uwsgi -p 2 count c=10" in "\n".join(lines)
    assert rounds_lines([{**row("lab", "/processing", 5.0), "round": 1}]) == []  # one round: nothing to add

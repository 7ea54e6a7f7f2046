"""uWSGI and gunicorn beside the lab: real servers, started as users start them, raced by bench/compare.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.compare import ROW_KEYS
from bench.lib.peers import Running, uwsgi, uwsgi_stats
from bench.lib.servers import gone, group_members, stop_group
from lab.machine import cpu_count
from tests.bench_helpers import Tracked, is_png
from tests.lab_server import copies, get
from tests.procs import wait_for

pytestmark = pytest.mark.timeout(400)


def races(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Each row's race (its envelopes), by (server, config)."""
    found = {}
    for path in out.glob("race-*.json"):
        doc = json.loads(path.read_text())
        found[(doc["row"]["server"], doc["row"]["config"])] = doc
    return found


def test_a_quick_comparison_races_real_peers_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "compare"
    with Tracked([sys.executable, "-m", "bench.compare", "--quick", "--out", str(out)]) as run:
        stdout, stderr = run.communicate(timeout=360)
        assert run.process.returncode == 0, stderr[-3000:]
        assert run.survivors() == []  # every uWSGI master and worker, every gunicorn arbiter and worker, the upstream
    rows: list[dict[str, Any]] = json.loads((out / "compare.json").read_text())
    assert {row["server"] for row in rows} == {"lab", "uwsgi", "gunicorn"}
    for row in rows:
        assert set(ROW_KEYS) <= set(row), set(ROW_KEYS) - set(row)
        assert row["concurrency"] == 10 and row["failed"] == 0 and row["ratio"] > 0
        assert sum(row["spread"].values()) == 10 and row["peak_processes"] >= 1 and row["rss_mb"] > 0
    by_config = races(out)

    def workers(server: str, config: str) -> set[tuple[int, str]]:
        bodies = [r["body"] for r in by_config[(server, config)]["responses"]]
        assert all(body["mode"] == "wsgi" and body["workload"] == "count" for body in bodies)
        return {(body["worker"]["pid"], body["worker"]["thread"]) for body in bodies}

    # uWSGI -p N (N = cores, 2 here): the requests ran in N worker processes (uWSGI's worker ids 1..N), and the
    # sampler saw its master beside them.
    p_n = f"-p {cpu_count()}"
    assert len({pid for pid, _ in workers("uwsgi", p_n)}) == cpu_count()
    task_ids = {r["body"]["server"]["task_id"] for r in by_config[("uwsgi", p_n)]["responses"]}
    assert task_ids == set(range(1, cpu_count() + 1))
    assert by_config[("uwsgi", p_n)]["row"]["peak_processes"] == cpu_count() + 1
    # gunicorn gthread: one process, several of its threads.
    gthread = workers("gunicorn", "gthread -w 1 --threads 10")
    assert len({pid for pid, _ in gthread}) == 1 and len(gthread) >= 2
    # uwsgitop's view: the stats socket counted both workers serving the burst (its /ping probes too), each
    # busy for part of it (one thread each: at most all of it).
    findings = json.loads((out / "findings.json").read_text())
    view = next(v for v in findings["workers"] if v["config"] == p_n)
    spread = by_config[("uwsgi", p_n)]["row"]["spread"]
    assert {str(w["pid"]) for w in view["workers"]} == set(spread)
    assert all(w["requests"] >= spread[str(w["pid"])] and 0 < w["busy"] <= 1.1 for w in view["workers"]), view
    assert findings["findings"] and "## Findings" in (out / "compare.md").read_text()
    assert is_png(out / "compare.png")
    assert "wrote" in stdout and "uwsgi" in stdout


def test_a_configuration_s_process_and_thread_counts_override_its_file(tmp_path: Path) -> None:
    # The counts come after the file on the command line, so they win: uwsgi-threads.ini says 10 threads, and the
    # grid's "-p 2 --threads 1" must run 2 workers of one thread each (uWSGI's stats socket lists each one's cores).
    setup = uwsgi("uwsgi-threads.ini", "-p 2 --threads 1", "blocking", 2, 1, serves=frozenset({"cpu"}))
    server = Running.start(setup, tmp_path, upstream="http://127.0.0.1:9")  # no request here waits on it
    try:
        assert server.stats_socket is not None
        stats = uwsgi_stats(server.stats_socket)
        assert stats is not None
        assert [len(worker["cores"]) for worker in stats["workers"]] == [1, 1]
    finally:
        assert server.stop() == []
    assert not server.stats_socket.parent.exists()  # its private folder goes with it


def test_each_uwsgi_worker_times_its_runs_by_its_own_thread_not_its_master_s(tmp_path: Path) -> None:
    # uWSGI's master imports the app (and opens its thread's schedstat file, workloads/clocks.py) before it forks
    # the workers in C, running none of Python's after-fork hooks, which drop that file in a child: each worker read
    # its master's run queue as its own. A worker's first timed run now opens its own and drops the master's.
    setup = uwsgi("uwsgi-processes.ini", "-p 2", "blocking", 2, serves=frozenset({"cpu"}))
    server = Running.start(setup, tmp_path, upstream="http://127.0.0.1:9")
    try:
        for url in copies(f"{server.url}/wsgi/count?n=1000", 6):
            assert get(url).status == 200
        assert server.stats_socket is not None
        stats = uwsgi_stats(server.stats_socket)
        assert stats is not None
        pids = [worker["pid"] for worker in stats["workers"]]
        opened = {pid: _schedstat_files(pid) for pid in pids}
        own = {pid: [path for path in paths if path.startswith(f"/proc/{pid}/")] for pid, paths in opened.items()}
        assert len(pids) == 2 and any(own.values()), opened  # (a worker that has timed no run holds its master's)
        assert all(own[pid] == paths for pid, paths in opened.items() if own[pid]), opened
    finally:
        assert server.stop() == []


def _schedstat_files(pid: int) -> list[str]:
    """The schedstat files process `pid` holds open."""
    folder = Path(f"/proc/{pid}/fd")
    links = [os.readlink(fd) for fd in folder.iterdir() if fd.is_symlink()]
    return [link for link in links if link.endswith("/schedstat")]


def test_a_stopped_group_is_gone_when_stop_group_returns_even_one_that_ignores_sigterm() -> None:
    # A leader and a child that both ignore SIGTERM: the SIGKILL path, whose processes take a moment to end.
    script = "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nos.fork()\ntime.sleep(60)\n"
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        assert wait_for(lambda: len(group_members(leader.pid)) == 2, 30)  # both have started
        stop_group(leader.pid, grace=0.5, reap=leader.poll)
        assert group_members(leader.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_a_group_is_gone_only_after_two_empty_scans_in_a_row() -> None:
    scans = iter([[1], [], [1], [], []])  # one empty scan, then a process again (a respawn the scan missed)
    assert gone(lambda: next(scans), 10)
    assert next(scans, "spent") == "spent"  # it needed all five
    assert not gone(lambda: [1], 0.3)

"""bench.size's warnings (bench/lib/sizing/checks.py), its load plan and summary (verify.py) and its open load
(traffic.open_rate), on fixtures: a cgroup tree, threadpoolctl's rows, rounds of a sweep, a server that never
answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.lib.sizing import checks, traffic, verify
from bench.lib.sizing.model import Point
from bench.lib.sizing.points import PREDICTED, SYNC_RULE, Swept
from lab.machine import Cores, read_cores

QUIET = Cores(visible=2, affinity=2, quota=None, quota_source="no cgroup CPU controller")


def _cgroup_v2(tmp_path: Path, cpu_max: str) -> tuple[Path, Path]:
    """A cgroup v2 tree whose one service has `cpu_max` in its cpu.max, and this process a member of it."""
    root = tmp_path / "cgroup"
    (root / "lab.slice" / "web.service").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "lab.slice" / "web.service" / "cpu.max").write_text(cpu_max)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/lab.slice/web.service\n")
    return root, proc


def test_a_cpu_quota_read_from_the_cgroup_tree_is_a_warning_naming_its_file_and_the_cores_to_size_by(
    tmp_path: Path,
) -> None:
    cores = read_cores(*_cgroup_v2(tmp_path, "50000 100000\n"))  # half a core, below any affinity
    [warning] = checks.quota(cores)
    assert "a CPU quota of 0.5 cores" in warning and "cpu.max" in warning
    assert f"size by 1, not by os.cpu_count() = {cores.visible}" in warning


def test_no_quota_in_the_cgroup_tree_is_no_quota_warning(tmp_path: Path) -> None:
    cores = read_cores(*_cgroup_v2(tmp_path, "max 100000\n"))
    assert cores.quota is None
    assert not [w for w in checks.quota(cores) if "quota" in w]


def test_an_affinity_below_the_host_cpus_is_a_warning() -> None:
    [warning] = checks.quota(Cores(visible=8, affinity=2, quota=None, quota_source="none"))
    assert "may run on 2 of the host's 8 CPUs" in warning


def _blas(threads: int, api: str = "openblas") -> dict[str, Any]:
    return {"user_api": "blas", "internal_api": api, "num_threads": threads}  # (threadpoolctl's row)


@pytest.mark.parametrize(
    ("pools", "processes", "warned"),
    [
        ([_blas(2)], 2, ["openblas runs 2 threads in each process: x 2 processes = 4 on 2 usable cores; cap it at 1"]),
        ([_blas(2)], 1, []),  # 2 threads on 2 cores: the cores, not more
        ([_blas(1)], 2, []),  # 1 thread a process: one per core
        # The same library seen twice: one warning.
        ([_blas(4), _blas(4)], 1, ["openblas runs 4 threads in each process: x 1 processes = 4 on 2 usable cores"]),
        ([_blas(4, "mkl"), {"user_api": "openmp", "num_threads": 3}], 1, ["mkl runs 4", "openmp runs 3"]),
        (None, 4, []),  # threadpoolctl not installed where the app runs
    ],
)
def test_blas_threads_over_the_usable_cores_are_a_warning_each(
    pools: list[dict[str, Any]] | None, processes: int, warned: list[str]
) -> None:
    found = checks.native_pools(pools, processes, QUIET)
    assert len(found) == len(warned) and all(w.startswith(start) for w, start in zip(found, warned, strict=True))


def test_a_pool_created_before_a_fork_is_a_warning_for_the_app_and_for_the_forking_parent() -> None:
    app, parent = checks.before_fork({"threads": 3, "children": 1}, [1, None, 4])
    assert "the app starts 2 thread(s) and 1 process(es) when it is imported" in app
    assert "a forking parent ran 4 threads" in parent
    assert checks.before_fork({"threads": 1, "children": 0}, [1, None]) == []
    assert checks.before_fork({}, []) == []  # a lab route: nothing imported beforehand, no master read


def _swept(processes: int, threads: int, role: str = PREDICTED) -> Swept:
    return Swept(Point(processes, threads), (role,))


def test_the_plan_keeps_every_thread_busy_holds_twice_what_littles_law_says_and_offers_90_percent() -> None:
    points = [_swept(2, 4), _swept(5, 1, SYNC_RULE)]
    # 100/s at 50 ms alone: 5 in flight by Little's law, 10 held; 8 threads to keep busy.
    plan = verify.plan_for(points, 100.0, 50.0, quick=True, rounds=None, users=None, rate=None, seconds=None)
    assert plan == verify.Plan(rounds=1, users=10, closed_s=2.0, warmup_s=0.5, rate=90.0, open_s=2.0, in_flight=90)
    # Slow requests: windows 20 requests long (30 s at most), a warm-up of two; not quick: two rounds.
    slow = verify.plan_for(points, 10.0, 1000.0, quick=False, rounds=None, users=None, rate=None, seconds=None)
    assert (slow.rounds, slow.users, slow.closed_s, slow.warmup_s, slow.in_flight) == (2, 20, 20.0, 2.0, 20)
    assert verify.plan_for(points, 1e6, 50.0, quick=True, rounds=None, users=None, rate=None, seconds=None).users == (
        verify.MAX_USERS
    )
    asked = verify.plan_for(points, 100.0, 50.0, quick=True, rounds=3, users=7, rate=12.4, seconds=1.5)
    assert (asked.rounds, asked.users, asked.rate, asked.closed_s, asked.open_s, asked.in_flight) == (
        3, 7, 12.4, 1.5, 1.5, 12)  # fmt: skip


def _row(label: str, number: int, rps: float, *, uss_mb: float = 40.0, failed: int = 0, shed: int = 0) -> Any:
    closed = {"rps": rps, "p50_ms": 10.0 * number, "p95_ms": 20.0 * number, "failed": failed, "cpu_ms": 5.0,
              "switches": 2.0, "idle_pct": None, "memory": {"uss_mb": uss_mb, "threads": 3}}  # fmt: skip
    opened = {"rps": rps / 2, "p95_ms": 30.0, "failed": 1, "shed": shed}
    return {"point": label, "round": number, "closed": closed, "open": opened, "master_threads": None}


def test_the_summary_takes_the_median_of_each_points_rounds_its_range_and_its_last_memory() -> None:
    points = [_swept(1, 4), _swept(2, 1), _swept(3, 1)]  # 3 x 1 never measured: left out
    rows = [_row("1 x 4", 1, 100.0, uss_mb=40.0, failed=2), _row("2 x 1", 1, 50.0, shed=3),
            _row("1 x 4", 2, 120.0, uss_mb=44.0), _row("1 x 4", 3, 90.0, uss_mb=41.0, shed=1)]  # fmt: skip
    summary = verify.summarise(points, rows)
    assert list(summary) == ["1 x 4", "2 x 1"]
    four = summary["1 x 4"]
    assert (four["closed_rps"], four["closed_rps_range"], four["open_rps"]) == (100.0, [90.0, 120.0], 50.0)
    assert (four["closed_p50_ms"], four["closed_p95_ms"], four["rounds"]) == (20.0, 40.0, 3)
    assert (four["failed"], four["shed"]) == (2 + 3, 1)  # every round's, closed and open
    assert four["memory"]["uss_mb"] == 41.0 and four["idle_pct"] is None  # the last round's; nothing sampled
    assert summary["2 x 1"]["shed"] == 3 and summary["2 x 1"]["failed"] == 1


def test_a_thread_costs_the_median_uss_slope_between_points_of_the_same_processes() -> None:
    def point(uss_mb: float, threads: int) -> dict[str, Any]:
        return {"memory": {"uss_mb": uss_mb, "threads": threads}}

    # 1 x 1 -> 1 x 4: 6 MB for 3 more live threads; 1 x 1 -> 1 x 8: 20 MB for 8; 1 x 4 -> 1 x 8: 14 MB for 5.
    summary = {"1 x 1": point(50, 3), "1 x 4": point(56, 6), "1 x 8": point(70, 11), "3 x 1": point(150, 9)}
    assert verify.thread_memory_mb(summary) == 2.5  # the median of 2.0, 2.5 and 2.8
    assert verify.thread_memory_mb({"1 x 1": point(50, 3), "2 x 2": point(90, 8)}) is None  # no pair to compare
    # A point that did not start more live threads (its pool lazy) tells nothing.
    assert verify.thread_memory_mb({"1 x 1": point(50, 3), "1 x 4": point(52, 3)}) is None


class _Answers(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_an_open_rate_sends_its_arrivals_on_a_schedule_and_times_each_from_when_it_was_due(answering: str) -> None:
    tally = traffic.open_rate(answering, 20.0, 1.0, in_flight=20)
    assert (len(tally.ok), tally.failed, tally.shed, tally.window_s) == (20, 0, 0, 1.0)
    dues = sorted(a.due for a in tally.answers)
    # Due k / rate after the first, however late the loop ran; each answer came after it was due.
    assert [round(d - dues[0], 6) for d in dues] == [round(k / 20.0, 6) for k in range(20)]
    assert all(a.done >= a.due for a in tally.answers)


def test_an_open_rate_sheds_the_arrivals_beyond_its_in_flight_while_the_server_answers_none() -> None:
    # Listens (the kernel completes each handshake) but never answers: the first 3 stay in flight until their
    # limit, long after the 10 arrivals' half second; the other 7 are shed.
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        tally = traffic.open_rate(url, 20.0, 0.5, in_flight=3, limit_s=5.0)
    assert (tally.shed, len(tally.answers), tally.failed, tally.ok) == (7, 3, 3, [])
    assert all(a.status == 0 and a.seconds >= 5.0 for a in tally.answers)

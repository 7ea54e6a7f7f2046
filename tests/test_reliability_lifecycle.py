"""Process lifecycle: graceful stops finish in-flight work; dead children are replaced and counted."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lab import ROOT
from lab.errors import LabError
from lab.instruments.stats import RequestStats
from lab.web.lifecycle import ClientGone, Lifecycle, RequestLife
from tests.bench_helpers import Tracked
from tests.conftest import StartServer
from tests.envelopes import assert_error
from tests.lab_server import LabServer, get, pool_stats
from tests.procs import STALL_S, wait_for
from tests.twins import twin


@pytest.mark.parametrize(
    ("args", "sig", "group"),
    [
        ((), signal.SIGTERM, False),
        ((), signal.SIGINT, True),
        (("--processes", "2"), signal.SIGTERM, False),
        (("--processes", "2"), signal.SIGINT, True),
    ],
    # Ctrl-C in a terminal signals the whole process group: every child gets
    # SIGINT itself *and* a SIGTERM forwarded by the parent.
    ids=["single-SIGTERM", "single-ctrl-c", "forked-SIGTERM", "forked-ctrl-c"],
)
def test_in_flight_requests_finish_before_the_server_stops(start_server: StartServer, args, sig, group) -> None:
    lab = start_server("--process-pool", "1", *args)
    with ThreadPoolExecutor(4) as pool:  # 3 requests + the stop
        jobs = [
            # Long enough that the stop surely lands while all three run, on a slow host too.
            pool.submit(get, f"{lab.url}/processing/sleep?seconds=4"),
            pool.submit(get, f"{lab.url}/threading/sleep?seconds=4"),
            pool.submit(get, f"{lab.url}/async?delay=4"),
        ]
        assert wait_for(lambda: _active(lab) == 3)
        stopped = pool.submit(lab.terminate, sig, group=group)
        replies = [job.result() for job in jobs]
        assert stopped.result() == 0
    assert [r.status for r in replies] == [200, 200, 200]
    in_flight = [int(n) for n in re.findall(r"stopping: (\d+) requests in flight", lab.log())]
    assert sum(in_flight) == 3
    assert lab.survivors() == []


def _active(lab) -> int:
    stats = get(f"{lab.url}/stats").json()
    return int(sum(p["active_requests"] for p in stats["processes"])) - 1  # minus this /stats request


@pytest.mark.parametrize("args", [(), ("--processes", "2")], ids=["single", "forked"])
def test_a_stop_during_start_up_is_prompt(tmp_path: Path, args: tuple[str, ...]) -> None:
    lab = LabServer(["--process-pool", "2", *args], tmp_path / "server.log")
    try:
        # The socket is bound; the process pool is still warming up. The signal lands anywhere
        # from just before the fork to the children's start: each must be a clean stop.
        lab.start(ready=False)
        assert lab.terminate(timeout=10) == 0
        assert "stopped during start-up" in lab.log()
        assert lab.survivors() == []
    finally:
        lab.cleanup()


def test_grace_period_bounds_the_stop(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--grace", "1")
    with twin(20) as twin_sleeps, ThreadPoolExecutor(1) as pool:
        job = pool.submit(get, f"{lab.url}/processing/sleep?seconds=20")
        assert wait_for(lambda: _active(lab) >= 1)
        assert lab.terminate(signal.SIGTERM, timeout=STALL_S) == 0
        # The stop did not wait for the job's end: the lab exited while the job's twin, begun first, still slept.
        assert twin_sleeps()
        reply = job.result()
    # Its request got the 503 (a job that ended would be a 200), and the grace period ran out with it in flight.
    assert_error(reply, 503, "shutting down")
    assert reply.headers["Retry-After"] == "1"
    assert "grace period over: 1 requests get 503" in lab.log()
    assert lab.survivors() == []


@pytest.mark.parametrize("mode", ["threading", "processing"])
def test_a_job_that_outlives_its_request_does_not_outlive_the_grace_period(
    start_server: StartServer, mode: str
) -> None:
    # The job gets its 504 after 1 s but runs on (a thread cannot be stopped;
    # a process job whose client left is not cancelled once it has started).
    lab = start_server("--thread-pool", "1", "--process-pool", "1", "--job-timeout", "1", "--grace", "2")
    # The job's twin (tests/twins.py), begun before it, still sleeps once the lab has exited.
    with twin(25) as twin_sleeps:
        if mode == "threading":
            assert get(f"{lab.url}/threading/sleep?seconds=25").status == 504
        else:
            host, port = lab.url.removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port))) as sock:  # a client that leaves mid-job
                sock.sendall(b"GET /processing/sleep?seconds=25 HTTP/1.1\r\nHost: localhost\r\n\r\n")
                assert wait_for(lambda: _pool_running(lab, mode) == 1)
        assert _pool_running(lab, mode) == 1  # the job still runs without its request
        assert lab.terminate(timeout=STALL_S) == 0
        assert twin_sleeps(), "the lab exited only after the job's 25 s"
    assert "running pool jobs are stopped" in lab.log()
    assert lab.survivors() == []


def _pool_running(lab: LabServer, mode: str) -> int:
    return int(pool_stats(lab.url, mode)["running"])


def test_a_dead_child_is_replaced_and_its_restart_shows_in_stats(start_server: StartServer) -> None:
    lab = start_server("--processes", "2", "--process-pool", "1")
    before = {p["task_id"]: p for p in get(f"{lab.url}/stats").json()["processes"]}
    victim = before[0]["pid"]
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        stats = get(f"{lab.url}/stats").json()["processes"]
        return any(p["task_id"] == 0 and p["pid"] != victim and p["restarts"] == 1 for p in stats)

    assert wait_for(replaced)
    after = {p["task_id"]: p for p in get(f"{lab.url}/stats").json()["processes"]}
    assert after[1]["pid"] == before[1]["pid"] and after[1]["restarts"] == 0
    assert after[0]["alive"] is True
    assert f"child 0 (pid {victim}) killed by signal 9, restarting" in lab.log()
    assert lab.terminate() == 0
    assert lab.survivors() == []  # nor the dead child's pool worker


@pytest.mark.parametrize("args", [(), ("--processes", "2")], ids=["single", "forked"])
def test_a_sigkilled_server_leaves_no_orphans(start_server: StartServer, args) -> None:
    lab = start_server("--process-pool", "1", "--dask-workers", "1", *args)
    assert get(f"{lab.url}/distributed/sleep?seconds=0").status == 200  # an embedded Dask cluster too
    started = lab.remember_descendants()
    assert len(started) >= 3
    os.kill(lab.pid, signal.SIGKILL)  # no handler runs: the children must notice by themselves
    assert lab.survivors() == []


# server.py forked, except that each child kills its parent before it starts watching it: as a child forked
# while a stop's killpg went by, which the signal missed and whose parent then died.
PARENT_GONE_FIRST = """
import os, signal, sys, time
from lab.native import cap_native_threads
cap_native_threads()
import lab.serve.main
from lab.serve.supervisor import Supervisor
from handlers.app import make_app
in_child = Supervisor._in_child
supervisor = os.getpid()
def parent_gone_first(self, *args):
    try:
        os.kill(supervisor, signal.SIGKILL)
    except ProcessLookupError:  # (the other child's was first)
        pass
    while os.getppid() == supervisor:
        time.sleep(0.01)
    return in_child(self, *args)
Supervisor._in_child = parent_gone_first
lab.serve.main.main(make_app, sys.argv[1:])
"""

# The embedded upstream started as server.py starts it, by a process that is gone before it looks.
UPSTREAM_PARENT_GONE_FIRST = """
import os, socket, subprocess, sys
sock = socket.create_server(("127.0.0.1", 0))
argv = ["--fd", str(sock.fileno()), "--parent", str(os.getpid())]
subprocess.Popen([sys.executable, "-m", "lab.modes.upstream.server", *argv], pass_fds=[sock.fileno()])
"""


def test_a_forked_child_whose_parent_died_before_it_looked_stops() -> None:
    argv = [sys.executable, "-c", PARENT_GONE_FIRST, "--port", "0", "--processes", "2", "--process-pool", "1"]
    with Tracked(argv) as run:
        run.communicate(timeout=60)  # its output ends when the orphaned child does: a timeout, if it serves on
        assert run.process.returncode == -signal.SIGKILL
        assert run.survivors() == []


def test_an_upstream_on_an_inherited_socket_must_be_told_whom_it_goes_with() -> None:
    done = subprocess.run([sys.executable, "-m", "lab.modes.upstream.server", "--fd", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "--fd needs --parent" in done.stderr


def test_an_upstream_whose_server_died_before_it_looked_stops() -> None:
    with Tracked([sys.executable, "-c", UPSTREAM_PARENT_GONE_FIRST]) as run:
        _, stderr = run.communicate(timeout=60)  # (as above: the upstream holds the output open)
        assert run.process.returncode == 0 and stderr == ""
        assert run.survivors() == []


# server.py, except that the stop arrives the moment stop signals are deferred:
# before binding, the upstream and any fork. A single server can only learn of it
# from what serve() finds noted; a forked one's parent forks no child at all
# (lab/serve/supervisor.py), and a child, stopped the same way, finds its own.
STOP_AT_ONCE = """
import os, signal, sys
from lab.native import cap_native_threads
cap_native_threads()
import lab.serve.main
from lab.serve.signals import StopSignals
from handlers.app import make_app
defer = StopSignals.defer
def defer_then_stop(self):
    defer(self)
    os.kill(os.getpid(), signal.SIGTERM)
StopSignals.defer = defer_then_stop
lab.serve.main.main(make_app, sys.argv[1:])
"""


@pytest.mark.parametrize("args", [(), ("--processes", "2")], ids=["single", "forked"])
def test_a_stop_noted_before_the_loop_is_replayed_by_serve(args: tuple[str, ...]) -> None:
    argv = [sys.executable, "-c", STOP_AT_ONCE, "--port", "0", "--process-pool", "1", *args]
    with Tracked(argv) as run:
        _, stderr = run.communicate(timeout=60)  # without the replay it would serve on: a timeout
        assert run.process.returncode == 0, stderr
        assert "stopped during start-up" in stderr
        assert run.survivors() == []  # the embedded upstream, any child and pool worker too


# ---------- a request's task, cancelled where it awaits its work ----------


async def _attended(life: RequestLife, cancel: Callable[[asyncio.Task[Any]], None]) -> tuple[str, int]:
    """How `life.attend` of a never-ending wait ends when `cancel` acts on the awaiting task; then its cancelling()."""

    async def awaiting() -> str:
        try:
            await life.attend(asyncio.Event().wait())
        except ClientGone:
            return "client gone"
        except LabError as error:
            return f"{error.status_code}"
        except asyncio.CancelledError:
            return "cancelled"
        finally:
            await asyncio.sleep(0)  # (the task's state at its end, below)
        return "ended"

    task = asyncio.ensure_future(awaiting())
    await asyncio.sleep(0)
    cancel(task)
    outcome = await task
    return outcome, task.cancelling()


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("client gone", ("client gone", 0)),
        ("abandoned", ("503", 0)),
        ("client gone and abandoned", ("client gone", 0)),
        ("cancelled elsewhere", ("cancelled", 1)),
        ("client gone and cancelled elsewhere", ("cancelled", 1)),
    ],
)
def test_the_work_a_request_awaits_is_cancelled_in_its_own_task_and_only_its_own_cancels_are_answered(
    how: str, expected: tuple[str, int]
) -> None:
    async def main() -> tuple[str, int]:
        lifecycle = Lifecycle(RequestStats(), lambda active: None)
        life = lifecycle.begin(object())

        def cancel(task: asyncio.Task[Any]) -> None:
            if "client gone" in how:
                life.client_gone()
            if "abandoned" in how:
                lifecycle.abandon()
            if "elsewhere" in how:
                task.cancel()

        outcome = await _attended(life, cancel)
        assert not lifecycle.jobs  # it holds nothing once it has answered
        return outcome

    assert asyncio.run(main()) == expected

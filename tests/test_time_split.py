"""Where a run's time goes: computing, waiting for a core, blocked, and how much of blocked was the GIL.

Structure, not stopwatch: each test compares parts of the same runs' own time,
in a setting built so that one part dominates by a wide margin (each says how
wide, measured on the project's 2-core machine with 0 to 6 busy loops beside it).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lab import ROOT
from lab.instruments.cores import CoreMeter
from tests.lab_server import LabServer, copies, get_many
from tests.procs import schedstat_files_open, wait_for
from workloads import clocks


def burst(server: LabServer, mode: str, n: int, count: int = 3_000_000) -> list[dict[str, Any]]:
    """`n` copies of a `count` run at once; each one's timing."""
    replies = get_many(copies(f"{server.url}/{mode}/count?n={count}", n))
    assert [r.status for r in replies] == [200] * n
    return [r.json()["timing"] for r in replies]


def shares(timings: list[dict[str, Any]]) -> dict[str, float]:
    """Each part's share of the runs' summed run_ms."""
    run = sum(t["run_ms"] for t in timings)
    return {part: sum(t[f"{part}_ms"] for t in timings) / run for part in ("cpu", "core_wait", "blocked", "gil_wait")}


@pytest.fixture
def hogs() -> Iterator[None]:
    """A busy-loop process per core: cores, not the GIL, become scarce."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, os.cpu_count() or 2))]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_threads_of_pure_python_wait_mostly_for_the_gil(server: LabServer) -> None:
    # Four threads share one GIL: each holds it about a quarter of the burst, so each is blocked
    # about three times as long as it computes (runs long enough that the requests' staggered
    # arrival leaves them mostly overlapping). Measured 2.2-3.2x with 0-6 busy loops beside it:
    # under load a waiter that wakes for the GIL and finds no core counts as core wait, not
    # blocked, which narrows the gap but cannot close it while most of the burst is four at once.
    timings = burst(server, "threading", 4, count=10_000_000)
    assert all(t["gil_wait_ms"] == t["blocked_ms"] for t in timings)  # a thread that shares its GIL
    split = shares(timings)
    assert split["gil_wait"] > split["cpu"], split


def test_a_process_pool_worker_waits_for_no_gil(server: LabServer) -> None:
    timings = burst(server, "processing", 4)
    assert all(t["gil_wait_ms"] == 0 for t in timings)  # its GIL is its own: no part of blocked is the GIL's
    # Its run was computing or waiting for a core (how much of each depends on what else this
    # machine runs: the suite's other worker, say), and hardly blocked: less than it computed.
    # Measured blocked 0.000 of the run and computing 0.22 or more with 0-4 busy loops beside it;
    # the worst blocked seen anywhere was 0.11 (a sub-interpreter on CI, computing about half).
    split = shares(timings)
    assert split["blocked"] < split["cpu"], split
    # A wait on purpose (a sleep) is its own part, and none of the rest is the GIL's.
    [sleep] = get_many([f"{server.url}/processing/sleep?seconds=0.05"])
    timing = sleep.json()["timing"]
    assert timing["io_wait_ms"] > timing["cpu_ms"] and timing["gil_wait_ms"] == 0, timing


@pytest.mark.usefixtures("hogs")
def test_busy_cores_are_blamed_on_the_cores_not_the_gil(server: LabServer) -> None:
    # A busy loop per core: each worker gets at most half a core (fair share with two workers),
    # so it waits for a core about as long as it computes, and is not blocked. Measured core wait
    # 0.64-0.78 of the run against blocked 0.000, with 2 and 4 busy loops beside it.
    timings = burst(server, "processing", 4)
    assert all(t["gil_wait_ms"] == 0 for t in timings)
    split = shares(timings)
    assert split["core_wait"] > split["blocked"], split


def test_nothing_is_claimed_where_nothing_can_be_told(server: LabServer) -> None:
    # /async's upstream call only waits: nothing computes for it, so no clock is read but the wall's, and
    # all of its run is a wait on purpose (a wait in a thread: tests/test_mix.py).
    [waited] = get_many([f"{server.url}/async?delay=0.01"])
    timing = waited.json()["timing"]
    assert timing["cpu_ms"] is timing["core_wait_ms"] is timing["blocked_ms"] is timing["gil_wait_ms"] is None
    assert timing["io_wait_ms"] == pytest.approx(timing["run_ms"], abs=0.002) and timing["run_ms"] >= 10


def test_blocked_floors_at_zero_and_the_gil_s_part_needs_a_shared_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    assert clocks.blocked_time(1.0, 0.7, 0.2) == pytest.approx(0.1)
    assert clocks.blocked_time(1.0, 1.5, 0.0) == 0.0  # BLAS threads: process CPU above wall time
    assert clocks.blocked_time(1.0, 0.1, None) is None  # no schedstat
    assert clocks.blocked_time(1.0, 0.2, 0.1, 0.6) == pytest.approx(0.1)  # its own waits are not blocked
    assert clocks.blocked_time(1.0, 0.2, 0.1, 0.8) == 0.0
    assert clocks.gil_part(0.1, shared_gil=True) == 0.1  # a thread among threads: the GIL
    assert clocks.gil_part(0.1, shared_gil=False) == 0.0  # alone with its GIL: something else
    assert clocks.gil_part(None, shared_gil=False) is None
    assert clocks.THREAD.shared_gil and not clocks.PROCESS.shared_gil and not clocks.OWN_GIL_THREAD.shared_gil
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert clocks.gil_part(0.1, shared_gil=True) is None  # no GIL at all
    assert clocks.gil_part(0.1, shared_gil=False) is None


def test_the_clocks_read_the_kernels_run_queue() -> None:
    before = clocks.thread_core_wait()
    assert before is not None and before >= 0
    whole = clocks.process_core_wait()
    assert whole is not None and whole >= before  # this thread's wait is part of the process's


def test_a_schedstat_reading_keeps_the_gil() -> None:
    """A pool thread reads its schedstat file twice a job: each reading that let go of the GIL would cost it a
    context switch to take it back behind the event loop (docs/results.md#overhead: 9.9 switches a /threading
    request at c = 10 through os.pread, 5.1 through this). Checked by what is called, not by a count of
    switches, which depends on the host giving a busy thread a core at that moment."""
    kept = clocks._KeptSchedstat()
    try:
        first, then = kept.read(), clocks._parse(os.pread(kept.fd, clocks.SCHEDSTAT_BYTES, 0))
        assert first is not None and then is not None and first <= then  # the same counters, read the same way
        assert clocks._READER is not None  # (this interpreter loads ctypes)
        closure = getattr(kept._read, "__closure__", None) or ()
        preads = [cell.cell_contents for cell in closure if hasattr(cell.cell_contents, "_flags_")]  # ctypes functions
        assert len(preads) == 1 and getattr(preads[0], "__name__", None) == "pread64"
        # A PyDLL function's flag: the GIL is held through the call (ctypes docs, "PyDLL").
        assert preads[0]._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]
    finally:
        os.close(kept.fd)
        kept.fd = -1


def test_a_schedstat_reading_falls_back_to_os_pread_where_ctypes_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clocks, "_READER", None)  # as in a sub-interpreter of Python 3.12
    kept = clocks._KeptSchedstat()
    stat = kept.read()
    assert stat is not None and stat[0] > 0
    os.close(kept.fd)
    assert kept.read() is None
    kept.fd = -1


def test_a_process_reads_its_threads_through_files_kept_open_while_they_live() -> None:
    own = clocks._OwnThreads()
    began, stop = threading.Event(), threading.Event()

    def live() -> None:
        began.set()
        stop.wait(30)

    thread = threading.Thread(target=live)
    thread.start()
    began.wait(30)
    tid = thread.native_id
    assert tid is not None
    for _ in range(3):  # read again and again through the one file
        stats = own.read()
        assert stats is not None and {str(tid), str(threading.get_native_id())} <= set(stats)
        assert schedstat_files_open(tid) == 1
    stop.set()
    thread.join()
    # join() returns when Python is done with the thread; the kernel may list it for a moment after that.
    wait_for(lambda: str(tid) not in os.listdir("/proc/self/task"), 30)
    stats = own.read()
    assert stats is not None and str(tid) not in stats
    assert schedstat_files_open(tid) == 0  # closed with its thread
    # A forked child holds none of the files this process keeps (they describe the parent's threads) from the
    # moment it starts, and reads its own one thread.
    del own
    parent = threading.get_native_id()
    clocks.thread_core_wait()
    clocks.process_core_wait()
    assert schedstat_files_open(parent) == 2  # this thread's own reader's, and the process reader's
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        inherited = schedstat_files_open(parent)
        os.write(writer, json.dumps([inherited, sorted(clocks.own_threads_schedstat() or {})]).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        inherited, seen = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert inherited == 0 and seen == [str(child)]


def test_a_process_lists_its_threads_again_only_when_their_count_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    own = clocks._OwnThreads()
    listed: list[str] = []
    listdir = os.listdir

    def counted(path: str) -> list[str]:
        listed.append(path)
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counted)
    readings = [own.read() for _ in range(3)]
    assert all(readings) and len(listed) == 1  # three readings, one listing
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(30,))
    thread.start()
    try:
        stats = own.read()  # one thread more: listed again, and the new one read
        assert stats is not None and str(thread.native_id) in stats and len(listed) == 2
    finally:
        stop.set()
        thread.join()


# Run in a Python of its own: the test process holds files other tests opened (their meters of a server's
# threads), which its child inherits too and which are none of the clocks' business.
FORKED_IN_C = """
import ctypes, json, os, sys
from workloads import clocks

def open_files(ending):
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # (the listing's own descriptor, closed since)
            continue
    return [path for path in found if path.endswith(ending)]

clocks.thread_core_wait()
clocks.own_threads_schedstat()
kept = open_files("/schedstat") + open_files("/task")
reader, writer = os.pipe()
child = ctypes.CDLL(None).fork()
if child == 0:  # the child: no Python hook ran
    try:
        read = sorted(clocks.own_threads_schedstat() or {})
        clocks.thread_core_wait()
        os.write(writer, json.dumps([read, open_files("/schedstat") + open_files("/task")]).encode())
    finally:
        os._exit(0)
os.close(writer)
with os.fdopen(reader) as pipe:
    read, files = json.loads(pipe.read())
os.waitpid(child, 0)
print(json.dumps({"parent": os.getpid(), "kept": kept, "child": child, "read": read, "files": files}))
"""


def test_a_child_forked_without_python_s_hooks_reads_its_own_threads() -> None:
    # As uWSGI's master forks its workers: in C, none of Python's after-fork hooks run, and the child inherits the
    # files its parent kept open. Its readings are its own all the same (workloads/clocks.py checks whose they are).
    command = [sys.executable, "-c", FORKED_IN_C]
    done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    child = seen["child"]
    assert f"/proc/{seen['parent']}/task" in seen["kept"]  # the parent kept its files, which the child inherits
    assert seen["read"] == [str(child)]  # its one thread, not its parent's threads
    assert f"/proc/{child}/task/{child}/schedstat" in seen["files"]  # its own thread's file, opened by the check
    # None of its parent's, its task folder included: the parent may have as many threads as it kept files for.
    assert all(path.startswith(f"/proc/{child}/") for path in seen["files"]), seen["files"]


@pytest.mark.usefixtures("hogs")
def test_the_core_meter_reads_a_thread_queueing_for_a_core_and_not_an_idle_one() -> None:
    # Idle, the process's threads sleep: a reading is the queueing of their few wake-ups over the
    # window (a second, so that one wake-up's wait is a small part of it). Busy beside a loop per
    # core, this thread gets at most its fair share of a core, so it queues at least a third of the
    # time on 2 cores. Measured idle 0.00-0.07 over 0.3 s windows, busy 0.43-0.84, with 2-6 loops.
    meter = CoreMeter()
    time.sleep(1.0)
    idle = meter.read()
    sum(range(15_000_000))  # busy beside the busy processes (on this thread: an ended one's counts go with it)
    busy = meter.read()
    assert idle is not None and busy is not None
    assert idle < 0.1 < busy, (idle, busy)


def test_stats_sum_the_runs_cpu_time_per_mode(server: LabServer) -> None:
    # What siege.sh's burst-own ideal is made of: /stats' sums, read around the burst.
    def sums() -> tuple[float, int]:
        entry = get_many([f"{server.url}/stats"])[0].json()["totals"]["requests"]["threading"]
        return entry["run_cpu_s"], entry["timed"]

    burst(server, "threading", 1)
    before = sums()
    timings = burst(server, "threading", 2)
    after = sums()
    assert after[1] - before[1] == 2
    assert after[0] - before[0] == pytest.approx(sum(t["cpu_ms"] for t in timings) / 1000, abs=0.001)


def test_the_meters_are_published_per_process(server: LabServer) -> None:
    ping = get_many([f"{server.url}/ping"])[0].json()
    assert 0 <= ping["core_wait"] <= 1
    [process] = get_many([f"{server.url}/stats"])[0].json()["processes"]
    assert 0 <= process["core_wait"] <= 1
    assert "lab_core_wait{" in get_many([f"{server.url}/metrics"])[0].body.decode()

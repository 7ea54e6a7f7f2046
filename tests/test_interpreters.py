"""/interpreters: a pool of sub-interpreters in the server process, each with its own GIL (Python 3.12+).

The first tests hold on every Python (what the mode says of itself and
refuses); the rest need one that can run it (3.12-3.13 with the
interpreters-pep-734 backport, or 3.14+): CI runs this file on 3.13 too.
"""

from __future__ import annotations

import importlib
import os
import site
import sys
from collections.abc import Iterator

import pytest

from lab import ROOT
from lab.modes.interpreters import worker as interp_worker
from lab.modes.interpreters.runner import THREAD_PREFIX, InterpreterRunner
from lab.modes.registry import MODES
from tests.conftest import StartServer
from tests.envelopes import assert_envelope, assert_error, max_concurrency, run_intervals
from tests.lab_server import LabServer, copies, get, get_many, pool_stats
from tests.pools import (
    assert_a_job_abandoned_in_the_queue_never_runs,
    assert_a_job_handed_ahead_counts_its_deadline_from_its_start,
)
from tests.procs import schedstat_files_open
from workloads.clocks import gil_enabled
from workloads.registry import WORKLOADS
from workloads.timing import RunRecord

MODE = MODES["interpreters"]
AVAILABLE = interp_worker.unavailable() is None
needs_interpreters = pytest.mark.skipif(not AVAILABLE, reason=f"{interp_worker.unavailable()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """A server of this module's own, not the session's shared one: on CPython 3.13.0 a server process in
    which the embedded Dask cluster had started (other modules' /distributed requests; then in the server's
    own process, now only its client is) once aborted with "free(): invalid pointer" on the /interpreters
    request that followed; not reproduced since (docs/modes.md#interpreters). This module proves the mode;
    that crash is reported, not hidden here."""
    with LabServer([], tmp_path_factory.mktemp("interpreters") / "server.log") as lab:
        yield lab


def test_modes_says_whether_this_python_can_run_it(server: LabServer) -> None:
    listed = {mode["name"]: mode for mode in get(f"{server.url}/modes").json()}
    entry = listed["interpreters"]
    assert (entry["available"], entry["unavailable_reason"]) == (AVAILABLE, interp_worker.unavailable())
    assert entry["flags"] == ["--interpreter-pool"] and entry["runs_on"] == "interpreters"
    assert all(mode["available"] for name, mode in listed.items() if name != "interpreters")


def test_the_reasons_name_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    check = interp_worker.unavailable.__wrapped__  # (the cached one answers for this Python)
    monkeypatch.setattr(sys, "version_info", (3, 11, 9, "final", 0))
    assert "need Python 3.12 or later" in str(check())
    monkeypatch.setattr(sys, "version_info", (3, 13, 0, "final", 0))

    def no_backport() -> type:
        raise ImportError("No module named 'interpreters_backport'")

    monkeypatch.setattr(interp_worker, "executor_class", no_backport)
    assert "pip install interpreters-pep-734" in str(check())


def test_workloads_that_need_numpy_are_refused_with_the_reason(server: LabServer) -> None:
    listed = {w["name"]: w for w in get(f"{server.url}/workloads").json()}
    for name, workload in WORKLOADS.items():
        refused = "numpy" in workload.needs
        assert ("interpreters" in listed[name]["modes"]) is not refused, name
        assert listed[name]["needs"] == list(workload.needs)
        assert {"blocking", "threading", "processing"} <= set(listed[name]["modes"])
    reason = MODE.refusal("predict", WORKLOADS["predict"].needs)
    assert reason is not None and "numpy and scikit-learn" in reason and "/processing" in reason
    assert MODE.refusal("count", WORKLOADS["count"].needs) is None
    # Over HTTP: a 422 where the mode runs, else the 501 that says why it cannot; the server goes on.
    reply = get(f"{server.url}/interpreters/matmul?n=10")
    if AVAILABLE:
        assert_error(reply, 422, "numpy", "sub-interpreter")
    else:
        assert_error(reply, 501, "/interpreters cannot run on this server")
    assert get(f"{server.url}/ping").status == 200


@pytest.mark.skipif(AVAILABLE, reason="this Python runs the mode")
def test_a_python_without_it_answers_501_with_the_reason(server: LabServer) -> None:
    assert_error(get(f"{server.url}/interpreters/count?n=10"), 501, str(interp_worker.unavailable()))
    assert get(f"{server.url}/processing/count?n=10").json()["result"] == 10


def test_its_lanes_are_its_interpreters_capped_by_the_cores() -> None:
    facts = {"cpu_count": 2, "processes": 1, "interpreter_pool": 4, "waits": {"sleep": True}}
    assert MODE.capacity(facts, "count").lanes == 2
    assert "each with its own GIL" in MODE.capacity(facts, "count").because
    assert MODE.capacity(facts, "sleep").lanes == 4


@needs_interpreters
def test_runs_in_the_server_process_on_interpreters_with_their_own_gil(start_server: StartServer) -> None:
    lab = start_server("--interpreter-pool", "2")
    replies = get_many(copies(f"{lab.url}/interpreters/count?n=3000000", 4))
    bodies = [reply.json() for reply in replies]
    for body in bodies:
        assert_envelope(body, "interpreters", "count")
        assert body["result"] == 3_000_000
        assert body["worker"]["pid"] == lab.pid  # one process: the server's own
        assert body["worker"]["thread"].startswith("lab-interp")
    interpreters = {body["worker"]["interpreter"] for body in bodies}
    assert len(interpreters) == 2 and 0 not in interpreters  # the pool's two, never the main interpreter
    assert max_concurrency(run_intervals(replies)) == 2
    # Each has a GIL of its own, which nobody else takes: whatever blocked a run (a page fault, the
    # host) was not the GIL, and the envelope says so (assert_envelope: gil_wait_ms 0, blocked_ms
    # measured). How long they were blocked is the machine's business, not asserted.
    assert all(body["timing"]["blocked_ms"] is not None for body in bodies)
    pool = pool_stats(lab.url, "interpreters")
    assert (pool["kind"], pool["size"], pool["submitted"]) == ("interpreters", 2, 4)
    assert get(f"{lab.url}/stats").json()["server"]["interpreter_pool"] == 2


@needs_interpreters
def test_the_pool_s_interpreters_run_under_a_gil_of_their_own() -> None:
    # What the timing trusts before it calls none of a run's blocked time the GIL's.
    assert interp_worker.gil_is_own() is False  # the main interpreter's GIL is shared by its threads
    with interp_worker.executor_class()(1) as pool:
        assert pool.submit(interp_worker.gil_is_own).result() is True


@needs_interpreters
def test_a_run_crosses_back_as_values_the_interpreters_share_without_pickling() -> None:
    # A dict is not shareable: the pool would fail to share it, then pickle it there and unpickle it here.
    shareable = importlib.import_module("_interpreters").is_shareable
    with interp_worker.executor_class()(1, initializer=site.addsitedir, initargs=(str(ROOT),)) as pool:
        values = pool.submit(interp_worker.run, WORKLOADS["count"].func, {"n": 10}).result()
    assert isinstance(values, tuple) and all(shareable(value) for value in values), values
    record = interp_worker.record_of(values)
    assert (record["result"], record["pid"], record["io_wait"]) == (10, os.getpid(), 0.0)
    assert record["interpreter"] > 0 and int(record["thread"]) > 0 and record["cpu"] is not None


def test_a_run_s_values_are_every_field_of_its_record() -> None:
    assert set(interp_worker.FIELDS) == set(RunRecord.__annotations__) - {"address"}  # (a Dask worker's only)


@needs_interpreters
def test_a_result_the_interpreters_cannot_share_comes_back_as_the_whole_record() -> None:
    # An int past 64 bits in a tuple makes the pool's sharing raise OverflowError, which it does not catch: the
    # job's answer would never come. A dict (a page's) cannot be shared at all and is pickled.
    pool = interp_worker.executor_class()(1, initializer=site.addsitedir, initargs=(str(ROOT),))
    try:
        big = pool.submit(interp_worker.run, pow, {"base": 2, "exp": 63}).result(timeout=30)
        small = pool.submit(interp_worker.run, pow, {"base": 2, "exp": 62}).result(timeout=30)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    assert isinstance(big, dict) and isinstance(small, tuple)
    assert interp_worker.record_of(big)["result"] == 2**63 and interp_worker.record_of(small)["result"] == 2**62


@needs_interpreters
def test_a_sub_interpreter_keeps_its_thread_s_schedstat_file_between_jobs() -> None:
    # Each job enters the interpreter on a new thread state, so a threading.local there is new at every job:
    # kept in one, the file was closed as each job ended and opened again by the next.
    count = WORKLOADS["count"].func
    with interp_worker.executor_class()(1, initializer=site.addsitedir, initargs=(str(ROOT),)) as pool:
        records = [interp_worker.record_of(pool.submit(interp_worker.run, count, {"n": 10}).result()) for _ in "ab"]
        thread = int(records[0]["thread"])  # (its native id: the interpreter does not know the pool's names)
        assert records[1]["thread"] == records[0]["thread"] and schedstat_files_open(thread) == 1
    assert all(record["core_wait"] is not None for record in records)


@needs_interpreters
def test_a_workload_that_waits_and_bad_input(server: LabServer) -> None:
    body = get(f"{server.url}/interpreters/sleep?seconds=0.05").json()
    assert_envelope(body, "interpreters", "sleep")
    # Its own wait, timed where it waited, and none of the rest the GIL's (nobody else takes its GIL; null: none).
    assert body["timing"]["io_wait_ms"] > body["timing"]["cpu_ms"]
    assert body["timing"]["gil_wait_ms"] == (0 if gil_enabled() else None)
    assert_error(get(f"{server.url}/interpreters/count?n=-1"), 400, "n")
    assert get(f"{server.url}/interpreters/fib?n=10").json()["result"] == 55


@needs_interpreters
@pytest.mark.parametrize(("seconds", "answered"), [(0.5, True), (1.5, False)])
def test_a_job_handed_ahead_counts_its_deadline_from_when_its_interpreter_begins_it(
    seconds: float, answered: bool
) -> None:
    # The interpreter that begins the job handed ahead reports so down the start pipe (lab/modes/starts.py).
    runner = InterpreterRunner("interpreters", size=1, max_pending=10, job_timeout=1.0)
    snapshot = assert_a_job_handed_ahead_counts_its_deadline_from_its_start(runner, seconds, answered)
    assert [str(name).startswith(THREAD_PREFIX) for name in snapshot["busy_workers"]] == [True]


@needs_interpreters
def test_a_job_handed_ahead_whose_client_leaves_never_runs() -> None:
    # Handed ahead, the job waits in the pool's queue, from which it is withdrawn (cancelled).
    runner = InterpreterRunner("interpreters", size=1, max_pending=10, job_timeout=60.0)
    assert_a_job_abandoned_in_the_queue_never_runs(runner, between=0)

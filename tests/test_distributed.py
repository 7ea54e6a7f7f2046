"""/distributed on real Dask clusters: an external one (scheduler and workers started by hand) and the embedded one."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import cloudpickle
import distributed
import psutil
import pytest
from dask.utils import funcname as dask_utils_funcname

from lab import ROOT
from lab.modes.distributed import worker as dask_worker_module
from lab.modes.distributed.cluster_process import MONITOR_HISTORY
from lab.modes.distributed.embedded import ALLOCATOR_ENV
from lab.modes.distributed.spans import forget_span_metrics, forgive_retired_spans, prune_spans
from lab.modes.distributed.stalls import within_awake
from lab.modes.distributed.worker import WARM_UP, warmed
from tests.conftest import StartServer
from tests.dask_cluster import SCRATCH, DaskCluster, self_signed
from tests.envelopes import any_overlap, assert_envelope, assert_error, run_intervals
from tests.lab_server import Reply, copies, get, get_many, pool_stats, sent
from tests.procs import alive, wait_for
from tests.twins import twin

if TYPE_CHECKING:
    from distributed import Worker

pytestmark = pytest.mark.timeout(240)  # clusters take seconds to start on a busy machine


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskCluster]:
    """`dask scheduler` and two `dask worker`s, each its own process group, all killed afterwards."""
    dask = DaskCluster(tmp_path)
    try:
        dask.start_scheduler()
        dask.start_worker("a")
        dask.start_worker("b")
        yield dask
    finally:
        dask.stop()


# The functions below run on the cluster's workers, which cannot import the tests nor the lab: ship them by value,
# and the lab's own (`warmed`) as the lab ships them.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(dask_worker_module)


def _predict_model() -> int | None:
    """On a worker: which predict model object it holds (None: not trained)."""
    model = sys.modules["workloads.ml"]._model
    return None if model is None else id(model)


def _warmed_at(dask_worker: Any) -> float | None:
    """On a worker: when (time.time()) the lab's warm-up there ended."""
    return dask_worker.plugins[WARM_UP].warmed_at  # type: ignore[no-any-return]


def _workloads_origin() -> str:
    """On a worker: where its `workloads` package was imported from."""
    return str(sys.modules["workloads"].__file__)


def _executing(dask_worker: Worker) -> int:
    """On a worker: how many tasks it is running."""
    return len(dask_worker.state.executing)


def _workers(url: str) -> list[dict[str, object]]:
    workers: list[dict[str, object]] = get(f"{url}/stats").json()["server"]["dask"]["workers"]
    return workers


def _wait_for_both_workers(url: str, cluster: DaskCluster) -> None:
    # Generous: two `dask worker` processes start slowly while other suites load both cores. If they never
    # both join, their own logs say why.
    assert wait_for(lambda: len(_workers(url)) == 2, timeout=120), (
        f"workers: {_workers(url)}\n" + "\n".join(f"--- {name}\n{cluster.log(name)[-2000:]}" for name in
                                                   ("scheduler.log", "worker-a.log", "worker-b.log"))
    )  # fmt: skip


def _pool(url: str) -> dict[str, Any]:
    return pool_stats(url, "distributed")


def _burst_on_both_workers(url: str) -> tuple[list[Reply], set[str]]:
    """10 concurrent counts that ran on both workers, at the same time, in one of up to 3 bursts.

    The scheduler may rightly hand a whole burst to one worker while the other is
    briefly busy (its start-up, a plugin): a burst is tried again, up to 3 times,
    before the spread counts as broken.
    """
    for _ in range(3):
        replies = get_many(copies(f"{url}/distributed/count?n=3000000", 10))
        assert [r.status for r in replies] == [200] * len(replies), [r.body[:200] for r in replies]
        for reply in replies:
            assert_envelope(reply.json(), "distributed", "count")
        addresses = {r.json()["worker"]["address"] for r in replies}
        assert all(a.startswith("tcp://127.0.0.1:") for a in addresses)
        if len(addresses) == 2 and any_overlap(run_intervals(replies)):  # two workers computed at once
            return replies, addresses
    pytest.fail(f"3 bursts, none on both workers at the same time; the last ran on {addresses}")


def test_ten_requests_run_on_both_workers_of_a_cluster_started_by_hand(
    tmp_path: Path, start_server: StartServer
) -> None:
    # One worker there when the lab connects, whose warm-up the lab waits for; the other joins after, and warms
    # up in the background (lab/modes/distributed/worker.py's WarmUp): the burst's tasks handed to it wait for
    # that warm-up. None is timed beside its imports, or trains the predict model inside its run.
    cluster = DaskCluster(tmp_path)
    try:
        cluster.start_scheduler()
        cluster.start_worker("a")
        with cluster.client() as client:
            client.wait_for_workers(1, timeout=120)
        lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1")
        cluster.start_worker("b")
        _wait_for_both_workers(lab.url, cluster)
        replies, addresses = _burst_on_both_workers(lab.url)
        with cluster.client() as client:
            assert client.run(warmed) == dict.fromkeys(addresses, True)
            warmed_at = client.run(_warmed_at)
        assert set(warmed_at) == addresses
        for reply in replies:
            run = reply.json()
            assert run["timing"]["started"] >= warmed_at[run["worker"]["address"]], (run["timing"], warmed_at)
        server = get(f"{lab.url}/stats").json()["server"]
        assert server["dask"]["scheduler"] == cluster.address and server["dask"]["embedded"] is False
        by_address = {w["address"]: w for w in server["dask"]["workers"]}
        assert set(by_address) == addresses
        assert {r.json()["worker"]["pid"] for r in replies} == {w["pid"] for w in by_address.values()}
        assert all(w["threads"] == 1 and w["memory_bytes"] for w in by_address.values())
        # The workers run from an empty folder: the client shipped the workloads package to them, each into its
        # own directory (two nannies unpacking into one shared folder collide).
        assert not (cluster.folder / "workloads").exists()
        with cluster.client() as client:
            origins = client.run(_workloads_origin)
            assert len(set(origins.values())) == 2, origins
            for origin in origins.values():
                assert origin.startswith(str(cluster.folder / SCRATCH)) and "lab_workloads.zip" in origin, origins
            # Each worker trained its predict model in its warm-up (done, above), and no task trains another.
            models = client.run(_predict_model)
            assert len(models) == 2 and None not in models.values()
            for reply in get_many(copies(f"{lab.url}/distributed/predict?rows=100", 4)):
                assert reply.json()["result"] == 426
            assert client.run(_predict_model) == models
        # The server's stop leaves the cluster it did not start alone.
        assert lab.terminate() == 0
        assert all(process.poll() is None for process in cluster.processes)
    finally:
        cluster.stop()


def test_the_embedded_cluster_runs_the_burst_and_goes_with_the_server(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--dask-workers", "2")
    assert get(f"{lab.url}/stats").json()["server"]["dask"]["state"] == "not started"  # started on first use
    _burst_on_both_workers(lab.url)
    dask = get(f"{lab.url}/stats").json()["server"]["dask"]
    assert dask["embedded"] is True and dask["state"] == "running" and len(dask["workers"]) == 2
    pids = {w["pid"] for w in dask["workers"]}
    assert pids <= lab.remember_descendants()  # the server's own descendants
    # Its scheduler listens in a process of its own, a child of the server's: not on the server's event loop,
    # where its work would queue for the GIL behind /threading's and slow every other request.
    port = int(dask["scheduler"].rsplit(":", 1)[1])
    listening = {c.laddr.port for c in psutil.Process(lab.pid).net_connections("tcp") if c.status == "LISTEN"}
    assert port not in listening
    owner = _cluster_process(lab.pid)
    assert port in {c.laddr.port for c in owner.net_connections("tcp") if c.status == "LISTEN"}
    # Each of its workers ran the lab's preload (it forgets the metrics Dask keeps per span), and ignores SIGINT
    # as the cluster's process does (a terminal's Ctrl-C made each print a traceback); its scheduler prunes spans.
    # Every Dask server in it keeps a minute of its process's samples, not an hour's (1.9 MiB each).
    with distributed.Client(dask["scheduler"], timeout=30) as client:
        assert set(client.run(_runs_the_preload).values()) == {True}
        assert client.run_on_scheduler(_prunes_spans)
        histories = [client.run_on_scheduler(_scheduler_monitor_history), *client.run(_monitor_history).values(),
                     *client.run(_monitor_history, nanny=True).values()]  # fmt: skip
        assert histories == [MONITOR_HISTORY] * 5, histories
        # The scheduler's process and each worker trim the cache dask.utils.key_split keeps of every task key.
        assert client.run_on_scheduler(_key_split_kept_after_trim) == 0
        assert set(client.run(_key_split_kept_after_trim).values()) == {0}
    for pid in [owner.pid, *pids]:
        assert _ignores_sigint(pid), pid
        # glibc's allocator set as Dask's nannies set it for its workers: large blocks mapped, unmapped when freed
        # (a setting of the suite's own environment stands).
        allocator = {name: os.environ.get(name, value) for name, value in ALLOCATOR_ENV.items()}
        assert psutil.Process(pid).environ().items() >= allocator.items(), pid
    assert lab.terminate() == 0
    assert lab.survivors() == []


def _cluster_process(lab_pid: int) -> psutil.Process:
    found = [child for child in psutil.Process(lab_pid).children()
             if "lab.modes.distributed.cluster_process" in " ".join(child.cmdline())]  # fmt: skip
    assert len(found) == 1, found
    return found[0]


def test_an_embedded_cluster_whose_process_died_is_started_again(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--dask-workers", "1")
    assert get(f"{lab.url}/distributed/sleep?seconds=0", timeout=120).status == 200
    before = get(f"{lab.url}/stats").json()["server"]["dask"]
    dead = _cluster_process(lab.pid)
    workers = dead.children(recursive=True)
    dead.kill()
    statuses: list[int] = []

    def served_by_another() -> bool:
        reply = get(f"{lab.url}/distributed/sleep?seconds=0", timeout=60)
        statuses.append(reply.status)
        if reply.status == 503:
            assert "Retry-After" in reply.headers, reply.body
            time.sleep(0.5)
        return reply.status == 200 and get(f"{lab.url}/stats").json()["server"]["dask"]["scheduler"] != before[
            "scheduler"]  # fmt: skip

    # Meanwhile a clear 503 (the scheduler lost), never a hang; then a new cluster process answers.
    assert wait_for(served_by_another, timeout=90), statuses
    assert set(statuses) <= {200, 503}, statuses
    assert _cluster_process(lab.pid).pid != dead.pid
    assert wait_for(lambda: not any(alive(w) for w in workers))
    assert lab.terminate() == 0
    assert lab.survivors() == []


def test_the_embedded_cluster_runs_this_projects_workloads_whatever_dasks_scratch_holds(
    start_server: StartServer, tmp_path: Path
) -> None:
    # Dask's machine-wide scratch directory can hold a `workloads` package that a
    # client uploaded to another cluster (UploadDirectory unpacks it there), and
    # workers put their local directory first on sys.path: not the embedded ones'.
    decoy = tmp_path / "dask-scratch-space" / "workloads"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('a stale upload, not this project')\n")
    lab = start_server("--process-pool", "1", "--dask-workers", "1", env={"DASK_TEMPORARY_DIRECTORY": str(tmp_path)})
    reply = get(f"{lab.url}/distributed/fib?n=10")
    assert reply.status == 200 and reply.json()["result"] == 55, reply.body


def test_a_worker_killed_mid_burst_costs_no_request_more_than_a_clear_503(
    cluster: DaskCluster, start_server: StartServer
) -> None:
    lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1", "--job-timeout", "30")
    _wait_for_both_workers(lab.url, cluster)
    pids = {str(w["address"]): int(str(w["pid"])) for w in _workers(lab.url)}
    with ThreadPoolExecutor(6) as pool:
        # Sent from this thread, each in the kernel's hands before the next (a pool thread may send them late).
        burst = [sent(url, pool) for url in copies(f"{lab.url}/distributed/sleep?seconds=1", 6)]
        # A worker that has started one of the burst's tasks (the lab learns it from the task itself).
        busy: list[str] = []

        def started() -> bool:
            busy[:] = _pool(lab.url)["busy_workers"]
            return bool(busy)

        assert wait_for(started)
        victim = pids[busy[0]]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        replies = [reply.result(timeout=60) for reply in burst]  # none hangs past --job-timeout
    assert {r.status for r in replies} <= {200, 503}, [r.body[:200] for r in replies]
    assert sum(r.status == 200 for r in replies) >= 5, [r.body[:200] for r in replies]  # its task reran elsewhere
    for reply in replies:
        if reply.status == 503:
            assert reply.headers["Retry-After"] and "retry" in reply.json()["error"]["message"]
    later = [r.json() for r in replies if r.status == 200 and r.json()["timing"]["started"] > killed_at + 0.1]
    assert later and victim not in {body["worker"]["pid"] for body in later}
    assert wait_for(lambda: victim not in {w["pid"] for w in _workers(lab.url)}, timeout=30)


def test_a_task_whose_client_left_before_any_worker_started_it_never_runs(
    cluster: DaskCluster, start_server: StartServer
) -> None:
    lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1")
    _wait_for_both_workers(lab.url, cluster)
    host, port = lab.url.removeprefix("http://").rsplit(":", 1)
    with cluster.client() as other:
        # Another user of the cluster keeps both workers busy: the lab's task waits at the scheduler.
        # 8 s: the steps below (polls, a disconnect noticed, a cancel at the scheduler) must end before they do.
        busy = [other.submit(time.sleep, 8, pure=False, workers=[str(w["address"])]) for w in _workers(lab.url)]
        assert wait_for(lambda: sum(other.run(_executing).values()) == 2)
        with socket.create_connection((host, int(port))) as sock:  # a client that gives up
            sock.sendall(b"GET /distributed/sleep?seconds=0.1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
            # Handed to the cluster (five tasks a worker thread may be), not begun by either.
            assert wait_for(lambda: (_pool(lab.url)["running"], _pool(lab.url)["waiting"]) == (0, 1))
        assert wait_for(lambda: _pool(lab.url)["waiting"] == 0)
        assert _pool(lab.url)["running"] == 0
        other.gather(busy)
        assert get(f"{lab.url}/distributed/sleep?seconds=0").status == 200
        # The lab's tasks announce their start on a topic of their own: only the last one ever started.
        started = [event for topic, events in other.get_events().items() if topic.startswith("lab-started-")
                   for event in events]  # fmt: skip
    assert len(started) == 1
    assert (_pool(lab.url)["submitted"], _pool(lab.url)["cancelled_waiting"]) == (2, 1)


def test_the_cluster_is_handed_five_tasks_a_worker_thread_and_its_scheduler_keeps_those_not_yet_begun(
    cluster: DaskCluster, start_server: StartServer
) -> None:
    # A task's result comes back through the scheduler, and the next task goes out through it: a worker handed
    # one task at a time would idle through that round trip. The gate hands the cluster five tasks a worker
    # thread (`ahead` 4); the scheduler gives each worker its next one and keeps the rest for whichever frees
    # first; the gate keeps what is beyond (counted, bounded, cancelled there).
    lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1")
    _wait_for_both_workers(lab.url, cluster)
    with cluster.client() as other, ThreadPoolExecutor(12) as pool:
        # Sent from this thread (in the kernel's hands when sent() returns): twelve pool threads on a loaded
        # host sent the last ones after the first 4 s tasks had ended, and (2, 10) was never seen.
        replies = [sent(url, pool, 60) for url in copies(f"{lab.url}/distributed/sleep?seconds=4", 12)]
        assert wait_for(lambda: (_pool(lab.url)["running"], _pool(lab.url)["waiting"]) == (2, 10))

        def at_the_scheduler() -> tuple[list[int], int]:  # each worker's tasks (the one it runs, its next), queued
            at_workers = other.processing()
            queued = other.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.queued))
            return sorted(len(keys) for keys in at_workers.values()), queued

        assert wait_for(lambda: at_the_scheduler() == ([2, 2], 6)), at_the_scheduler()
        assert [reply.result().status for reply in replies] == [200] * 12
    assert (_pool(lab.url)["running"], _pool(lab.url)["waiting"], _pool(lab.url)["submitted"]) == (0, 0, 12)


def test_with_no_worker_left_requests_get_503_naming_the_lost_worker(
    cluster: DaskCluster, start_server: StartServer
) -> None:
    lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1", "--job-timeout", "30")
    _wait_for_both_workers(lab.url, cluster)
    cluster.note()
    lost = {str(w["address"]) for w in _workers(lab.url)}
    for process in cluster.processes[1:]:  # both `dask worker`s, nannies and all
        os.killpg(process.pid, signal.SIGKILL)
    reply = get(f"{lab.url}/distributed/sleep?seconds=0.1", timeout=30)
    assert_error(reply, 503, "no worker is left")
    assert any(address in reply.json()["error"]["message"] for address in lost)
    assert reply.headers["Retry-After"]


def test_a_lost_scheduler_is_a_503_with_retry_after_never_a_hang(
    cluster: DaskCluster, start_server: StartServer
) -> None:
    lab = start_server("--dask-scheduler", cluster.address, "--process-pool", "1")
    _wait_for_both_workers(lab.url, cluster)
    with ThreadPoolExecutor(1) as pool:
        running = sent(f"{lab.url}/distributed/sleep?seconds=5", pool)  # (in the kernel's hands: not a thread late)
        assert wait_for(lambda: get(f"{lab.url}/stats").json()["processes"][0]["pools"]["distributed"]["running"])
        os.killpg(cluster.processes[0].pid, signal.SIGKILL)  # the scheduler
        reply = running.result(timeout=30)
    assert_error(reply, 503, "scheduler")
    assert reply.headers["Retry-After"]
    # A reconnection attempt is bounded (3 s: RECONNECT_TIMEOUT_S): answered before a 15 s twin ends (tests/twins.py).
    with twin(15) as twin_sleeps:
        later = get(f"{lab.url}/distributed/sleep?seconds=0", timeout=30)
        assert twin_sleeps()
    assert_error(later, 503, "scheduler")
    assert get(f"{lab.url}/ping").status == 200


def test_an_unreachable_scheduler_at_start_up_is_exit_2_with_one_line(refused_port: int) -> None:
    address = f"tcp://127.0.0.1:{refused_port}"
    done = subprocess.run(
        [sys.executable, "server.py", "--port", "0", "--dask-scheduler", address],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"cannot reach the Dask scheduler at {address}" in done.stderr


def test_a_task_over_the_job_timeout_is_504_and_its_worker_replaced(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--dask-workers", "1", "--job-timeout", "1")
    first = get(f"{lab.url}/distributed/sleep?seconds=0").json()["worker"]
    with twin(20) as twin_sleeps:  # (tests/twins.py)
        reply = get(f"{lab.url}/distributed/sleep?seconds=20")
        assert twin_sleeps()  # answered before the task's 20 s could have ended
    assert_error(reply, 504, "--job-timeout 1 s", "worker process killed")
    # Its nanny starts a new worker. On a loaded machine that can take longer than the lab waits for
    # one (NO_WORKER_GRACE_S): then a request gets 503 with Retry-After, and a client that retries is served.
    deadline = time.monotonic() + 60
    while (after := get(f"{lab.url}/distributed/sleep?seconds=0", timeout=60)).status == 503:
        assert after.headers["Retry-After"] and "no worker is left" in after.json()["error"]["message"]
        assert time.monotonic() < deadline, "no new worker in 60 s"
        time.sleep(float(after.headers["Retry-After"]))
    assert after.status == 200 and after.json()["worker"]["pid"] != first["pid"]


def test_a_deadline_in_the_loops_own_time_outlasts_a_stall_but_not_a_silence() -> None:
    async def scene() -> tuple[str, str]:
        stalled = asyncio.Event()

        async def answer_after_the_stall() -> str:
            await stalled.wait()
            for _ in range(3):  # a round trip to a scheduler on this loop takes a few turns
                await asyncio.sleep(0)
            return "answered"

        def stall() -> None:
            time.sleep(1.0)  # the loop held for twice the deadline, as back-to-back /blocking runs hold it
            stalled.set()

        asyncio.get_running_loop().call_later(0.05, stall)
        got = await within_awake(answer_after_the_stall(), 0.5)
        try:
            await within_awake(asyncio.Event().wait(), 0.5)  # nothing ever answers, the loop turns freely
        except TimeoutError:
            return got, "timed out"
        return got, "answered"

    assert asyncio.run(scene()) == ("answered", "timed out")


def test_a_loop_held_by_blocking_runs_is_not_a_lost_scheduler(start_server: StartServer) -> None:
    # The Dask client shares the server's event loop. Six 1.5 s /blocking runs back to back hold it for 9 s with
    # a turn or two between them, so a round trip to the scheduler (a few turns) takes over its 3 s by the wall
    # clock: the waiting /distributed request got "503 lost the Dask scheduler", though nothing was lost.
    lab = start_server("--process-pool", "1", "--dask-workers", "1")
    assert get(f"{lab.url}/distributed/sleep?seconds=0", timeout=60).status == 200
    with ThreadPoolExecutor(7) as pool:
        waiting = pool.submit(get, f"{lab.url}/distributed/sleep?seconds=12", 120)
        assert wait_for(lambda: pool_stats(lab.url, "distributed")["running"] == 1)
        blocking = []
        for _ in range(6):
            # Staggered, as traffic arrives: each lands while the loop is held, and is read in the turn after it,
            # between the scheduler's messages (sent all at once, they can all run before the next message).
            blocking.append(pool.submit(get, f"{lab.url}/blocking/sleep?seconds=1.5", 120))
            time.sleep(0.3)
        reply = waiting.result(timeout=120)
    assert [r.result().status for r in blocking] == [200] * 6
    assert reply.status == 200, reply.body
    # Stalls wake the lab's watch and anything else that polls the scheduler at once: a client's pool opens a
    # connection for each call that finds none free, and keeps it. Two, whatever the stalls: the client's
    # stream and the one its watch's calls take turns on (a second poller made it three, for good).
    assert len(_connections_to_the_cluster(lab.pid)) == 2


def test_results_that_arrive_together_are_fetched_over_one_connection(start_server: StartServer) -> None:
    # A result is fetched from the scheduler once the stream says its task is done. Two workers finish their
    # tasks while a /blocking run holds the loop, so both results (and the watch's poll) are due in the same
    # turn: a client's pool opened a connection for each call that found none free and kept it, so the
    # server held one descriptor more for every result it had ever fetched at once (three, four, under load).
    lab = start_server("--process-pool", "1", "--dask-workers", "2")
    assert get(f"{lab.url}/distributed/sleep?seconds=0", timeout=60).status == 200
    for _ in range(3):
        with ThreadPoolExecutor(5) as pool:
            waiting = [pool.submit(get, url, 120) for url in copies(f"{lab.url}/distributed/sleep?seconds=0.3", 4)]
            assert wait_for(lambda: pool_stats(lab.url, "distributed")["running"] == 2)
            assert get(f"{lab.url}/blocking/sleep?seconds=1", 60).status == 200
            assert [w.result(timeout=120).status for w in waiting] == [200] * 4
    # The client's stream, and the one connection the lab's calls (fetches, the watch's polls) take turns on.
    assert len(_connections_to_the_cluster(lab.pid)) == 2


def _connections_to_the_cluster(lab_pid: int) -> list[Any]:
    """The server process's TCP connections to the ports its embedded cluster's process listens on."""
    listening = {c.laddr.port for c in _cluster_process(lab_pid).net_connections("tcp") if c.status == "LISTEN"}
    return [c for c in psutil.Process(lab_pid).net_connections("tcp") if c.raddr and c.raddr.port in listening]


@pytest.mark.parametrize("how", ["SIGTERM", "ctrl-c"])
def test_a_forked_server_with_embedded_clusters_leaves_nothing_behind(start_server: StartServer, how: str) -> None:
    lab = start_server("--processes", "2", "--process-pool", "1", "--dask-workers", "1")
    replies = get_many(copies(f"{lab.url}/distributed/sleep?seconds=0.5", 6))
    assert [r.status for r in replies] == [200] * 6
    lab.remember_descendants()
    code = lab.terminate(signal.SIGINT, group=True) if how == "ctrl-c" else lab.terminate()
    assert code == 0
    assert lab.survivors() == []
    # The Dask workers share the group's Ctrl-C; the server stops them, without their tracebacks.
    assert "KeyboardInterrupt" not in lab.log()


def test_a_tls_cluster_admits_the_lab_with_its_certificate_only(tmp_path: Path, start_server: StartServer) -> None:
    # Whoever reaches a scheduler runs code on its workers: a shared cluster speaks TLS and checks certificates.
    cert, key = self_signed(tmp_path)
    dask = DaskCluster(tmp_path, tls=(cert, key))
    try:
        address = dask.start_scheduler()
        assert address.startswith("tls://")
        dask.start_worker("a")
        tls = ["--dask-tls-ca", str(cert), "--dask-tls-cert", str(cert), "--dask-tls-key", str(key)]
        lab = start_server("--dask-scheduler", address, *tls, "--process-pool", "1")
        reply = get(f"{lab.url}/distributed/sleep?seconds=0", timeout=120)
        assert reply.status == 200, reply.body
        assert reply.json()["worker"]["address"].startswith("tls://")
        # A certificate the cluster does not trust gets nowhere.
        other = tmp_path / "other"
        other.mkdir()
        stranger, stranger_key = self_signed(other)
        security = distributed.Security(tls_ca_file=str(stranger), tls_client_cert=str(stranger),
                                        tls_client_key=str(stranger_key), require_encryption=True)  # fmt: skip
        with pytest.raises((OSError, TimeoutError)):
            distributed.Client(address, security=security, timeout=5)
        # The lab says what it needs before trying without one.
        refused = subprocess.run([sys.executable, "server.py", "--port", "0", "--dask-scheduler", address],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert refused.returncode == 2 and "--dask-tls-ca" in refused.stderr
    finally:
        dask.stop()


def _runs_the_preload(dask_worker: distributed.Worker) -> bool:
    return dask_worker.periodic_callbacks["lab-forget-span-metrics"].is_running()


def _monitor_history(dask_worker: distributed.core.Server) -> int | None:
    """How many samples of its process a worker or nanny keeps (Dask passes itself as dask_worker)."""
    return dask_worker.monitor.maxlen


def _scheduler_monitor_history(dask_scheduler: distributed.Scheduler) -> int | None:
    return dask_scheduler.monitor.maxlen


def _key_split_kept_after_trim(dask_scheduler: Any = None, dask_worker: Any = None) -> int:
    """Fill this Dask process's key_split cache past what the lab keeps, run the server's trimming callback as
    its period would; the answers left."""
    from dask.utils import key_split

    from lab.modes.distributed.spans import KEY_SPLIT_KEEP

    server = dask_scheduler if dask_scheduler is not None else dask_worker
    for number in range(KEY_SPLIT_KEEP + 10):
        key_split(f"task-{number:032x}")
    server.periodic_callbacks["lab-trim-key-split"].callback()
    return int(key_split.cache_info().currsize)


def _prunes_spans(dask_scheduler: distributed.Scheduler) -> bool:
    return dask_scheduler.periodic_callbacks["lab-prune-spans"].is_running()


def _ignores_sigint(pid: int) -> bool:
    """SIGINT's bit in the process's mask of ignored signals (/proc/PID/status, SigIgn)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def test_a_worker_forgets_only_the_metrics_it_keeps_per_span() -> None:
    worker = SimpleNamespace(
        digests_total={("execute", "span-1", "count", "thread-cpu", "seconds"): 1.0, ("latency",): 0.1,
                       ("p2p", "span-2", "disk-read", "count"): 3, "tick-duration": 0.5},
        digests_max={("execute", "span-1", "count", "thread-cpu", "seconds"): 1.0, "tick-duration": 0.5},
    )  # fmt: skip
    assert forget_span_metrics(worker) == 3
    assert worker.digests_total == {("latency",): 0.1, "tick-duration": 0.5}
    assert worker.digests_max == {"tick-duration": 0.5}
    assert forget_span_metrics(worker) == 0


def _heartbeat(metrics: dict[tuple[str, ...], float], dask_scheduler: distributed.Scheduler) -> dict[Any, float]:
    """What the scheduler adds to its one span from a heartbeat's `metrics`, forgiving spans it dropped."""
    forgive_retired_spans(dask_scheduler)
    spans = dask_scheduler.extensions["spans"]
    (live,) = spans.spans.values()
    before = dict(live._cumulative_worker_metrics)
    spans.heartbeat(None, metrics)
    return {key: value - before.get(key, 0) for key, value in live._cumulative_worker_metrics.items()
            if value != before.get(key, 0)}  # fmt: skip


def _prune(dask_scheduler: distributed.Scheduler) -> int:
    return prune_spans(dask_scheduler)


def test_spans_of_forgotten_tasks_are_dropped_and_live_ones_kept() -> None:
    # Dask keeps a span per computation forever (dask/distributed#7977): on a soak's hour of /distributed the
    # embedded cluster's process grew by 45 MB. Its scheduler drops the spans whose task groups are all gone.
    local = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    with local as cluster, distributed.Client(cluster) as client:
        scheduler = cluster.scheduler
        assert scheduler is not None
        for i in range(20):
            assert client.submit(int, i, pure=False).result() == i  # each alone: a span each, then released
            # Forgotten before the next is sent: a task sent while its group still lived would share its span
            # (one run had a single span for all twenty, and nothing to drop).
            assert wait_for(lambda: not scheduler.tasks)
        held = client.submit(int, 99, pure=False)
        assert held.result() == 99
        spans = scheduler.extensions["spans"]
        assert wait_for(lambda: len(scheduler.tasks) == 1)  # the twenty forgotten, the held one kept
        before = len(spans.spans)
        assert before == 21  # (a span is shared while its task group lives: here one per task)
        gone = next(span_id for span_id in spans.spans if span_id != scheduler.tasks[held.key].group.span_id)
        assert client.run_on_scheduler(_prune) == before - 1
        live = scheduler.tasks[held.key].group.span_id
        assert list(spans.spans) == [live]  # the live task's span stays
        assert client.run_on_scheduler(_prune) == 0
        # A worker's heartbeat may still carry a dropped span's metrics: they are dropped, not a KeyError
        # (which makes the worker close itself).
        metrics = {("execute", gone, "int", "thread-cpu", "seconds"): 1.0,
                   ("execute", live, "int", "thread-cpu", "seconds"): 2.0}  # fmt: skip
        assert client.run_on_scheduler(_heartbeat, metrics) == {("execute", "int", "thread-cpu", "seconds"): 2.0}
        assert client.submit(int, 7, pure=False).result() == 7  # and the scheduler goes on


def test_the_key_split_cache_is_cleared_past_what_the_lab_keeps() -> None:
    from dask.utils import key_split

    from lab.modes.distributed.spans import KEY_SPLIT_KEEP, trim_key_split_cache

    key_split.cache_clear()
    for number in range(KEY_SPLIT_KEEP):
        key_split(f"task-{number:032x}")
    assert not trim_key_split_cache()  # at the limit: kept
    key_split("task-" + "f" * 32)
    assert trim_key_split_cache()
    assert key_split.cache_info().currsize == 0


def test_a_finished_tasks_release_goes_to_the_scheduler_in_one_batch_with_the_next_submit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Dask's client sends its scheduler at most one batch per 10 ms. A release sent alone as its task ended made
    # the next request's submit, a moment later, wait out those 10 ms: 21 ms a request at c = 1, the floor's 12.
    from lab.modes.distributed import cluster as dask_cluster

    # A release is held this long for the next submit: far longer than a stall of this loop on a busy machine.
    monkeypatch.setattr(dask_cluster, "RELEASE_WITHIN_S", 2.0)

    async def scene() -> tuple[list[list[str]], bool]:
        async with distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, asynchronous=True, dashboard_address=None
        ) as local:
            cluster = dask_cluster.Cluster(None, 1, {}, started=lambda job, address: None, resized=lambda n: None)
            cluster.client = await distributed.Client(local, asynchronous=True)
            scheduler = local.scheduler
            assert scheduler is not None and cluster.client.scheduler_comm is not None
            try:
                keys = []
                for job in range(3):
                    assert (await cluster.submit(job, "count", {"n": 1}))["result"] == 1
                    keys.append(cluster._ended[-1].key)
                    await asyncio.sleep(0.02)  # past the client's 10 ms: the next batch goes at once
                for _ in range(200):  # no submit follows the last: released all the same, within RELEASE_WITHIN_S
                    if not any(key in scheduler.tasks for key in keys):
                        break
                    await asyncio.sleep(0.05)
                released = not any(key in scheduler.tasks for key in keys)
                sent = [[str(m.get("op")) for m in batch] for batch in cluster.client.scheduler_comm.recent_message_log
                        if isinstance(batch, list)]  # fmt: skip
                return sent, released
            finally:
                await cluster._close_client()

    batches, released = asyncio.run(scene())
    releases = [batch for batch in batches if "client-releases-keys" in batch]
    assert len(releases) == 3, batches
    assert sum("update-graph" in batch for batch in releases) == 2, batches  # the first two, with the next submit
    assert released


class _Finished:
    """A finished task's Dask future as the lab's fetch sees it: ended, its result held by its worker."""

    status = "finished"

    def __init__(self, number: int, *, recomputed_in: float = 0.0) -> None:
        self.key = f"run_task-{number}"
        self.data = pickle.dumps({"result": number})
        self.recomputed_in = recomputed_in  # a result lost with its worker: computed again, this long
        self.fetched_alone = 0

    async def exception(self) -> None:
        return None

    def __await__(self) -> Any:  # `await future`: its own fetch (Dask's client waits for a lost one's rerun)
        self.fetched_alone += 1
        return asyncio.sleep(self.recomputed_in, self.data).__await__()


class _Scheduler:
    """The scheduler's `gather`, as the client's connection calls it: it takes a moment, counts its calls and
    how many run at once, and cannot fetch a result lost with its worker (nor send the others with it)."""

    def __init__(self, futures: list[_Finished], *, broken: bool = False) -> None:
        self.futures = {future.key: future for future in futures}
        self.calls: list[int] = []
        self.under_way = self.most_at_once = 0
        self.broken = broken

    async def gather(self, keys: list[str]) -> dict[str, Any]:
        self.calls.append(len(keys))
        self.under_way += 1
        self.most_at_once = max(self.most_at_once, self.under_way)
        try:
            await asyncio.sleep(0.05)
            if self.broken:
                raise OSError("the connection to the scheduler broke")
            lost = [key for key in keys if self.futures[key].recomputed_in]
            if lost:
                return {"status": "error", "keys": lost}
            return {"status": "OK", "data": {key: self.futures[key].data for key in keys}}
        finally:
            self.under_way -= 1


def _fetch_records(scheduler: _Scheduler, futures: list[_Finished], later: list[_Finished]) -> list[int]:
    """The results of `futures` (ended together) and of `later` (ended while their fetch was under way), in the
    order they were answered."""
    from lab.modes.distributed.cluster import Cluster

    cluster = Cluster(None, 1, {}, started=lambda job, address: None, resized=lambda threads: None)
    cluster.client = SimpleNamespace(scheduler=scheduler)  # type: ignore[assignment]
    answered: list[int] = []

    async def result(future: _Finished) -> None:
        answered.append((await cluster._result(future))["result"])  # type: ignore[arg-type]

    async def scene() -> None:
        first = [asyncio.ensure_future(result(future)) for future in futures]
        await asyncio.sleep(0.01)  # their fetch is under way when the next ones end
        await asyncio.gather(*first, *(result(future) for future in later))

    asyncio.run(scene())
    return answered


def test_results_due_together_are_fetched_in_one_call_and_one_call_at_a_time() -> None:
    # Fetched each on its own, the results of tasks ending together overlapped on the client's one pooled
    # connection to the embedded scheduler, and its pool closed it and opened another for most of them.
    futures = [_Finished(n) for n in range(7)]
    scheduler = _Scheduler(futures)
    assert sorted(_fetch_records(scheduler, futures[:5], futures[5:])) == list(range(7))
    assert (scheduler.calls, scheduler.most_at_once) == ([5, 2], 1)
    assert [future.fetched_alone for future in futures] == [0] * 7


def test_a_result_lost_with_its_worker_holds_up_no_other() -> None:
    # The scheduler cannot fetch result 1 (its worker died; it is computed again, 2 s): its request fetches it
    # alone, waiting for the rerun, while 0 and 2 are fetched again at once, and 3 and 4 after them.
    futures = [_Finished(n, recomputed_in=2.0 if n == 1 else 0.0) for n in range(5)]
    scheduler = _Scheduler(futures)
    assert _fetch_records(scheduler, futures[:3], futures[3:]) == [0, 2, 3, 4, 1]
    assert scheduler.calls == [3, 4]  # (0 and 2 again, with 3 and 4, which ended meanwhile)
    assert [future.fetched_alone for future in futures] == [0, 1, 0, 0, 0]


def test_an_external_cluster_s_results_are_fetched_each_by_its_own_request() -> None:
    # Its client keeps a connection for each call under way: a fetch that waits on a silent worker (across a
    # network, until TCP gives up) holds up only its own request, as Dask's own client does it.
    from lab.modes.distributed.cluster import Cluster

    futures = [_Finished(n) for n in range(3)]
    scheduler = _Scheduler(futures)
    cluster = Cluster("tcp://127.0.0.1:8786", 1, {}, started=lambda job, address: None, resized=lambda n: None)
    cluster.client = SimpleNamespace(scheduler=scheduler)  # type: ignore[assignment]

    async def scene() -> list[Any]:
        return list(await asyncio.gather(*(cluster._result(future) for future in futures)))  # type: ignore[arg-type]

    assert [record["result"] for record in asyncio.run(scene())] == [0, 1, 2]
    assert (scheduler.calls, [future.fetched_alone for future in futures]) == ([], [1, 1, 1])


def test_results_whose_fetch_together_failed_are_fetched_each_on_its_own() -> None:
    futures = [_Finished(n) for n in range(3)]
    scheduler = _Scheduler(futures, broken=True)
    assert sorted(_fetch_records(scheduler, futures, [])) == [0, 1, 2]
    assert scheduler.calls == [3]
    assert [future.fetched_alone for future in futures] == [1, 1, 1]


def test_the_task_is_pickled_once_and_each_submit_ships_those_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Dask's client pickles every task it submits: a function local to a call failed plain pickle and Dask's
    # own pickler, then went through cloudpickle, about 300 µs of the server's CPU a request.
    from distributed.protocol import pickle as dask_pickle

    from lab.modes.distributed.worker import task

    shipped = task()
    assert dask_utils_funcname(shipped) == "run_task"  # the task's key is named after it, as before

    def no_cloudpickle(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("cloudpickle at submit")

    monkeypatch.setattr(cloudpickle, "dumps", no_cloudpickle)  # (the module distributed calls it from)
    payload = dask_pickle.dumps([shipped, 7, {"n": 1}])
    function, job, params = dask_pickle.loads(payload)
    assert function.__qualname__ == "task.<locals>.run_task" and (job, params) == (7, {"n": 1})


def test_the_server_trims_its_own_key_split_cache_as_it_submits() -> None:
    # The client splits every key it submits (one per request: pure=False) and keeps the answer, in the server.
    from dask.utils import key_split

    from lab.modes.distributed.cluster import Cluster
    from lab.modes.distributed.spans import KEY_SPLIT_KEEP

    submitted: list[tuple[Any, ...]] = []

    def submit(*args: Any, **kwargs: Any) -> SimpleNamespace:
        submitted.append(args)
        return SimpleNamespace()

    cluster = Cluster(None, 1, {}, started=lambda job, address: None, resized=lambda threads: None)
    cluster.client = SimpleNamespace(submit=submit)  # type: ignore[assignment]

    async def submit_past_the_limit() -> None:
        for number in range(KEY_SPLIT_KEEP + 1):
            key_split(f"run-{number:032x}")  # as the client does for each task's key
            cluster.submit(number, "count", {"n": 1}).cancel()  # (its outcome is not what this test is about)

    key_split.cache_clear()
    asyncio.run(submit_past_the_limit())
    assert len(submitted) == KEY_SPLIT_KEEP + 1
    assert key_split.cache_info().currsize == 0

"""/processing: runs in the ONE shared process pool, in parallel, outside the server."""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os
import subprocess
import termios
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import psutil
import pytest

from lab.errors import LabError
from lab.machine import cpu_count
from lab.modes.processing.runner import ProcessRunner
from lab.modes.processing.worker import WITHDRAWN_SLOTS, init_pool_worker
from lab.modes.starts import START, STARTS_PER_READ, StartReports
from tests.conftest import StartServer
from tests.envelopes import any_overlap, assert_envelope, run_intervals
from tests.lab_server import LabServer, copies, get, get_many, ping_while_pool_busy, pool_stats
from tests.pools import assert_a_job_abandoned_in_the_queue_never_runs
from tests.procs import STALL_S


def test_envelope(server: LabServer) -> None:
    body = get(f"{server.url}/processing/fib?n=20").json()
    assert_envelope(body, "processing", "fib")
    assert body["result"] == 6765
    assert body["worker"]["pid"] != server.pid
    assert body["worker"]["thread"] == "MainThread"


@pytest.mark.skipif(cpu_count() < 2, reason="needs two cores for two workers")
def test_cpu_jobs_overlap_in_distinct_workers(server: LabServer) -> None:
    replies = get_many(copies(f"{server.url}/processing/count?n=3000000", 4))
    assert all(r.status == 200 and r.json()["result"] == 3_000_000 for r in replies)
    assert any_overlap(run_intervals(replies))
    workers = {r.json()["worker"]["pid"] for r in replies}
    assert len(workers) >= 2
    assert server.pid not in workers


def test_a_pool_worker_holds_the_same_descriptors_from_its_first_job(start_server: StartServer) -> None:
    # Its warm-up opened the schedstat files every run's split reads (workloads/clocks.py keeps them open).
    lab = start_server("--process-pool", "1")
    (pid,) = pool_stats(lab.url, "processing")["worker_pids"]
    worker = psutil.Process(pid)

    def held() -> tuple[set[str], int]:
        return {file.path for file in worker.open_files()}, worker.num_fds()

    before = held()
    assert any(path.endswith("/schedstat") for path in before[0])
    assert get(f"{lab.url}/processing/count?n=1").json()["worker"]["pid"] == pid
    assert held() == before


def test_workers_are_reused_not_spawned_per_request(server: LabServer) -> None:
    first = {r.json()["worker"]["pid"] for r in get_many(copies(f"{server.url}/processing/sleep?seconds=0.2", 4))}
    second = {r.json()["worker"]["pid"] for r in get_many(copies(f"{server.url}/processing/sleep?seconds=0.2", 4))}
    pool = set(pool_stats(server.url, "processing")["worker_pids"])
    assert first | second <= pool
    assert len(pool) == cpu_count()


def test_ping_answers_while_workers_compute(server: LabServer) -> None:
    jobs, ping = ping_while_pool_busy(server.url, "processing", 2)
    assert ping.status == 200
    assert ping.received < min(j.json()["timing"]["finished"] for j in jobs)


@pytest.mark.parametrize("server_alive", [True, False], ids=["server-alive", "server-gone"])
def test_a_pool_worker_whose_server_died_before_it_started_watching_stops(server_alive: bool) -> None:
    # A pool being replaced spawns workers that import for seconds before their initializer runs; a server
    # process SIGKILLed meanwhile has them adopted by init, so getppid() no longer names it. The initializer
    # is told the server's pid: a worker whose parent is not that pid stops (and its job breaks the pool).
    context = multiprocessing.get_context("spawn")
    _, writer = context.Pipe(duplex=False)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that is nobody's parent any more
    server = os.getpid() if server_alive else gone.pid
    with ProcessPoolExecutor(
        1, mp_context=context, initializer=init_pool_worker, initargs=(writer, server, None)
    ) as pool:
        job = pool.submit(time.sleep, 5)
        if server_alive:
            assert job.result(timeout=STALL_S) is None
        else:
            with pytest.raises(BrokenProcessPool):
                job.result(timeout=STALL_S)


def test_the_servers_reads_take_every_start_record_whole() -> None:
    seen: list[tuple[int, int, float]] = []
    reader, writer = os.pipe()
    reports = StartReports(reader, lambda job_id, worker, at: seen.append((job_id, worker, at)))
    try:
        sent = [(job, 1000 + job % 7, 1e9 + job / 8) for job in range(STARTS_PER_READ + 10)]
        for record in sent:  # as workers write them: one record a write
            os.write(writer, START.pack(*record))
        assert reports.read_once()  # a whole read's worth: more may wait
        assert seen == sent[:STARTS_PER_READ]  # whole records only, and no more than one read's worth
        assert not reports.read_once()  # the rest
        assert seen == sent
        assert not reports.read_once()  # nothing waiting: nothing read, nothing raised
        assert seen == sent
    finally:
        os.close(reader)
        os.close(writer)


def test_start_reports_read_lazily_never_fill_the_pipe() -> None:
    # Nothing wakes the server for a start report (lab/modes/pool.py's lazy_starts): the runner reads them at least
    # once every STARTS_PER_READ jobs handed over, so a long run of jobs that nobody times or looks at in /stats
    # never leaves more than that many in the pipe (at 2,730 a worker's report would block, and the pool with it).
    async def main() -> int:
        runner = ProcessRunner("processing", 1, 4, 60.0)
        await runner.start()
        try:
            most = 0
            for _ in range(STARTS_PER_READ * 2 + 50):
                await runner.run("count", {"n": 1})
                assert runner._pipe is not None
                waiting = fcntl.ioctl(runner._pipe[0].fileno(), termios.FIONREAD, b"\0\0\0\0")
                most = max(most, int.from_bytes(waiting, "little"))
            return most
        finally:
            await runner.close()

    # Some left unread (read lazily: a reader woken for each would leave none), never more than a read's worth.
    assert START.size <= asyncio.run(main()) <= STARTS_PER_READ * START.size


def test_a_job_handed_ahead_behind_a_stuck_one_runs_on_the_replacement_pool() -> None:
    # One worker; a job stuck past --job-timeout, and one handed ahead behind it into the workers' queue. The stuck
    # one's worker is killed and its pool replaced; the job behind it, never begun, runs on the new pool (as it
    # would have had it waited in the gate: lab/modes/pool.py's `ahead`), not a 503 with the old one.
    async def main() -> tuple[list[int], Any, Any]:
        runner = ProcessRunner("processing", size=1, max_pending=10, job_timeout=1.0)
        await runner.start()
        try:
            old = runner.snapshot()["worker_pids"]
            stuck = asyncio.ensure_future(runner.run("sleep", {"seconds": 5}))
            await asyncio.sleep(0.3)
            behind = asyncio.ensure_future(runner.run("sleep", {"seconds": 0}))
            answers = await asyncio.gather(stuck, behind, return_exceptions=True)
            # Both answered, the killed job's future failed since: nothing of either is kept.
            assert (runner._running, runner._failed) == ({}, {})
            return old, *answers
        finally:
            await runner.close()

    old, stuck, behind = asyncio.run(main())
    assert isinstance(stuck, LabError) and stuck.status_code == 504
    assert isinstance(behind, dict), behind
    assert behind["pid"] not in old


@pytest.mark.parametrize("between", [0, 2], ids=["in the workers' queue", "in the executor's own queue"])
def test_a_job_handed_ahead_whose_client_leaves_never_runs(between: int) -> None:
    # One worker: ProcessPoolExecutor moves a job a worker and one more into its workers' own queue, where the
    # server marks a job it withdraws; a job handed further ahead waits in the executor's own, which cancels it.
    runner = ProcessRunner("processing", size=1, max_pending=10, job_timeout=60.0)
    assert_a_job_abandoned_in_the_queue_never_runs(runner, between)
    # Which of the two took it back: the mark (the abandoned job is job 1 + between) or the executor's cancel.
    marked = runner._withdrawn[(1 + between) % WITHDRAWN_SLOTS] == 1 + between
    assert marked == (between == 0)


def test_jobs_handed_ahead_while_a_pool_is_replaced_are_answered_or_get_the_documented_503() -> None:
    # Two workers, one stuck past --job-timeout, eight clients asking again and again meanwhile: the stuck one's
    # pool is replaced while the other worker of the old pool still runs jobs and takes those handed ahead to it.
    # ProcessPoolExecutor breaks as a whole, so a job that worker had begun gets the documented 503 + Retry-After
    # (docs/operating.md#failures; test_reliability_pools proves it through a server). Every other job is answered
    # by the new pool, and nothing fails any other way on the old pool's way out: a start record written to a
    # closed pipe failed a job with EPIPE before the runner kept one pipe for all its pools.
    refused: list[float | None] = []  # the start of each job a withdrawal could not take back

    async def main() -> tuple[Any, list[Any], dict[str, Any]]:
        runner = ProcessRunner("processing", size=2, max_pending=100, job_timeout=1.0)
        await runner.start()
        answers: list[Any] = []
        done = asyncio.Event()
        withdraw = runner._withdraw

        def withdrawn(job_id: int, job: Any, future: Any) -> bool:  # (every job's withdraw, as the broken pool's ask)
            taken = withdraw(job_id, job, future)
            if not taken:
                refused.append(job.began)
            return taken

        runner._withdraw = withdrawn  # type: ignore[method-assign]

        async def client() -> None:
            while not done.is_set():
                try:
                    answers.append(await runner.run("sleep", {"seconds": 0}))
                except Exception as error:
                    answers.append(error)

        try:
            stuck = asyncio.ensure_future(runner.run("sleep", {"seconds": 5}))
            await asyncio.sleep(0.3)
            clients = [asyncio.ensure_future(client()) for _ in range(8)]
            outcome = await asyncio.gather(stuck, return_exceptions=True)
            await asyncio.sleep(1.5)  # the old pool's way out, and the new one's first jobs
            done.set()
            await asyncio.gather(*clients)
            return outcome[0], answers, {**runner.snapshot(), "lanes": runner.lanes(runner.size)}
        finally:
            await runner.close()

    stuck, answers, snapshot = asyncio.run(main())
    assert isinstance(stuck, LabError) and stuck.status_code == 504
    assert snapshot["pool_restarts"] == 1
    failed = [answer for answer in answers if not isinstance(answer, dict)]
    begun_in_the_old_pool = [
        error
        for error in failed
        if isinstance(error, LabError)
        and error.status_code == 503
        and "broke while running this job" in error.message
        and "Retry-After" in error.headers
    ]
    assert failed == begun_in_the_old_pool, failed[:3]
    # Each of them had begun (a job not begun is taken back and handed to the new pool), and they are at most
    # the jobs the old pool's healthy worker could begin: the one it ran as the pool broke, and those in the
    # workers' own queue (ProcessPoolExecutor keeps one a worker and one more there: two workers, three), of the
    # eight clients' jobs in flight; the rest waited in the executor's own queue, from which no worker took
    # them. Later ones went to the new pool, which answered.
    assert None not in refused and len(failed) == len(refused) == snapshot["broken"] <= 1 + (snapshot["size"] + 1)
    assert {answer["pid"] for answer in answers if isinstance(answer, dict)} & set(snapshot["worker_pids"])


class _Handed:
    """An executor that only records what it is handed (its futures settled by the test)."""

    def __init__(self) -> None:
        self.handed: list[tuple[int, dict[str, Any], Future[Any]]] = []

    def submit(self, fn: Any, job_id: int, workload: str, params: dict[str, Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.handed.append((job_id, params, future))
        return future


@pytest.mark.parametrize("between", ["another job's failure", "a /stats reading"])
def test_a_job_begun_in_a_broken_pool_is_not_handed_to_the_new_one(between: str) -> None:
    # A broken pool fails its jobs' futures, then ends its workers: a worker may take a queued job in between and
    # write its start record. Read by any other reading first (another failed job's, /stats'), that record must
    # still reach the job, which began: it is not handed to the new pool (it would run twice). The job no worker
    # began is.
    async def main() -> tuple[list[tuple[int, Any]], Any, Any]:
        runner = ProcessRunner("processing", size=2, max_pending=10, job_timeout=60)
        writer = runner._start_pipe()
        runner._executor = _Handed()  # type: ignore[assignment]
        pool: _Handed = runner._executor  # type: ignore[assignment]
        began = asyncio.ensure_future(runner.run("count", {"n": 1}))
        waiting = asyncio.ensure_future(runner.run("count", {"n": 2}))
        await asyncio.sleep(0.01)
        (first, _, began_future), (_, _, waiting_future) = pool.handed
        for future in (began_future, waiting_future):
            future.set_running_or_notify_cancel()  # (in the workers' own queue: beyond cancel)
        began_future.set_exception(BrokenProcessPool("a worker died"))
        loop = asyncio.get_running_loop()
        loop.call_soon(os.write, writer.fileno(), START.pack(first, 4242, time.monotonic()))  # a worker takes it
        if between == "a /stats reading":
            loop.call_soon(runner.snapshot)
        waiting_future.set_exception(BrokenProcessPool("a worker died"))
        await asyncio.sleep(0.05)
        for _, _, future in pool.handed[2:]:  # the new pool runs what it was handed
            future.set_running_or_notify_cancel()
            future.set_result({"result": "new pool"})
        outcomes = await asyncio.gather(began, waiting, return_exceptions=True)
        runner._close_pipe()
        return [(job_id, params["n"]) for job_id, params, _ in pool.handed], *outcomes

    handed, began, waiting = asyncio.run(main())
    assert handed == [(0, 1), (1, 2), (2, 2)]  # only the job no worker began, again
    assert isinstance(began, LabError) and began.status_code == 503
    assert waiting == {"result": "new pool"}

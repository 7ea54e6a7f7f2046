"""Pools under pressure: backpressure, deadlines, abandoned jobs, a broken pool that heals."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest

from lab.modes.gate import Slots
from tests.conftest import StartServer
from tests.envelopes import assert_error
from tests.lab_server import LabServer, copies, get, pool_stats, sent
from tests.procs import wait_for
from tests.twins import twin


def _pool(lab: LabServer, mode: str) -> dict[str, Any]:
    return pool_stats(lab.url, mode)


@pytest.mark.parametrize("mode", ["threading", "processing", "distributed"])
def test_beyond_max_pending_is_503_at_once(start_server: StartServer, mode: str) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "1", "--dask-workers", "1", "--max-pending", "1")
    # Warm first: the embedded Dask cluster starts with the first request, which can take longer
    # than the seconds the burst below leaves for the third request to find the pool full.
    assert get(f"{lab.url}/{mode}/sleep?seconds=0&_=warm", timeout=120).status == 200
    before = _pool(lab, mode)
    with ThreadPoolExecutor(2) as pool:
        running, waiting = (pool.submit(get, u) for u in copies(f"{lab.url}/{mode}/sleep?seconds=3", 2))
        # The first running and the second waiting: "waiting" alone is also 1 while the first is handed over and
        # not begun yet, and the third could then come before the second (a 200 after 6 s, once in a suite).
        assert wait_for(lambda: ((pool_now := _pool(lab, mode))["running"], pool_now["waiting"]) == (1, 1))
        rejected = get(f"{lab.url}/{mode}/sleep?seconds=3&_=third")
        assert_error(rejected, 503, "pool is full", "--max-pending 1")
        assert rejected.headers["Retry-After"] == "1"
        # At once, not after a wait: answered while the first job still slept (its 3 s).
        assert rejected.received < running.result().json()["timing"]["finished"]
        assert running.result().status == 200 and waiting.result().status == 200
    stats = _pool(lab, mode)
    grew = {key: stats[key] - before[key] for key in ("rejected", "submitted")}
    assert (grew["rejected"], grew["submitted"], stats["running"], stats["waiting"]) == (1, 2, 0, 0)


def test_stuck_process_job_gets_504_and_its_worker_is_replaced(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--job-timeout", "1")
    [before] = _pool(lab, "processing")["worker_pids"]
    with twin(20) as twin_sleeps:  # (tests/twins.py)
        reply = get(f"{lab.url}/processing/sleep?seconds=20")
        assert twin_sleeps()  # answered before the job's 20 s could have ended
    assert_error(reply, 504, "--job-timeout 1 s", "worker process was killed")
    after = get(f"{lab.url}/processing/fib?n=15")  # served by the new pool, not behind the stuck job
    assert after.status == 200 and after.json()["result"] == 610
    assert after.json()["worker"]["pid"] != before
    stats = _pool(lab, "processing")
    assert stats["timed_out"] == 1 and stats["pool_restarts"] == 1
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)


def test_stuck_thread_job_gets_504_and_keeps_its_slot_until_it_ends(start_server: StartServer) -> None:
    lab = start_server("--thread-pool", "1", "--job-timeout", "1")
    reply = get(f"{lab.url}/threading/sleep?seconds=10")
    assert_error(reply, 504, "cannot stop a thread")
    # Answered while the job still ran, and after it the slot is still the job's: the next one waits behind it.
    assert _pool(lab, "threading")["running"] == 1  # the thread is still sleeping
    with ThreadPoolExecutor(1) as pool:
        nxt = sent(f"{lab.url}/threading/sleep?seconds=0", pool)
        assert wait_for(lambda: ((now := _pool(lab, "threading"))["running"], now["waiting"]) == (1, 1))
        assert nxt.result().status == 200


@pytest.mark.parametrize("mode", ["processing", "threading"])
def test_a_job_abandoned_while_queued_never_runs(start_server: StartServer, mode: str) -> None:
    # Handed ahead to its pool (lab/modes/pool.py's `ahead`), the job waits in the executor's queue (threads) or
    # in the workers' own (processes), from which it must be withdrawn.
    lab = start_server("--process-pool", "1", "--thread-pool", "1")
    host, port = lab.url.removeprefix("http://").rsplit(":", 1)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(get, f"{lab.url}/{mode}/sleep?seconds=4")  # outlasts the steps below
        assert wait_for(lambda: _pool(lab, mode)["running"] == 1)
        with socket.create_connection((host, int(port))) as sock:  # a client that gives up
            sock.sendall(f"GET /{mode}/sleep?seconds=5 HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            assert wait_for(lambda: _pool(lab, mode)["waiting"] == 1)
        assert wait_for(lambda: _pool(lab, mode)["cancelled_waiting"] == 1)  # (withdrawn: its client has gone)
        # Asked for while the first still runs, as a rule: queued on the one worker behind the abandoned job.
        nxt = get(f"{lab.url}/{mode}/sleep?seconds=0")
        assert first.result().status == 200
    # Had the abandoned job run, it would have held the one worker from the first job's end for its whole 5 s (a
    # sleep never ends early), so the next could not start within 5 s of that end, nor of its own arrival if it
    # came before. Timed from the later of the two, a stall of this test before asking only shortens the gap;
    # what is left is the worker taking the next job from its queue, milliseconds.
    ended, timing = first.result().json()["timing"]["finished"], nxt.json()["timing"]
    assert timing["started"] - max(ended, timing["received"]) < 5
    assert wait_for(lambda: _pool(lab, mode)["waiting"] == 0)
    stats = _pool(lab, mode)
    assert (stats["submitted"], stats["cancelled_waiting"]) == (3, 1)  # (handed over, then withdrawn)


def test_a_killed_worker_breaks_one_request_and_the_pool_heals(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2")
    with ThreadPoolExecutor(1) as pool:
        victim_job = pool.submit(get, f"{lab.url}/processing/sleep?seconds=5")
        assert wait_for(lambda: len(_pool(lab, "processing")["busy_workers"]) == 1)
        [victim] = _pool(lab, "processing")["busy_workers"]
        os.kill(victim, signal.SIGKILL)  # what the OOM killer would do
        reply = victim_job.result()
    assert_error(reply, 503, "process pool broke while running this job")
    assert reply.headers["Retry-After"] == "1"
    healed = get(f"{lab.url}/processing/fib?n=10")
    assert healed.status == 200 and healed.json()["result"] == 55
    stats = _pool(lab, "processing")
    assert stats["broken"] == 1 and stats["pool_restarts"] == 1
    assert victim not in stats["worker_pids"]


def test_a_worker_killed_while_idle_is_replaced_before_the_next_job(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2")
    victim = _pool(lab, "processing")["worker_pids"][0]
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: not psutil.pid_exists(victim))  # the executor noticed and reaped it
    reply = get(f"{lab.url}/processing/fib?n=10")
    assert reply.status == 200 and reply.json()["result"] == 55
    assert _pool(lab, "processing")["pool_restarts"] == 1


def test_jobs_beside_a_stuck_one_get_503_when_its_pool_is_replaced(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--job-timeout", "4")
    with ThreadPoolExecutor(2) as pool:
        stuck = pool.submit(get, f"{lab.url}/processing/sleep?seconds=20")
        assert wait_for(lambda: _pool(lab, "processing")["running"] == 1)
        # The bystander must start well after the stuck job, or its own 4 s
        # deadline would race the stuck one's: two seconds' head start, on purpose.
        time.sleep(2.0)
        bystander = pool.submit(get, f"{lab.url}/processing/sleep?seconds=10")  # still running at the kill
        assert wait_for(lambda: len(_pool(lab, "processing")["busy_workers"]) == 2)
        assert_error(stuck.result(), 504, "--job-timeout 4 s")
        reply = bystander.result()
    assert_error(reply, 503, "process pool broke while running this job")
    assert reply.headers["Retry-After"] == "1"
    assert get(f"{lab.url}/processing/fib?n=10").json()["result"] == 55


def test_a_waiter_cancelled_as_its_slot_frees_leaves_the_gate_consistent() -> None:
    # A request waiting for a slot whose client leaves (its task cancelled) just as a slot frees: release()
    # drops the cancelled waiter before the waiting task runs again, which then found nothing to remove and
    # raised ValueError (an uncaught exception, seen by the soak) instead of its cancellation.
    async def scene() -> tuple[BaseException | None, int, int, bool]:
        slots = Slots(1)
        await slots.acquire()
        waiting = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)  # it waits for the slot
        waiting.cancel()  # its waiter is cancelled at once; the task runs again only on the loop's next turn
        slots.release()  # meanwhile the slot frees
        (outcome,) = await asyncio.gather(waiting, return_exceptions=True)
        return outcome, slots.busy, slots.waiting, slots.idle.is_set()

    outcome, busy, waiting, idle = asyncio.run(scene())
    assert isinstance(outcome, asyncio.CancelledError)
    assert (busy, waiting, idle) == (0, 0, True)

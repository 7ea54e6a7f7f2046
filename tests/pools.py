"""A pool runner started and closed around a test, and the scenarios its jobs handed ahead are put through.

The thread pool's tests (tests/test_pool_deadline.py), the process pool's
(tests/test_processing.py) and the sub-interpreter pool's
(tests/test_interpreters.py, which CI runs on 3.13 too) share them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from concurrent.futures.process import EXTRA_QUEUED_CALLS
from typing import Any, TypeVar, cast

from lab.errors import LabError
from lab.modes.contract import Runner
from lab.modes.interpreters.runner import InterpreterRunner
from lab.modes.processing.runner import ProcessRunner
from lab.modes.threading.runner import ThreadRunner
from tests.procs import STALL_S

R = TypeVar("R", bound=Runner)
Pool = ThreadRunner | ProcessRunner | InterpreterRunner


@contextlib.asynccontextmanager
async def started(runner: R) -> AsyncIterator[R]:
    """`runner` started, and closed however the test ends."""
    await runner.start()
    try:
        yield runner
    finally:
        await runner.close()


def assert_a_job_handed_ahead_counts_its_deadline_from_its_start(
    runner: Pool, seconds: float, answered: bool
) -> dict[str, Any]:
    """`runner`: one worker, --job-timeout 1 s. A job of 0.8 s, and one of `seconds` handed ahead behind it
    (lab/modes/pool.py's `ahead`), which its worker begins 0.8 s after the hand-over and reports so. Its 0.5 s
    ends 1.3 s after the hand-over, on time from its start (`answered`); 1.5 s is not (a 504). Meanwhile one
    runs and one waits. The snapshot of that moment."""

    async def main() -> tuple[dict[str, Any], Any]:
        async with started(runner):
            first = asyncio.ensure_future(runner.run("sleep", {"seconds": 0.8}))
            await asyncio.sleep(0.05)
            behind = asyncio.ensure_future(runner.run("sleep", {"seconds": seconds}))
            for _ in range(60):  # (the first job's start, read by the snapshot, within 0.6 s of its 0.8)
                await asyncio.sleep(0.01)
                snapshot = runner.snapshot()
                if snapshot["running"] and snapshot["waiting"]:
                    break
            return snapshot, (await asyncio.gather(first, behind, return_exceptions=True))[1]

    snapshot, outcome = asyncio.run(main())
    assert (snapshot["running"], snapshot["waiting"]) == (1, 1)
    if answered:
        assert isinstance(outcome, dict) and outcome["result"] == seconds
    else:
        assert isinstance(outcome, LabError) and outcome.status_code == 504
    return snapshot


async def _until(predicate: Callable[[], object]) -> None:
    """Poll `predicate` on the event loop until it holds; fail once STALL_S seconds have passed."""
    deadline = asyncio.get_running_loop().time() + STALL_S
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.01)
    assert predicate(), f"still not so after {STALL_S:g} s"


@contextlib.asynccontextmanager
async def held(runner: Pool) -> AsyncIterator[None]:
    """`runner`'s one worker kept from taking any job the runner hands it until the block exits, however long
    this test waits for a core meanwhile: a process pool's worker stopped (SIGSTOP; SIGCONT at the exit), a thread's
    or an interpreter's given a read of a pipe first, which the exit writes to (a descriptor is the process's, in
    whichever interpreter it is read)."""
    if isinstance(runner, ProcessRunner):
        [pid] = runner.snapshot()["worker_pids"]
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
        return
    reader, writer = os.pipe()
    try:
        gate = runner.executor.submit(os.read, reader, 1)
        try:
            yield
        finally:
            os.write(writer, b"x")
            await asyncio.wrap_future(gate)
    finally:
        os.close(reader)
        os.close(writer)


def assert_a_job_abandoned_in_the_queue_never_runs(runner: Pool, between: int) -> None:
    """`runner`: one worker, held (`held`) while a job, `between` more handed ahead behind it, then one of 5 s
    whose client leaves while it waits, are handed over: it is withdrawn (counted in `cancelled_waiting`) and never
    runs, its future cancelled or answered None by the worker that skipped it, before the job asked for after it.
    (Cancelled in the executor's own queue; in a process pool's workers' queue, marked, and skipped by the worker
    that takes it.) Held, the worker cannot reach the abandoned job before its client has left, whatever stalls."""

    async def main() -> Future[Any]:
        async with started(runner):
            async with held(runner):
                first = asyncio.ensure_future(runner.run("sleep", {"seconds": 0}))
                others = [asyncio.ensure_future(runner.run("sleep", {"seconds": 0})) for _ in range(between)]
                abandoned = asyncio.ensure_future(runner.run("sleep", {"seconds": 5}))
                await _until(lambda: runner.counts["submitted"] == between + 2)
                # (These pools' executors hand back concurrent.futures' futures.)
                futures = [cast(Future[Any], job.future) for job in runner._running.values()]
                handed = futures[between + 1]
                if isinstance(runner, ProcessRunner):
                    # Where the executor puts each job before the withdrawal: a job a worker and one more in the
                    # workers' own queue (it marks them running), which the held worker does not empty.
                    moved = min(between + 2, runner.size + EXTRA_QUEUED_CALLS)
                    await _until(lambda: sum(future.running() for future in futures) == moved)
                abandoned.cancel()
                await asyncio.gather(abandoned, return_exceptions=True)
            await asyncio.gather(first, *others)
            # One worker, its jobs in order: this one is taken after the abandoned one was skipped (or dropped).
            await runner.run("sleep", {"seconds": 0})
            return handed

    handed = asyncio.run(main())
    assert (runner.counts["submitted"], runner.counts["cancelled_waiting"]) == (between + 3, 1)
    # It never ran: cancelled before any worker took it, or taken and skipped (a run's record had it run).
    assert handed.cancelled() or handed.result(timeout=0) is None

"""A pool runner started and closed around a test, and the scenarios its jobs handed ahead are put through.

The thread pool's tests (tests/test_pool_deadline.py), the process pool's
(tests/test_processing.py) and the sub-interpreter pool's
(tests/test_interpreters.py, which CI runs on 3.13 too) share them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from lab.errors import LabError
from lab.modes.contract import Runner
from lab.modes.interpreters.runner import InterpreterRunner
from lab.modes.processing.runner import ProcessRunner
from lab.modes.threading.runner import ThreadRunner

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


def assert_a_job_abandoned_in_the_queue_never_runs(runner: Pool, between: int) -> None:
    """`runner`: one worker. A job of 0.5 s, `between` jobs of none handed ahead behind it, then one of 5 s
    whose client leaves while it waits: it is withdrawn (counted in `cancelled_waiting`) and never runs, so the
    job asked for after it does not wait behind its 5 s on the one worker. (Cancelled in the executor's own
    queue; in a process pool's workers' queue, marked, and skipped by the worker that takes it.)"""

    async def main() -> float:
        async with started(runner):
            first = asyncio.ensure_future(runner.run("sleep", {"seconds": 0.5}))
            await asyncio.sleep(0.05)
            others = [asyncio.ensure_future(runner.run("sleep", {"seconds": 0})) for _ in range(between)]
            abandoned = asyncio.ensure_future(runner.run("sleep", {"seconds": 5}))
            await asyncio.sleep(0.05)
            abandoned.cancel()
            await asyncio.gather(first, *others, abandoned, return_exceptions=True)
            asked = asyncio.get_running_loop().time()
            await runner.run("sleep", {"seconds": 0})
            return asyncio.get_running_loop().time() - asked

    took = asyncio.run(main())
    assert (runner.counts["submitted"], runner.counts["cancelled_waiting"]) == (between + 3, 1)
    assert took < 4  # not behind the abandoned job's 5 s (an idle worker takes a job in milliseconds)

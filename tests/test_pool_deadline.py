"""A pool job's deadline: --job-timeout from when a worker starts it, and only the deadline's timeout is a 504."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from lab.errors import LabError
from lab.modes.threading.runner import ThreadRunner
from tests.pools import assert_a_job_handed_ahead_counts_its_deadline_from_its_start
from workloads.timing import RunRecord


class _Runs(ThreadRunner):
    """A thread pool whose every job is `work` (instead of a workload), handed one a thread, its start told by
    `_started` `started_after` seconds after the hand-over (the real one's threads write theirs themselves)."""

    ahead = 0
    lazy_starts = False

    def __init__(
        self,
        work: Callable[[], Any],
        job_timeout: float,
        started_after: float = 0.0,
        start_timeout: float | None = None,
    ) -> None:
        super().__init__("threading", size=2, max_pending=10, job_timeout=job_timeout)
        self.work = work
        self.started_after = started_after
        self.start_timeout = start_timeout  # (a cluster's: how long a job may wait for a worker to begin it)

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self.work)
        # A worker that reports its start late (a process pool's worker still starting up) is not late itself.
        loop.call_later(self.started_after, self._started, job_id, None)
        return future


def _run(runner: _Runs, hold: tuple[float, float] | None = None) -> Any:
    """The runner's answer to one job; `hold`: (after, for) seconds, the event loop held as a /blocking run holds it."""

    async def main() -> Any:
        await runner.start()
        if hold is not None:
            asyncio.get_running_loop().call_later(hold[0], time.sleep, hold[1])
        try:
            return await runner.run("count", {})
        finally:
            await runner.close()

    return asyncio.run(main())


def _works_a_second() -> str:
    time.sleep(1.0)
    return "done"


def _works_two_seconds() -> str:
    time.sleep(2.0)
    return "done"


def _raises_timeout() -> None:
    raise TimeoutError("the job's own")


def test_a_job_over_its_deadline_is_a_504() -> None:
    runner = _Runs(lambda: time.sleep(0.5), job_timeout=0.1)
    with pytest.raises(LabError) as error:
        _run(runner)
    assert error.value.status_code == 504
    assert runner.counts["timed_out"] == 1


def test_the_deadline_counts_from_the_start_the_worker_reports() -> None:
    # 2 s of work with a 1.2 s deadline, reported started 1.8 s in: the deadline falls at 3 s, a second after
    # the job ends, room for a worker thread slow to wake (counted from the hand-over it would fall 0.8 s before).
    runner = _Runs(_works_two_seconds, job_timeout=1.2, started_after=1.8)
    assert _run(runner) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_timeout_the_job_raises_is_the_jobs_error_not_a_504() -> None:
    runner = _Runs(_raises_timeout, job_timeout=30.0)
    with pytest.raises(TimeoutError, match="the job's own"):
        _run(runner)
    assert runner.counts["timed_out"] == 0


def _works_a_moment() -> str:
    time.sleep(0.02)
    return "done"


def test_a_job_that_ended_as_its_deadline_fell_is_answered() -> None:
    # The job ends 0.02 s in, its deadline falls at 0.1 s, and the loop is held from 0.01 to 1.5 s: it learns of
    # both in the same turn (the hold leaves a worker thread slow to wake more than a second). The job was on time.
    runner = _Runs(_works_a_moment, job_timeout=0.1)
    assert _run(runner, hold=(0.01, 1.5)) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_start_reported_as_the_start_deadline_fell_is_a_start() -> None:
    # A cluster's job: reported started 0.05 s in, with 0.1 s to start, and the loop held from 0.01 to 0.6 s, so
    # it learns of the start and of the start deadline in the same turn. The job started in time: it gets
    # --job-timeout (2 s) for its 1 s of work, not a 504 and not "no worker started it".
    runner = _Runs(_works_a_second, job_timeout=2.0, started_after=0.05, start_timeout=0.1)
    assert _run(runner, hold=(0.01, 0.6)) == "done"
    assert runner.counts["timed_out"] == 0


class _LazyRuns(_Runs):
    """A pool whose workers' start reports are read only when the runner asks (a process pool's, lazy_starts):
    each says the job began when it was handed over."""

    lazy_starts = True

    def __init__(self, work: Callable[[], Any], job_timeout: float) -> None:
        super().__init__(work, job_timeout)
        self.unread: list[tuple[int, float]] = []
        self.reads = 0

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        self.unread.append((job_id, time.monotonic()))
        return asyncio.get_running_loop().run_in_executor(self.executor, self.work)

    def _refresh_starts(self) -> None:
        self.reads += 1
        for job_id, at in self.unread:
            self._started(job_id, None, at)
        self.unread.clear()


def test_a_start_read_late_counts_from_when_the_worker_began() -> None:
    # Nothing reports the start until the deadline is checked, at --job-timeout after the hand-over at the
    # earliest; the report says the job began then, so its deadline has fallen: a 504, not another 0.2 s.
    runner = _LazyRuns(lambda: time.sleep(1.0), job_timeout=0.2)
    with pytest.raises(LabError) as error:
        _run(runner)
    assert error.value.status_code == 504
    assert runner.reads == 1


def test_a_start_read_lazily_still_gets_its_whole_timeout() -> None:
    runner = _LazyRuns(_works_a_moment, job_timeout=2.0)
    assert _run(runner) == "done"
    assert runner.counts["timed_out"] == 0


class _ReportedATurnLate(_Runs):
    """A cluster's pool whose start reports come a turn of the loop after their time (a Dask report's handler
    runs once the read that brought it resumes), and whose jobs end a turn after their executor's future."""

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()
        inner = loop.run_in_executor(self.executor, self.work)
        loop.call_later(self.started_after, lambda: loop.call_soon(self._started, job_id, None))

        async def a_turn_later() -> Any:
            return await inner

        return asyncio.ensure_future(a_turn_later())


def test_a_start_reported_a_turn_after_the_start_deadline_fell_is_a_start() -> None:
    # The loop, held from 0.01 to 0.6 s, learns in one turn of the start (at 0.05 s) and of the start deadline
    # (0.1 s); the start's report comes the turn after the watchdog fell. The job started in time.
    runner = _ReportedATurnLate(_works_a_second, job_timeout=2.0, started_after=0.05, start_timeout=0.1)
    assert _run(runner, hold=(0.01, 0.6)) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_job_that_ended_as_its_deadline_fell_is_answered_though_its_end_comes_a_turn_later() -> None:
    runner = _ReportedATurnLate(_works_a_moment, job_timeout=0.1)
    assert _run(runner, hold=(0.01, 1.5)) == "done"
    assert runner.counts["timed_out"] == 0


@pytest.mark.parametrize(("seconds", "answered"), [(0.5, True), (1.5, False)])
def test_a_thread_job_handed_ahead_counts_its_deadline_from_when_its_thread_begins_it(
    seconds: float, answered: bool
) -> None:
    # The real thread pool, one thread: the job handed ahead writes its start into its record itself.
    runner = ThreadRunner("threading", size=1, max_pending=10, job_timeout=1.0)
    assert_a_job_handed_ahead_counts_its_deadline_from_its_start(runner, seconds, answered)

"""A pool job's deadline: --job-timeout from when a worker starts it, and only the deadline's timeout is a 504."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from lab.errors import LabError
from lab.modes.threading.runner import ThreadRunner
from tests.pools import assert_a_job_handed_ahead_counts_its_deadline_from_its_start
from tests.procs import STALL_S
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
        self.posted = threading.Event()  # a job's end is on the event loop's queue

    def _executed(self) -> asyncio.Future[Any]:
        handed = self.executor.submit(self.work)
        future = asyncio.wrap_future(handed)
        # Called after wrap_future's own callback, which has queued the end for the loop by then.
        handed.add_done_callback(lambda _: self.posted.set())
        return future

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        future = self._executed()
        # A worker that reports its start late (a process pool's worker still starting up) is not late itself.
        asyncio.get_running_loop().call_later(self.started_after, self._started, job_id, None)
        return future


class _Gate:
    """What the jobs wait for instead of a clock: their work ends when the test's event loop opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def work(self) -> str:
        assert self.opened.wait(STALL_S), f"the gate stayed shut {STALL_S:g} s"
        return "done"


@dataclass(frozen=True)
class _Hold:
    """The event loop held (as a /blocking run holds it) from `at` seconds after the hand-over until `past` seconds
    after it have passed; with `ends`, the gate opened as the hold begins and the loop held until the job's end is
    queued for it too. Whatever falls meanwhile, the loop learns of in the one turn after the hold."""

    at: float
    past: float
    ends: bool = False


def _run(runner: _Runs, gate: _Gate, opens_at: float | None = None, hold: _Hold | None = None) -> Any:
    """The runner's answer to one job of `gate.work`; the gate opened by the loop `opens_at` seconds after the
    hand-over (None: only once the job is answered) or by `hold`. Timers fall in the order of their times, so
    which of a deadline and a job's end comes first is the loop's order, not a race with a thread's wake-up."""

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        await runner.start()
        handed = loop.time()
        if opens_at is not None:
            loop.call_later(opens_at, gate.opened.set)
        if hold is not None:
            loop.call_later(hold.at, _held, runner, gate, hold, handed)
        try:
            return await runner.run("count", {})
        finally:
            gate.opened.set()
            await runner.close()

    return asyncio.run(main())


def _held(runner: _Runs, gate: _Gate, hold: _Hold, handed: float) -> None:
    if hold.ends:
        gate.opened.set()
        assert runner.posted.wait(STALL_S), f"the job did not end in {STALL_S:g} s"
    time.sleep(max(0.0, handed + hold.past - time.monotonic()))


def _raises_timeout() -> None:
    raise TimeoutError("the job's own")


def test_a_job_over_its_deadline_is_a_504() -> None:
    gate = _Gate()
    runner = _Runs(gate.work, job_timeout=0.1)
    with pytest.raises(LabError) as error:
        _run(runner, gate)  # (the gate opens only after the answer)
    assert error.value.status_code == 504
    assert runner.counts["timed_out"] == 1


def test_the_deadline_counts_from_the_start_the_worker_reports() -> None:
    # A 3 s deadline, the start reported 3.2 s after the hand-over and the job's end 0.1 s later: counted from
    # the hand-over the deadline falls first (the loop's order: a 504); from the start it falls at 6.2 s, 2.9 s
    # after the gate opened, the time a worker thread has to wake and end.
    gate = _Gate()
    runner = _Runs(gate.work, job_timeout=3.0, started_after=3.2)
    assert _run(runner, gate, opens_at=3.3) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_timeout_the_job_raises_is_the_jobs_error_not_a_504() -> None:
    runner = _Runs(_raises_timeout, job_timeout=30.0)
    with pytest.raises(TimeoutError, match="the job's own"):
        _run(runner, _Gate())
    assert runner.counts["timed_out"] == 0


def test_a_job_that_ended_as_its_deadline_fell_is_answered() -> None:
    # The loop is held from 0.01 s until the job has ended and its 0.1 s deadline has fallen: it learns of both
    # in the same turn. The job was on time.
    gate = _Gate()
    runner = _Runs(gate.work, job_timeout=0.1)
    assert _run(runner, gate, hold=_Hold(0.01, 0.2, ends=True)) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_start_reported_as_the_start_deadline_fell_is_a_start() -> None:
    # A cluster's job: reported started 0.05 s in, with 0.1 s to start, and the loop held from 0.01 to 0.3 s, so
    # it learns of the start and of the start deadline in the same turn, and of the gate opened at 0.2 s after
    # both. The job started in time: it gets --job-timeout (30 s) to end, not a 504 and not "no worker started it".
    gate = _Gate()
    runner = _Runs(gate.work, job_timeout=30.0, started_after=0.05, start_timeout=0.1)
    assert _run(runner, gate, opens_at=0.2, hold=_Hold(0.01, 0.3)) == "done"
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
        return self._executed()

    def _refresh_starts(self) -> None:
        self.reads += 1
        for job_id, at in self.unread:
            self._started(job_id, None, at)
        self.unread.clear()


def test_a_start_read_late_counts_from_when_the_worker_began() -> None:
    # Nothing reports the start until the deadline is checked, at --job-timeout after the hand-over at the
    # earliest; the report says the job began then, so its deadline has fallen: a 504, not another 0.2 s.
    gate = _Gate()
    runner = _LazyRuns(gate.work, job_timeout=0.2)
    with pytest.raises(LabError) as error:
        _run(runner, gate)
    assert error.value.status_code == 504
    assert runner.reads == 1


def test_a_start_read_lazily_still_gets_its_whole_timeout() -> None:
    # Its end comes 0.3 s in, past any deadline shorter than the 30 s asked for.
    gate = _Gate()
    runner = _LazyRuns(gate.work, job_timeout=30.0)
    assert _run(runner, gate, opens_at=0.3) == "done"
    assert runner.counts["timed_out"] == 0


class _ReportedATurnLate(_Runs):
    """A cluster's pool whose start reports come a turn of the loop after their time (a Dask report's handler
    runs once the read that brought it resumes), and whose jobs end a turn after their executor's future."""

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        loop = asyncio.get_running_loop()
        inner = self._executed()
        loop.call_later(self.started_after, lambda: loop.call_soon(self._started, job_id, None))

        async def a_turn_later() -> Any:
            return await inner

        return asyncio.ensure_future(a_turn_later())


def test_a_start_reported_a_turn_after_the_start_deadline_fell_is_a_start() -> None:
    # The loop, held from 0.01 to 0.3 s, learns in one turn of the start (at 0.05 s) and of the start deadline
    # (0.1 s); the start's report comes the turn after the watchdog fell. The job started in time.
    gate = _Gate()
    runner = _ReportedATurnLate(gate.work, job_timeout=30.0, started_after=0.05, start_timeout=0.1)
    assert _run(runner, gate, opens_at=0.2, hold=_Hold(0.01, 0.3)) == "done"
    assert runner.counts["timed_out"] == 0


def test_a_job_that_ended_as_its_deadline_fell_is_answered_though_its_end_comes_a_turn_later() -> None:
    gate = _Gate()
    runner = _ReportedATurnLate(gate.work, job_timeout=0.1)
    assert _run(runner, gate, hold=_Hold(0.01, 0.2, ends=True)) == "done"
    assert runner.counts["timed_out"] == 0


@pytest.mark.parametrize(("seconds", "answered"), [(0.5, True), (1.5, False)])
def test_a_thread_job_handed_ahead_counts_its_deadline_from_when_its_thread_begins_it(
    seconds: float, answered: bool
) -> None:
    # The real thread pool, one thread: the job handed ahead writes its start into its record itself.
    runner = ThreadRunner("threading", size=1, max_pending=10, job_timeout=1.0)
    assert_a_job_handed_ahead_counts_its_deadline_from_its_start(runner, seconds, answered)

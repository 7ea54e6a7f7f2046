"""The pools' common part: an admission gate in front of an executor, deadlines, cancellation, counters.

Every pool mode sits behind the same gate (lab/modes/gate.py's `Slots`): at most one job a worker
(and `ahead` more a worker, for the thread, process and interpreter pools and a cluster) is handed to
an executor at once, the rest wait here, in order, where they can be counted
(/stats), bounded (--max-pending) and cancelled when their client goes away.
A job handed ahead is counted as waiting until its worker begins it, and
withdrawn if its client goes first, where the executor can give it back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
from collections.abc import Callable
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Self

from lab.errors import LabError
from lab.modes.gate import Slots
from lab.modes.starts import StartReports
from lab.settings import Setting, count
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from lab.modes.contract import ServerConfig

RETRY_AFTER_S = 1


def pool_size(flag: str, behind: str, default: Callable[[], int], shown: str) -> Setting[int]:
    """The flag that sizes a mode's pool, per server process: at least 1, `default` when not given.

    `behind` says what the pool is (its help's start), `shown` how its default is reckoned.
    """
    return Setting(
        flag,
        count(1),
        default_factory=default,
        metavar="N",
        help=f"{behind} (default: {shown} = %(default)s)",
    )


# A job's future as `_submit` returns it: an executor's own, or one of the event loop's (a cluster's).
Handed = asyncio.Future[RunRecord] | concurrent.futures.Future[RunRecord]


def _call_on(loop: asyncio.AbstractEventLoop, callback: Callable[[Handed], None], future: Handed) -> None:
    """`callback(future)` in `loop`'s thread, from whichever thread ended `future`; nothing once it has closed."""
    with contextlib.suppress(RuntimeError):  # (closed: nobody waits for the job any more)
        loop.call_soon_threadsafe(callback, future)


class _PastDeadline(Exception):
    """A pool job's deadline fell before it ended (PoolRunner._check_deadlines)."""


class _Replaced(Exception):
    """A pool job's pool was replaced before any worker began it (PoolRunner.run hands it to the new one)."""


@dataclass
class _Job:
    """A job handed to an executor: `outcome` resolves when the job ends (its result) or its deadline falls
    first (_PastDeadline); the request awaits it."""

    outcome: asyncio.Future[RunRecord]
    handed: float  # the event loop's clock when it was handed over
    began: float | None = None  # the event loop's clock when a worker really began it, once reported
    future: Handed | None = None  # the executor's, once submitted
    worker: int | str | None = None
    # Takes the job back from an executor that has not begun it (True: it will not run); None: no way to.
    withdraw: Callable[[], bool] | None = None


class PoolRunner:
    """What every pool mode shares: admission, deadlines, cancellation, counters.

    A subclass names its pool (`kind`), says what a job over its deadline
    costs (`timeout_outcome`), declares the setting that sizes it
    (`size_setting`, its `settings` unless it declares more), starts its executor in `start` and
    hands one job to it in `_submit`; /stats facts, the start-up log line and
    `from_config` follow from those.
    """

    kind: str
    timeout_outcome: str
    inline = False
    settings: ClassVar[tuple[Setting[Any], ...]] = ()
    # The flag that sizes the pool (None: sized otherwise, as a cluster is).
    size_setting: ClassVar[Setting[int] | None] = None
    # How long a job may wait for a worker to begin it. None: as long as it takes, since the gate hands a
    # local executor at most a job a worker and `ahead` more, behind jobs of its own (a cluster, shared and far
    # away, says otherwise).
    start_timeout: float | None = None
    # Jobs handed to the executor ahead of each worker, beyond the one it runs, so that a worker ending a job
    # finds the next one there: handed over from the gate, it comes a wake-up of the event loop later (a local
    # pool's, tens of microseconds), or a round trip later (a cluster's: the result back through its scheduler,
    # the next task out through it, milliseconds). Only where the runner can learn when a worker begins a job
    # (a job handed ahead waits, and its deadline counts from its start) and take back one not begun.
    ahead: ClassVar[int] = 0
    # Whether its workers' start reports wait to be read until something needs them (a deadline to check,
    # /stats, every so many jobs) rather than wake the event loop each: `_refresh_starts` reads them (those down
    # `_starts`, the pipe the process and interpreter pools set: lab/modes/starts.py).
    lazy_starts: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "settings" not in cls.__dict__ and cls.size_setting is not None:
            cls.settings = (cls.size_setting,)  # the flag that sizes it is the one it declares

    def __init__(self, mode: str, size: int, max_pending: int, job_timeout: float) -> None:
        self.mode = mode
        self.size = size
        self.max_pending = max_pending
        self.job_timeout = job_timeout
        self.slots = Slots(self.lanes(size))
        self.idle = self.slots.idle
        self.counts = dict.fromkeys(("submitted", "rejected", "timed_out", "cancelled_waiting", "broken"), 0)
        self._executor: Executor | None = None
        self._starts: StartReports | None = None  # (lazy_starts' pipe, where a pool has one)
        self._job_ids = itertools.count()
        self._running: dict[int, _Job] = {}
        self._failed: dict[int, _Job] = {}  # jobs ended in error, until their request has dealt with it (_run)
        self._watchdog: asyncio.TimerHandle | None = None  # falls at the earliest deadline of a running job
        # Where `page` queries (config.database), for pools whose workers open their own connections.
        self.database: str | None = None

    @classmethod
    def from_config(cls, mode: str, config: ServerConfig) -> Self:
        if cls.size_setting is None:
            raise TypeError(f"{cls.__name__} has no size_setting: it must build itself from the config")
        runner = cls(mode, config[cls.size_setting], config.max_pending, config.job_timeout)
        runner.database = config.database
        return runner

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            raise LabError(503, f"the {self.mode} pool is shut down", retry_after=RETRY_AFTER_S)
        return self._executor

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        try:
            return await self._run(workload, params, last_try=False)
        except _Replaced:
            # Its pool was replaced before any worker began it (beside a worker killed or dead): the new one runs
            # it, as it would have had the job waited in the gate and not been handed ahead. Once.
            return await self._run(workload, params, last_try=True)

    async def _run(self, workload: str, params: dict[str, Any], *, last_try: bool) -> RunRecord:
        self._admit()
        try:
            await self.slots.acquire()
        except asyncio.CancelledError:
            self.counts["cancelled_waiting"] += 1  # its client left before it started
            raise
        job_id, record, job = self._hand_over(workload, params)
        try:
            return await self._outcome(job, record)
        except _PastDeadline:
            if record.began is None:
                raise self.not_started(job_id) from None
            self.counts["timed_out"] += 1
            raise self.overran(job_id, workload) from None
        except BrokenProcessPool:
            self.on_broken()
            if not last_try and record.withdraw is not None and record.withdraw():
                raise _Replaced from None
            self.counts["broken"] += 1
            raise LabError(
                503,
                "the process pool broke while running this job (a worker died or was killed); "
                "it is being replaced, retry",
                retry_after=RETRY_AFTER_S,
            ) from None
        except asyncio.CancelledError:
            if record.outcome.done() and not record.outcome.cancelled():
                record.outcome.exception()  # settled in the turn its client left: nobody will read it
            task = asyncio.current_task()
            if not job.cancelled() or (task is not None and task.cancelling()):
                # Our client left (lab/web/lifecycle.py). A job no worker has
                # started yet need not run at all.
                if record.began is None and self.on_abandoned(job_id):
                    self.counts["cancelled_waiting"] += 1
                raise
            # The executor dropped the job: its pool was replaced before a worker took it (a local executor
            # cancels only a job no worker has taken; a cluster's job is cancelled only as the loop closes).
            if not last_try:
                raise _Replaced from None
            raise LabError(
                503, "the pool was replaced before this job started; retry", retry_after=RETRY_AFTER_S
            ) from None
        finally:
            self._failed.pop(job_id, None)

    async def _outcome(self, job: Handed, record: _Job) -> RunRecord:
        """The job's result, or _PastDeadline if its deadline fell first as the loop knows it when this request
        resumes: a job's end or start it learned after the watchdog fell (a /blocking run held the loop, a
        cluster's report came a turn behind) was on time, and a start now known counts --job-timeout from then."""
        try:
            return await record.outcome
        except _PastDeadline:
            deadline = self._deadline(record, record.began)
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if not job.done() and left is not None and left > 0:
                await asyncio.wait([asyncio.wrap_future(job)], timeout=left)
            if job.done():
                return job.result()
            raise

    def _deadline(self, job: _Job, began: float | None) -> float | None:
        """When `job`'s deadline falls, on the loop's clock, given its start `began` (job.began, read once by
        the caller: a pool thread writes it): --job-timeout from its start (a worker still starting up, a
        replaced pool, is not the job's fault); until then a cluster's start_timeout; else none. A job whose
        start is read lazily and not read yet: --job-timeout from its hand-over."""
        if began is not None:
            return began + self.job_timeout
        if self.lazy_starts:
            # Its earliest: a start not read yet came after the hand-over, so a start read later never moves
            # the watchdog armed for this one to an earlier time.
            return job.handed + self.job_timeout
        return None if self.start_timeout is None else job.handed + self.start_timeout

    def _watch(self, deadline: float | None) -> None:
        """The watchdog falls at the earliest deadline: armed for `deadline` unless armed for one before it.

        One timer for the whole pool, not one a job: a job's own (an asyncio.timeout, and a shield between it
        and the job) cost each request a timer made and cancelled and two futures more: awaiting a future took
        13.8 µs with both, 7.1 without (docs/results.md#overhead).
        """
        if deadline is None or (self._watchdog is not None and self._watchdog.when() <= deadline):
            return
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = asyncio.get_running_loop().call_at(deadline, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """Every job whose deadline has fallen gets _PastDeadline; then the watchdog waits for the next one.

        What the loop learned in the same turn counts first: a job that ended as its deadline fell, or a start
        reported as its start deadline fell (a /blocking run held the loop through both), was on time.
        """
        self._refresh_starts()  # (a start read here moves no watchdog: this one is falling)
        self._watchdog = None
        now = asyncio.get_running_loop().time()
        upcoming = []
        for job in self._running.values():
            began = job.began
            deadline = self._deadline(job, began)
            if deadline is None or job.outcome.done() or (job.future is not None and job.future.done()):
                continue
            if began is None and self.lazy_starts:
                upcoming.append(now + self.job_timeout)  # not begun when its start was last read: that far at least
            elif deadline <= now:
                job.outcome.set_exception(_PastDeadline())
            else:
                upcoming.append(deadline)
        if upcoming:
            self._watch(min(upcoming))

    def _admit(self) -> None:
        """A 503 if every worker has a job and --max-pending jobs wait already (in the gate, or handed ahead)."""
        workers = self.slots.size // (1 + self.ahead)
        waiting = self.slots.waiting + max(0, self.slots.busy - workers)
        if self.slots.busy >= workers and waiting >= self.max_pending:
            self.counts["rejected"] += 1
            raise LabError(
                503,
                f"{self.mode} pool is full: {min(self.slots.busy, workers)} jobs running and "
                f"{waiting} waiting (--max-pending {self.max_pending}); retry later",
                retry_after=RETRY_AFTER_S,
            )

    def _hand_over(self, workload: str, params: dict[str, Any]) -> tuple[int, _Job, Handed]:
        """Submit a job that holds a slot: its id, its record, and the future of its result."""
        job_id = next(self._job_ids)
        loop = asyncio.get_running_loop()
        record = self._running[job_id] = _Job(loop.create_future(), loop.time())
        if self._starts is not None:
            self._starts.handed()  # (read every so many jobs, so that the pipe never fills)
        try:
            job = record.future = self._submit(job_id, workload, params)
        except BaseException:
            del self._running[job_id]
            self.slots.release()
            raise
        self.counts["submitted"] += 1
        self._watch(self._deadline(record, record.began))

        def ended(_: object) -> None:
            # The slot frees when the job has really ended, not when its
            # client stopped waiting: a timed-out thread still holds a core.
            outcome = record.outcome
            if job.cancelled():
                outcome.cancel()  # (the executor dropped it: its pool was replaced)
            else:
                error = job.exception()  # (marks it retrieved, whether or not a client still waits)
                if outcome.done():
                    pass  # its deadline fell first, or its client left: its request has decided already
                elif error is not None:
                    # Its start may still be on its way (its worker's record not read yet): a record read after
                    # this still reaches it, until its request has decided on it (_run), which a withdrawal reads.
                    self._failed[job_id] = record
                    outcome.set_exception(error)
                else:
                    outcome.set_result(job.result())
            del self._running[job_id]
            self.slots.release()

        if isinstance(job, concurrent.futures.Future):
            # An executor's own future, ended in its worker's thread: `ended` runs in the loop's next turn, as
            # wrap_future's copy of the state would, and sets the outcome there. (An asyncio future between the
            # two ran `ended` a turn later: one more turn of the loop a job, docs/results.md#overhead.)
            job.add_done_callback(partial(_call_on, loop, ended))
        else:
            job.add_done_callback(ended)
        return job_id, record, job

    def lanes(self, workers: int) -> int:
        """How many jobs the gate hands `workers` workers at once: one each, and `ahead` more each."""
        return workers * (1 + self.ahead)

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> Handed:
        """Hand job `job_id` to the executor: its future, an executor's own (concurrent.futures) or the loop's."""
        raise NotImplementedError

    def _started(self, job_id: int, worker: int | str | None, at: float | None = None) -> None:
        """A worker (pid or thread; None: not known yet) has begun job `job_id`, at `at` (time.monotonic(),
        which on Linux is the same clock in every process, and the event loop's; None: now): its deadline counts
        from then."""
        job = self._running.get(job_id) or self._failed.get(job_id)
        if job is not None and job.began is None:
            if worker is not None:  # (None: not known yet; a thread may have written its name itself)
                job.worker = worker
            now = asyncio.get_running_loop().time()
            job.began = now if at is None else min(at, now)
            self._watch(self._deadline(job, job.began))

    def _refresh_starts(self) -> None:
        """Read the start reports waiting in `_starts` (a thread pool's threads write theirs into the job)."""
        if self._starts is not None:
            self._starts.read()

    def overran(self, job_id: int, workload: str) -> LabError:
        """The answer to a job past its deadline (a 504), after `on_timeout` has dealt with its worker."""
        self.on_timeout(job_id)
        return LabError(504, f"{workload} ran longer than --job-timeout {self.job_timeout:g} s; {self.timeout_outcome}")

    def not_started(self, job_id: int) -> LabError:
        """The answer to a job no worker began within `start_timeout` (a cluster's; a pool's never ends)."""
        raise NotImplementedError

    def on_timeout(self, job_id: int) -> None:
        pass

    def on_abandoned(self, job_id: int) -> bool:
        """Nobody waits for this job any more and no worker has started it: withdraw it if possible.

        A job handed to an executor ahead of its worker waits in a queue; it is taken back if its `_submit` said how
        (`withdraw`: the thread and interpreter pools' executors cancel it, the process pool's too or marks it, a
        cluster's scheduler cancels it) and no worker has begun it. A pool that is handed one job a worker never
        leaves one queued there. True if withdrawn.
        """
        job = self._running.get(job_id)
        return job is not None and job.withdraw is not None and job.withdraw()

    def on_broken(self) -> None:
        pass

    def facts(self) -> dict[str, Any]:
        """The pool's size under its setting's name ("thread_pool": 6), as the ideal reads it."""
        return {} if self.size_setting is None else {self.size_setting.name: self.size}

    def ready_note(self) -> str | None:
        """The pool's size for the start-up log line: "thread pool 6"."""
        return None if self.size_setting is None else f"{self.size_setting.name.replace('_', ' ')} {self.size}"

    def snapshot(self) -> dict[str, Any]:
        self._refresh_starts()
        jobs = self._running.values()
        since = [job.began for job in jobs if job.began is not None]
        return {
            "kind": self.kind,
            "size": self.size,
            "running": len(since),
            # In the gate, or handed to the executor and not begun yet (a job ahead of a Dask worker's, a
            # process-pool job whose start report is still on its way).
            "waiting": self.slots.waiting + len(self._running) - len(since),
            "max_pending": self.max_pending,
            "busy_workers": sorted({job.worker for job in jobs if job.worker is not None}, key=str),
            "longest_running_s": round(asyncio.get_running_loop().time() - min(since), 3) if since else None,
            **self.counts,
        }

"""The distributed mode's watch on its cluster: the scheduler polled, its silence timed, waiting requests failed.

A cable cut on a real network is silent: no RST, no FIN, the scheduler just
stops answering (and a worker stops heartbeating). So the lab asks the
scheduler which workers it has every WATCH_EVERY_S, and

- a scheduler that has not answered for SCHEDULER_SILENT_S (counted in the
  event loop's own time: /blocking runs stall this loop, which must turn to
  read the scheduler's answer, and a stall is not a silence, stalls.py) is lost: every
  request waiting on the cluster gets 503 with Retry-After, and so does every
  new one until it answers again (a shorter silence, a link that flapped,
  costs nothing but the wait: TCP delivers what was sent once it is back);
- a cluster with no worker for NO_WORKER_GRACE_S fails its waiting requests
  the same way (a nanny restarts a killed worker in a second or two);
- the workers' heartbeats, as the scheduler stamps them, tell which worker
  has gone quiet (lab/modes/distributed/roster.py), before the scheduler
  drops it (its worker-ttl, or its TCP timeout: docs/operating.md).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lab.errors import LabError
from lab.modes.distributed.roster import Roster
from lab.modes.distributed.stalls import within_awake
from lab.modes.pool import RETRY_AFTER_S

if TYPE_CHECKING:
    from distributed import Client

# How often the scheduler is asked which workers it has.
WATCH_EVERY_S = 0.5
# A scheduler silent this long is lost (ten polls: a flap or a busy second is not an outage).
SCHEDULER_SILENT_S = 5.0
# A cluster with no worker gets this long for one to join (a nanny restarts a killed worker in a second or
# two) before waiting requests get 503.
NO_WORKER_GRACE_S = 5.0


class Health:
    """What the lab knows of its cluster's health: `view` (/stats) and `problem()` (why a request cannot run).

    `resized(threads)` is called whenever the cluster's worker threads are
    counted anew; `address()` names the scheduler in messages.
    """

    def __init__(
        self, roster: Roster, view: dict[str, Any], *, embedded: bool,
        resized: Callable[[int], None], address: Callable[[], str],
    ) -> None:  # fmt: skip
        self.roster = roster
        self.view = view
        self.embedded = embedded
        self._resized = resized
        self._address = address
        self.heard = time.monotonic()  # when the scheduler last answered
        self._empty_since: float | None = None  # when the cluster was last seen with no worker
        self._trouble: asyncio.Future[LabError] | None = None  # failed while requests cannot be served

    def begin(self) -> None:
        """A new connection: nothing is wrong yet."""
        self.heard = time.monotonic()
        self._empty_since = None
        self._trouble = asyncio.get_running_loop().create_future()

    def trouble(self) -> asyncio.Future[LabError] | None:
        """A future that resolves to the error for the requests waiting now, when something goes wrong."""
        return self._trouble

    def problem(self) -> LabError | None:
        """The error a new request gets now (the scheduler lost, no worker left), or None."""
        trouble = self._trouble
        return trouble.result() if trouble is not None and trouble.done() else None

    # ---------- watching ----------

    async def watch(self, client: Client) -> str:
        """Poll the scheduler through `client` until its connection is closed for good; the reason."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            if client.status in ("closing", "closed"):
                self.lost("the connection was closed")
                return "the connection was closed"
            try:
                # Silence counted in the loop's own time, not the wall clock's: /blocking runs on this loop
                # stall our side of the exchange, and a stall is not a silence (lab/modes/distributed/stalls.py).
                await within_awake(self.refresh(client), SCHEDULER_SILENT_S)
            except TimeoutError as error:
                self.lost(str(error))
            except OSError as error:  # refused or reset at once: lost once it has lasted as long
                silent = time.monotonic() - self.heard
                if silent >= SCHEDULER_SILENT_S:
                    self.lost(f"no answer for {silent:.0f} s: {str(error) or type(error).__name__}")
            else:
                self.heard = time.monotonic()

    def lost(self, why: str) -> None:
        self.view["state"] = "disconnected"
        self._fail_waiting(
            LabError(503, f"lost the Dask scheduler {self._address()} ({why}); retry", retry_after=RETRY_AFTER_S)
        )

    async def refresh(self, client: Client) -> None:
        """Ask the scheduler which workers it has: note losses, learn new workers' pids, resize, fail on none."""
        assert client.scheduler is not None  # set once the client is connected
        identity = await client.scheduler.identity(n_workers=-1)
        workers: dict[str, Any] = identity["workers"]
        new = self.roster.take_roll(workers)
        if new:
            pids = await client.run(os.getpid, workers=new, on_error="ignore")
            for address, pid in pids.items():
                if isinstance(pid, int):
                    self.roster.learn(address, pid)
        threads = sum(int(w["nthreads"]) for w in workers.values())
        self.view.clear()
        self.view.update({
            "scheduler": identity.get("address"),
            "embedded": self.embedded,
            "state": "running",
            "threads": threads,
            "workers": [self.roster.describe(address, w) for address, w in sorted(workers.items())],
            "workers_lost": list(self.roster.lost[-10:]),
        })  # fmt: skip
        self._count_threads(threads)

    def _count_threads(self, threads: int) -> None:
        """The gate follows the cluster's threads; with none for NO_WORKER_GRACE_S, waiting requests get 503."""
        if threads:
            self._empty_since = None
            self._resized(threads)
            if self._trouble is None or self._trouble.done():
                self._trouble = asyncio.get_running_loop().create_future()
            return
        self._empty_since = self._empty_since or time.monotonic()
        if time.monotonic() - self._empty_since >= NO_WORKER_GRACE_S:
            lost = ", ".join(self.roster.lost[-3:]) or "every worker"
            self._fail_waiting(
                LabError(503, f"Dask worker {lost} was lost and no worker is left; retry when one has joined",
                         retry_after=RETRY_AFTER_S)
            )  # fmt: skip

    def _fail_waiting(self, error: LabError) -> None:
        if self._trouble is None or self._trouble.done():
            self._trouble = asyncio.get_running_loop().create_future()
        self._trouble.set_result(error)

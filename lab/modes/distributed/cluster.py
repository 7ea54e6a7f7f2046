"""The distributed mode's cluster: connecting to it, handing it tasks, and watching its workers come and go.

Imported by lab/modes/distributed/runner.py when it first connects, never before: the
server pays for `distributed` (most of a second) only when /distributed is
used, and `configure()` sets Dask's logging and pickling policy then, once,
in the server process, after its own logging is set up.

Faults: a worker that dies mid-task has its task rerun elsewhere by the
scheduler (up to distributed.scheduler.allowed-failures); with no worker left
every waiting request gets 503 naming the worker lost, and a scheduler lost
mid-run 503 with Retry-After (the runner reconnects on a later request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle
import dask.config
import distributed
from distributed.client import FutureCancelledError
from distributed.config import initialize_logging

from lab.errors import LabError
from lab.modes.distributed import worker as dask_worker
from lab.modes.distributed.roster import Roster
from lab.modes.distributed.stalls import within_awake
from lab.modes.distributed.worker import WarmUp, task, workloads_upload
from lab.modes.pool import RETRY_AFTER_S
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster


log = logging.getLogger(__name__)

# distributed's logging defaults put Tornado's loggers at CRITICAL, which
# would silence this server's access log and fork_processes' "child
# restarting" line: the server's logging is lab/logs.py's, and distributed's
# own loggers report what goes wrong.
LOGGING = {"distributed": "warning", "tornado": "notset", "tornado.application": "notset"}

# What the embedded cluster's workers run with (their nannies pass it to each
# worker they start). Their statistical profiler samples the task's thread
# every 10 ms and needs the GIL to do it, slowing pure-Python tasks, for a
# dashboard nobody runs here: off. Their GIL meter stays on (Dask's own, with
# gilknocker): /stats shows each worker's reading. A cluster of your own keeps
# its own settings (docs/operating.md, "A Dask cluster of your own"). (Dotted
# keys: a nanny merges this over its own config one level deep, then each
# worker applies it with dask.config.set.)
# The embedded workers share the terminal's process group, so a Ctrl-C reaches
# them too and each printed a KeyboardInterrupt traceback; the server stops
# them itself (through their nannies), so they ignore SIGINT. A preload given
# as code (it has a space) runs in each worker process as it starts.
IGNORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)"
EMBEDDED_WORKER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.gil.enabled": True,
    "distributed.worker.preload": [IGNORE_SIGINT],
}

# How often the scheduler is asked which workers it has.
WATCH_EVERY_S = 0.5
# A cluster with no worker gets this long for one to join (a nanny restarts a
# killed worker in a second or two) before waiting requests get 503.
NO_WORKER_GRACE_S = 5.0
# Connecting to an external scheduler at start-up; a lost one is retried with less patience.
CONNECT_TIMEOUT_S = 10.0
RECONNECT_TIMEOUT_S = 3.0

_configured = False


def configure() -> None:
    """Dask's settings for this server process, once: logging, no second GIL meter, tasks shipped by value."""
    global _configured
    if _configured:
        return
    _configured = True
    # An embedded scheduler would run a GIL meter of its own in this process, beside the server's
    # (lab/instruments/gil.py).
    dask.config.set({"distributed.logging": LOGGING, "distributed.admin.system-monitor.gil.enabled": False})
    initialize_logging(dask.config.config)  # importing distributed applied its defaults
    # The scheduler and the workers unpickle tasks: shipped by value, the task
    # and the warm-up plugin need nothing of the lab's importable there.
    cloudpickle.register_pickle_by_value(dask_worker)


class Cluster:
    """One connection to a Dask cluster (embedded or external) and what is known of its workers.

    `started(job_id, address)` is called when a worker begins a task;
    `resized(threads)` whenever the cluster's worker threads are counted anew.
    `view` is what /stats shows of it.
    """

    def __init__(
        self,
        scheduler: str | None,
        workers: int,
        view: dict[str, Any],
        *,
        started: Callable[[int, str], None],
        resized: Callable[[int], None],
        tls: tuple[Path, Path, Path | None] | None = None,  # the runner's TlsFiles: CA, certificate, key
    ) -> None:
        self.scheduler = scheduler
        self.tls = tls
        self.workers = workers  # embedded cluster only
        self.view = view
        self.roster = Roster()
        self._started = started
        self._resized = resized
        self.topic = f"lab-started-{uuid.uuid4().hex[:8]}"
        self._task = task()
        self.client: Client | None = None
        self._cluster: LocalCluster | None = None
        self._scratch: str | None = None  # the embedded cluster's own local directory
        self._watcher: asyncio.Task[None] | None = None
        self._empty_since: float | None = None  # when the cluster was last seen with no worker
        self._trouble: asyncio.Future[LabError] | None = None  # failed when no worker is left
        self._chores: set[asyncio.Future[None]] = set()  # cancellations and kills under way, kept until done
        self._futures: dict[int, Future[RunRecord]] = {}  # job id -> its task, while it runs

    @property
    def running(self) -> bool:
        return self.client is not None and self.client.status == "running"

    def address(self) -> str:
        return str(self.view.get("scheduler") or self.scheduler or "embedded")

    # ---------- connecting ----------

    async def reconnect(self) -> None:
        """Connect again after losing the scheduler, with less patience than at start-up."""
        await self.connect(RECONNECT_TIMEOUT_S)

    async def connect(self, patience: float = CONNECT_TIMEOUT_S) -> None:
        await self.disconnect()
        started = time.monotonic()
        client = await (self._start_embedded() if self.scheduler is None else self._join(patience))
        client.subscribe_topic(self.topic, self._on_started)
        await client.register_plugin(WarmUp(), name=WarmUp.name)
        self.client = client
        self._trouble = asyncio.get_running_loop().create_future()
        await self._refresh()
        self._watcher = asyncio.ensure_future(self._watch())
        log.info(
            "Dask cluster ready in %.1f s: scheduler %s, %d worker(s), pids %s",
            time.monotonic() - started,
            self.view["scheduler"],
            len(self.roster.pids),
            sorted(self.roster.pids.values()),
        )

    async def _start_embedded(self) -> Client:
        log.info("starting the embedded Dask cluster: %d single-threaded worker process(es)", self.workers)
        self.view["state"] = "starting"
        # A directory of its own, not Dask's machine-wide default
        # (/tmp/dask-scratch-space): its workers put their local directory
        # first on sys.path, where a package another client uploaded to
        # some other cluster (UploadDirectory) would shadow this project's.
        self._scratch = tempfile.mkdtemp(prefix="lab-dask-")
        self._cluster = await distributed.LocalCluster(
            local_directory=self._scratch,
            asynchronous=True,
            n_workers=self.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            # Its HTTP routes on a free loopback port, and no dashboard (it would need bokeh).
            dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"dashboard": False},
            config=EMBEDDED_WORKER_CONFIG,  # passed on to each worker's nanny
        )
        client: Client = await distributed.Client(self._cluster, asynchronous=True)
        return client

    async def _join(self, patience: float) -> Client:
        security = None
        if self.tls is not None:  # mutual TLS: the lab shows its certificate, and checks the cluster's
            ca, cert, key = self.tls
            security = distributed.Security(
                tls_ca_file=str(ca),
                tls_client_cert=str(cert),
                tls_client_key=str(key) if key is not None else None,
                require_encryption=True,
            )
        client: Client = await distributed.Client(
            self.scheduler, asynchronous=True, timeout=patience, security=security
        )
        # External workers may not have this project: ship its workloads package, to each worker and
        # every worker that joins later (a registered plugin).
        await client.register_plugin(workloads_upload(), name="lab-workloads")
        return client

    async def disconnect(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close(timeout=2)

    # ---------- running ----------

    def submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        if self.client is None:
            raise LabError(503, "the Dask cluster is not connected; retry", retry_after=RETRY_AFTER_S)
        future = self.client.submit(self._task, job_id, self.topic, workload, params, pure=False)
        self._futures[job_id] = future
        return asyncio.ensure_future(self._outcome(job_id, future))

    async def _outcome(self, job_id: int, future: Future[RunRecord]) -> RunRecord:
        """The task's record, or the lab's error for what went wrong; the task is cancelled if we stop waiting."""
        trouble = self._trouble
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(future)]
        if trouble is not None:
            waits.append(trouble)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not waits[0].done():
                assert trouble is not None
                raise trouble.result()
            record: RunRecord = waits[0].result()
            return record
        except distributed.KilledWorker as error:
            raise LabError(
                503,
                f"this task's workers kept dying ({error}); the cluster is replacing them, retry",
                retry_after=RETRY_AFTER_S,
            ) from None
        except FutureCancelledError as error:
            raise LabError(
                503, f"the task was lost: {getattr(error, 'reason', None) or 'the scheduler connection broke'} "
                f"(scheduler {self.address()}); retry", retry_after=RETRY_AFTER_S,
            ) from None  # fmt: skip
        except asyncio.CancelledError:
            # Our client left, or the deadline passed: the cluster need not run it any more.
            if self.running:
                assert self.client is not None
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.client.cancel([future]))
            raise
        except LabError:
            raise
        except Exception as error:  # the task raised, or the cluster could not run it
            raise LabError(502, f"the Dask cluster failed this task: {type(error).__name__}: {error}") from None
        finally:
            waits[0].cancel()
            self._futures.pop(job_id, None)
            future.release()  # a result held here would be recomputed if its worker died

    def _on_started(self, event: tuple[float, dict[str, Any]]) -> None:
        _, message = event
        self.roster.learn(message["address"], message["pid"])
        self._started(message["job"], message["address"])

    def withdraw(self, job_id: int) -> bool:
        """Cancel a task no worker has started (its client left); True if there was one to cancel."""
        future = self._futures.get(job_id)
        if future is None or self.client is None:
            return False
        self._chore(self._cancel(future))
        return True

    def stop_worker(self, job_id: int, address: str) -> None:
        """The task runs on in its worker thread whatever the scheduler is told: its worker process has to go."""
        self._chore(self._stop_worker(job_id, address))

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        chore = asyncio.ensure_future(work)
        self._chores.add(chore)  # kept until done, so it is not collected half-way
        chore.add_done_callback(self._chores.discard)

    async def _cancel(self, future: Future[RunRecord]) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.cancel([future])

    async def _stop_worker(self, job_id: int, address: str) -> None:
        # Cancel first: a task whose worker died is rerun elsewhere, and this
        # one already had its answer (504).
        future = self._futures.get(job_id)
        if future is not None:
            await self._cancel(future)
        if not self.roster.kill(address) and self.client is not None:
            log.warning("restarting Dask worker %s: its task ran over --job-timeout", address)
            with contextlib.suppress(Exception):
                await self.client.restart_workers([address])

    # ---------- watching ----------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            client = self.client
            if client is None or client.status == "closed":
                self._scheduler_lost("the client gave up reconnecting")
                return  # a later request connects again
            if client.status != "running":  # reconnecting: nothing waiting will be answered meanwhile
                self._scheduler_lost(f"the client is {client.status}")
                continue
            try:
                # The loop's own time, not the wall clock's: /blocking runs on this loop stall the embedded
                # scheduler too, and a stall is not a lost scheduler (lab/modes/distributed/stalls.py).
                await within_awake(self._refresh(), RECONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as error:
                self._scheduler_lost(str(error) or type(error).__name__)

    def _scheduler_lost(self, why: str) -> None:
        self.view["state"] = "disconnected"
        self._fail_waiting(
            LabError(503, f"lost the Dask scheduler {self.address()} ({why}); retry", retry_after=RETRY_AFTER_S)
        )

    async def _refresh(self) -> None:
        """Ask the scheduler which workers it has: note losses, learn new workers' pids, resize, fail on none."""
        client = self.client
        if client is None:
            return
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
        self._count_threads(threads)
        self.view = {
            "scheduler": identity.get("address"),
            "embedded": self.scheduler is None,
            "state": "running",
            "threads": threads,
            "workers": [self.roster.describe(address, w) for address, w in sorted(workers.items())],
            "workers_lost": list(self.roster.lost[-10:]),
        }

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
        if self._trouble is not None and not self._trouble.done():
            self._trouble.set_result(error)

    # ---------- closing ----------

    async def close(self, wait: bool = True) -> None:
        if not wait and self._cluster is not None:
            self.roster.kill_all()
        await self.disconnect()
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            with contextlib.suppress(Exception):
                closing = cluster.close(timeout=10)
                if closing is not None:
                    await closing
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        self.view["state"] = "closed"

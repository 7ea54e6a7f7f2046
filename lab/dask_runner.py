"""The distributed mode: each run a task on a real Dask cluster, awaited on the server's own event loop.

Two ways to a cluster:

embedded   (default) a LocalCluster of worker processes, one thread each,
           `--dask-workers` of them (default: one per core, shared out among
           forked children), started by the server process on the first
           /distributed request (its workers take seconds to spawn and warm
           up, which no other test or mode should pay for) and closed on exit.
           Its scheduler runs inside the server process; no dashboard.
external   --dask-scheduler tcp://HOST:PORT: a cluster someone started with
           `dask scheduler` and `dask worker` (docs/operating.md, "A Dask cluster of your own"),
           connected at start-up. The client ships the `workloads` package to
           its workers, so they need only this project's requirements.

What the pools do, this runner does too (it is a PoolRunner): the admission
gate (its size follows the cluster's worker threads as workers come and go),
--max-pending 503s, --job-timeout 504s counted from when a worker starts the
task, and a task cancelled when its client leaves. Dask cannot interrupt a
running task any more than Python can stop a thread, so a task over its
deadline is cancelled and its worker process killed; the worker's nanny
starts a new one (uWSGI's harakiri, in Dask's terms).

Faults: a worker that dies mid-task has its task rerun elsewhere by the
scheduler (up to distributed.scheduler.allowed-failures); with no worker left
every waiting request gets 503 naming the worker lost, and a scheduler lost
mid-run 503 with Retry-After (the client reconnects on a later request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import cloudpickle
import dask.config
import psutil

from lab import ROOT
from lab.config import cpu_count
from lab.errors import LabError
from lab.runners import RETRY_AFTER_S, PoolRunner
from workloads.registry import RunRecord

# Importing distributed applies its logging defaults, Tornado's loggers at
# CRITICAL among them: that would silence this server's access log and
# fork_processes' "child restarting" line. The server's logging is
# lab/logs.py's (configured before this import); distributed's own loggers
# report what goes wrong.
LOGGING = {"distributed": "warning", "tornado": "notset", "tornado.application": "notset"}
dask.config.set(
    {
        "distributed.logging": LOGGING,
        # An embedded scheduler would run a GIL meter of its own in this
        # process, beside the server's (lab/gil.py).
        "distributed.admin.system-monitor.gil.enabled": False,
    }
)

import distributed  # noqa: E402 -- after the logging policy above
from distributed.client import FutureCancelledError  # noqa: E402

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster, Worker

    from lab.config import Config

log = logging.getLogger(__name__)

# The scheduler and the workers unpickle tasks: shipped by value, the task and
# the warm-up plugin below need nothing of the lab's importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# What the embedded cluster's workers run with (their nannies pass it to each
# worker they start). No dashboard reads their statistical profiler, which
# samples the task's thread every 10 ms and needs the GIL to do it: measured
# here on a pure-Python loop, it made each run 8-20 % slower. Their GIL meter
# stays on (Dask's own, with gilknocker): /stats shows each worker's reading.
# A cluster of your own keeps its own settings (docs/operating.md, "A Dask cluster of your own").
# (Dotted keys: a nanny merges this over its own config one level deep, then
# each worker applies it with dask.config.set.)
EMBEDDED_WORKER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.gil.enabled": True,
}

# How often the runner asks the scheduler which workers it has.
WATCH_EVERY_S = 0.5
# A cluster with no worker gets this long for one to join (a nanny restarts a
# killed worker in a second or two) before waiting requests get 503.
NO_WORKER_GRACE_S = 5.0
# Connecting to an external scheduler: at start-up, and again at most once per
# RECONNECT_EVERY_S when a request finds it lost (others get 503 meanwhile).
CONNECT_TIMEOUT_S = 10.0
RECONNECT_TIMEOUT_S = 3.0
RECONNECT_EVERY_S = 3.0
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def task() -> Callable[[int, str, str, dict[str, Any]], RunRecord]:
    """The function each task runs on a Dask worker.

    Made here rather than defined at module level: distributed pickles a task
    graph with plain pickle when it can, which would name this module and make
    the scheduler import it; a function local to a call cannot be pickled that
    way, so the graph goes through cloudpickle, which ships it by value.
    """

    def run_task(job_id: int, topic: str, name: str, params: dict[str, Any]) -> RunRecord:
        # Tell the server which worker took job `job_id`: it starts the job's
        # --job-timeout clock on this event (as on the process pool's pipe
        # message) and learns the pid to kill if the job overruns.
        import distributed  # noqa: PLC0415 -- shipped by value: its imports happen where it runs

        from workloads.registry import run_timed  # noqa: PLC0415

        worker = distributed.get_worker()
        worker.log_event(topic, {"job": job_id, "pid": os.getpid(), "address": worker.address})
        record = run_timed(name, params)
        record["address"] = worker.address
        return record

    return run_task


class WarmUp(distributed.WorkerPlugin):
    """On every worker process, once: cap BLAS threads as the server does, then pay the predict model's training."""

    name = "lab-warm-up"

    def setup(self, worker: Worker) -> None:
        if "OPENBLAS_NUM_THREADS" not in os.environ:  # a nanny sets it to 1; a bare `dask worker --no-nanny` does not
            from threadpoolctl import threadpool_limits  # noqa: PLC0415

            threadpool_limits(1)
        from workloads.registry import warm_up  # noqa: PLC0415

        warm_up()


def _workloads_upload() -> distributed.UploadFile:
    """The `workloads` package as a zip that each worker puts first on its sys.path and imports.

    Not UploadDirectory: that one unpacks into the nanny's directory, on one machine
    Dask's shared scratch folder, where two nannies unpacking at once collide
    (FileExistsError) and the plugin fails. A worker's own directory is its own.
    """
    with tempfile.TemporaryDirectory(prefix="lab-upload-") as folder:
        path = os.path.join(folder, "lab_workloads.zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for source in sorted((ROOT / "workloads").rglob("*.py")):
                archive.write(source, source.relative_to(ROOT))
        return distributed.UploadFile(path)  # reads the file now


class DaskRunner(PoolRunner):
    mode = "distributed"
    kind = "dask"
    timeout_outcome = "its task was cancelled and its worker process killed (its nanny starts a new one)"

    def __init__(self, workers: int, max_pending: int, job_timeout: float, scheduler: str | None = None) -> None:
        super().__init__(workers, max_pending, job_timeout)
        self.workers = workers  # embedded cluster only
        self.scheduler = scheduler
        self.topic = f"lab-started-{uuid.uuid4().hex[:8]}"
        self._task = task()
        self.client: Client | None = None
        self.cluster: LocalCluster | None = None
        self._scratch: str | None = None  # the embedded cluster's own local directory
        self._starting: asyncio.Task[None] | None = None
        self._attempted = 0.0  # when the last connection attempt began (time.monotonic)
        self._watcher: asyncio.Task[None] | None = None
        # What /stats shows (refreshed from the scheduler); before the first use, the plan.
        self._view: dict[str, Any] = {
            "scheduler": scheduler,
            "embedded": scheduler is None,
            "state": "not started",
            "threads": workers if scheduler is None else None,
            "workers": [],
        }
        self._pids: dict[str, int] = {}  # worker address -> pid, learnt from the workers themselves
        # Workers on this machine, as psutil knows them: killing one by its
        # Process never hits a pid the kernel has since given someone else.
        self._local: dict[str, psutil.Process] = {}
        self._lost: list[str] = []  # addresses of workers that left
        self._empty_since: float | None = None  # when the cluster was last seen with no worker
        self._trouble: asyncio.Future[LabError] | None = None  # failed when no worker is left
        self._chores: set[asyncio.Future[None]] = set()  # cancellations and kills under way, kept until done
        self._futures: dict[int, Future[RunRecord]] = {}  # job id -> its task, while it runs
        self.counts["workers_lost"] = 0

    @classmethod
    def from_config(cls, config: Config) -> Self:
        workers = config.dask_workers or max(1, cpu_count() // config.process_count)
        return cls(workers, config.max_pending, config.job_timeout, config.dask_scheduler)

    # ---------- connecting ----------

    @staticmethod
    def preflight(config: Config) -> str | None:
        """With --dask-scheduler, that scheduler must at least accept a connection."""
        if config.dask_scheduler is None:
            return None
        parts = urlsplit(config.dask_scheduler)
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=5).close()
        except OSError as error:
            return (
                f"cannot reach the Dask scheduler at {config.dask_scheduler} ({error.strerror or error}): start it "
                "first (docs/operating.md), or leave out --dask-scheduler for an embedded cluster"
            )
        return None

    async def start(self) -> None:
        if self.scheduler is not None:  # the user asked for that cluster: connect now, not at the first request
            try:
                await self._connect()
            except Exception as error:
                log.error(
                    "could not connect to the Dask scheduler %s: %s; /distributed will retry", self.scheduler, error
                )

    async def _ready(self) -> Client:
        if self.client is not None and self.client.status == "running":
            return self.client
        if self._starting is None or self._starting.done():
            if self._starting is not None and time.monotonic() - self._attempted < RECONNECT_EVERY_S:
                raise LabError(
                    503, f"the Dask scheduler {self._scheduler_address()} is unreachable; retry",
                    retry_after=RETRY_AFTER_S,
                )  # fmt: skip
            self._attempted = time.monotonic()
            # (Only an external scheduler can be lost; start() connected to it with more patience.)
            self._starting = asyncio.ensure_future(self._connect(RECONNECT_TIMEOUT_S))
        try:
            await asyncio.shield(self._starting)
        except LabError:
            raise
        except Exception as error:
            log.exception("could not reach the Dask cluster")
            raise LabError(
                503,
                f"the Dask scheduler {self._scheduler_address()} is unreachable: {error}",
                retry_after=RETRY_AFTER_S,
            ) from None
        assert self.client is not None
        return self.client

    async def _connect(self, patience: float = CONNECT_TIMEOUT_S) -> None:
        await self._disconnect()
        started = time.monotonic()
        if self.scheduler is None:
            log.info("starting the embedded Dask cluster: %d single-threaded worker process(es)", self.workers)
            self._view["state"] = "starting"
            # A directory of its own, not Dask's machine-wide default
            # (/tmp/dask-scratch-space): its workers put their local directory
            # first on sys.path, where a package another client uploaded to
            # some other cluster (UploadDirectory) would shadow this project's.
            self._scratch = tempfile.mkdtemp(prefix="lab-dask-")
            self.cluster = await distributed.LocalCluster(
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
            client = await distributed.Client(self.cluster, asynchronous=True)
        else:
            client = await distributed.Client(self.scheduler, asynchronous=True, timeout=patience)
            # External workers may not have this project: ship its workloads package, to each worker and
            # every worker that joins later (a registered plugin).
            await client.register_plugin(_workloads_upload(), name="lab-workloads")
        client.subscribe_topic(self.topic, self._on_started)
        await client.register_plugin(WarmUp(), name=WarmUp.name)
        self.client = client
        self._trouble = asyncio.get_running_loop().create_future()
        await self._refresh()
        self._watcher = asyncio.ensure_future(self._watch())
        log.info(
            "Dask cluster ready in %.1f s: scheduler %s, %d worker(s), pids %s",
            time.monotonic() - started,
            client.scheduler.address,
            len(self._pids),
            sorted(self._pids.values()),
        )

    async def _disconnect(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close(timeout=2)

    # ---------- running ----------

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        await self._ready()
        return await super().run(workload, params)

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
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
                f"(scheduler {self._scheduler_address()}); retry", retry_after=RETRY_AFTER_S,
            ) from None  # fmt: skip
        except asyncio.CancelledError:
            # Our client left, or the deadline passed: the cluster need not run it any more.
            if self.client is not None and self.client.status == "running":
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
        self._learn(message["address"], message["pid"])
        self._started(message["job"], message["address"])

    def on_abandoned(self, job_id: int) -> bool:
        # Queued at the scheduler behind other clients' tasks: it must not run
        # for nobody. (Were it just starting, its worker would finish it anyway.)
        future = self._futures.get(job_id)
        if future is None or self.client is None:
            return False
        self._chore(self._cancel(future))
        return True

    def on_timeout(self, job_id: int) -> None:
        # The task keeps running in its worker thread whatever the scheduler is
        # told; like the process pool's stuck worker, the process has to go.
        job = self._running.get(job_id)
        address = job.worker if job is not None else None
        if isinstance(address, str):
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
        process = self._local.get(address)
        if process is not None:
            log.warning("killing Dask worker %s (pid %d): its task ran over --job-timeout", address, process.pid)
            try:
                process.kill()
                return
            except psutil.NoSuchProcess:
                return  # gone already
            except psutil.Error:
                pass  # not ours to kill (another user's worker): ask the cluster instead
        if self.client is not None:
            log.warning("restarting Dask worker %s: its task ran over --job-timeout", address)
            with contextlib.suppress(Exception):
                await self.client.restart_workers([address])

    # ---------- watching the cluster ----------

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
                await asyncio.wait_for(self._refresh(), RECONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as error:
                self._scheduler_lost(str(error) or type(error).__name__)

    def _scheduler_lost(self, why: str) -> None:
        self._view["state"] = "disconnected"
        self._fail_waiting(
            LabError(503, f"lost the Dask scheduler {self._scheduler_address()} ({why}); retry",
                     retry_after=RETRY_AFTER_S)
        )  # fmt: skip

    async def _refresh(self) -> None:
        """Ask the scheduler which workers it has: resize the gate, note losses, learn new workers' pids."""
        client = self.client
        if client is None:
            return
        assert client.scheduler is not None  # set once the client is connected
        identity = await client.scheduler.identity(n_workers=-1)
        workers: dict[str, Any] = identity["workers"]
        gone = [address for address in self._pids if address not in workers]
        for address in gone:
            self._pids.pop(address)
            self._local.pop(address, None)
            self._lost.append(address)
            self.counts["workers_lost"] += 1
            log.warning("Dask worker %s left the cluster", address)
        new = [address for address in workers if address not in self._pids]
        if new:
            pids = await client.run(os.getpid, workers=new, on_error="ignore")
            for address, pid in pids.items():
                if isinstance(pid, int):
                    self._learn(address, pid)
        threads = sum(int(w["nthreads"]) for w in workers.values())
        if threads:
            self._empty_since = None
            self.slots.resize(threads)
            if self._trouble is None or self._trouble.done():
                self._trouble = asyncio.get_running_loop().create_future()
        else:
            self._empty_since = self._empty_since or time.monotonic()
            if time.monotonic() - self._empty_since >= NO_WORKER_GRACE_S:
                lost = ", ".join(self._lost[-3:]) or "every worker"
                self._fail_waiting(
                    LabError(503, f"Dask worker {lost} was lost and no worker is left; retry when one has joined",
                             retry_after=RETRY_AFTER_S)
                )  # fmt: skip
        self._view = {
            "scheduler": identity.get("address"),
            "embedded": self.scheduler is None,
            "state": "running",
            "threads": threads,
            "workers": [
                {
                    "address": address,
                    "pid": self._pids.get(address),
                    "host": w.get("host"),
                    "threads": w.get("nthreads"),
                    "memory_bytes": (w.get("metrics") or {}).get("memory"),
                    "memory_limit_bytes": w.get("memory_limit"),
                    "tasks_running": _executing(w),
                    # Dask's own GIL meter in the worker (None where gilknocker is not installed).
                    "gil_contention": (w.get("metrics") or {}).get("gil_contention"),
                }
                for address, w in sorted(workers.items())
            ],
            "workers_lost": list(self._lost[-10:]),
        }

    def _learn(self, address: str, pid: int) -> None:
        """A worker's pid, from the worker itself; a worker on this machine is also noted as a process."""
        if self._pids.get(address) == pid:
            return
        self._pids[address] = pid
        if _host(address) in LOCAL_HOSTS:
            with contextlib.suppress(psutil.Error):
                self._local[address] = psutil.Process(pid)

    def _fail_waiting(self, error: LabError) -> None:
        if self._trouble is not None and not self._trouble.done():
            self._trouble.set_result(error)

    def _scheduler_address(self) -> str:
        return str(self._view.get("scheduler") or self.scheduler or "embedded")

    # ---------- reporting and closing ----------

    def facts(self) -> dict[str, Any]:
        return {"dask": self._view}

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["worker_pids"] = sorted(self._pids.values())
        return snap

    async def close(self, wait: bool = True) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        if not wait and self.cluster is not None:
            for process in list(self._local.values()):  # running tasks would hold the close up for seconds
                with contextlib.suppress(psutil.Error):
                    process.kill()
        await self._disconnect()
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            with contextlib.suppress(Exception):
                closing = cluster.close(timeout=10)
                if closing is not None:
                    await closing
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        self._view["state"] = "closed"


def _host(address: str) -> str:
    return urlsplit(address).hostname or ""


def _executing(worker: dict[str, Any]) -> int:
    """Tasks the worker is running now (its last heartbeat's count of tasks per state)."""
    counts = (worker.get("metrics") or {}).get("task_counts") or {}
    return int(counts.get("executing", 0))

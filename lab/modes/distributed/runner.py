"""The distributed mode: each run a task on a real Dask cluster, awaited on the server's own event loop.

Two ways to a cluster:

embedded   (default) a LocalCluster of worker processes, one thread each,
           `--dask-workers` of them (default: one per core, shared out among
           forked children), started by the server process on the first
           /distributed request (its workers take seconds to spawn and warm
           up, which no other test or mode should pay for) and closed on exit.
           It runs in a process of its own (lab/modes/distributed/embedded.py:
           a scheduler on the server's loop slowed every other request under
           GIL load); no dashboard.
external   --dask-scheduler tcp://HOST:PORT: a cluster someone started with
           `dask scheduler` and `dask worker` (docs/operating.md, "A Dask
           cluster of your own"), connected at start-up. The client ships the
           `workloads` package to its workers, so they need only this
           project's requirements. tls://HOST:PORT with --dask-tls-*: one that
           admits only holders of its certificates (Dask's TLS: whoever can
           reach a scheduler can run code on its workers).

What the pools do, this runner does too (it is a PoolRunner): the admission
gate (five tasks a worker thread, `ahead`, following the cluster's threads as workers come and go),
--max-pending 503s, --job-timeout 504s counted from when a worker starts the
task, and a task cancelled when its client leaves. Dask cannot interrupt a
running task any more than Python can stop a thread, so a task over its
deadline is cancelled and its worker process killed; the worker's nanny
starts a new one (uWSGI's harakiri, in Dask's terms).

The cluster itself (lab/modes/distributed/cluster.py, which imports `distributed`) is
loaded on the first connection: a server that never serves /distributed
never pays for it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Self
from urllib.parse import urlsplit

from lab.errors import LabError
from lab.machine import cpu_count
from lab.modes.pool import RETRY_AFTER_S, PoolRunner
from lab.settings import Setting, Values, count
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from lab.modes.contract import ServerConfig
    from lab.modes.distributed.cluster import Cluster

log = logging.getLogger(__name__)

# A task waits for a worker to begin it at least this long (a nanny's restart takes seconds), or --job-timeout;
# and, handed ahead, --job-timeout more for each task a worker thread that may be ahead of it.
START_PATIENCE_S = 30.0
# A first connection that failed is tried again at most once per RECONNECT_EVERY_S (others get 503 meanwhile).
RECONNECT_EVERY_S = 3.0


def _scheduler(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or parts.port is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Dask scheduler address like tcp://127.0.0.1:8786")
    return text.rstrip("/")


def _pem_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file")
    return path


def _workers_for_embedded_only(values: Values) -> str | None:
    if values["dask_workers"] and values["dask_scheduler"]:
        return "--dask-workers sizes the embedded cluster; a --dask-scheduler cluster has its own workers"
    return None


def _tls_with_tls_scheduler(values: Values) -> str | None:
    tls = (values["dask_scheduler"] or "").startswith("tls://")
    given = values["dask_tls_ca"] or values["dask_tls_cert"] or values["dask_tls_key"]
    if tls and not (values["dask_tls_ca"] and values["dask_tls_cert"]):
        return "a tls:// Dask scheduler needs --dask-tls-ca and --dask-tls-cert (and --dask-tls-key if apart)"
    if given and not tls:
        return "--dask-tls-* are for a tls:// --dask-scheduler"
    return None


DASK_SCHEDULER = Setting[str | None](
    "--dask-scheduler",
    _scheduler,
    metavar="tcp://HOST:PORT",
    help="/distributed runs on this running Dask cluster (docs/operating.md); tls://HOST:PORT with the "
    "--dask-tls-* certificates for one that requires them; default: an embedded LocalCluster, started on "
    "the first /distributed request",
)
DASK_TLS_CA = Setting[Path | None](
    "--dask-tls-ca",
    _pem_file,
    metavar="FILE",
    help="a tls:// scheduler: the CA certificate (PEM) its cluster's certificates are signed with",
    check=_tls_with_tls_scheduler,
)
DASK_TLS_CERT = Setting[Path | None](
    "--dask-tls-cert", _pem_file, metavar="FILE", help="a tls:// scheduler: the lab's certificate (PEM), signed by it"
)
DASK_TLS_KEY = Setting[Path | None](
    "--dask-tls-key", _pem_file, metavar="FILE", help="its private key (PEM), unless --dask-tls-cert holds it"
)
DASK_WORKERS = Setting[int | None](
    "--dask-workers",
    count(1),
    metavar="N",
    help=lambda: (
        f"worker processes (one thread each) of the embedded cluster, per server process (default: one "
        f"per core, here {cpu_count()}, shared out among forked children)"
    ),
    check=_workers_for_embedded_only,
)


class TlsFiles(NamedTuple):
    """A tls:// scheduler's certificates, as distributed.security.Security takes them."""

    ca: Path
    cert: Path
    key: Path | None


class DaskRunner(PoolRunner):
    kind = "dask"
    # Five tasks a worker thread in the cluster, so that a worker ending one never idles through the round
    # trip to the lab and back (the result out through the scheduler, the next task in through it): the
    # scheduler hands each worker its next (Dask's queuing gives a worker of one thread two at a time) and,
    # once more than twice its threads are in flight, keeps the rest unassigned, for whichever worker frees
    # first. Measured at c = 10, /distributed/count?n=1 against a floor that submits all ten at once: 2.9-3.6x
    # with one task a thread, 2.0-2.3x with two, 1.1x with five and the results fetched together
    # (docs/results.md#overhead). On a cluster that does not queue (worker-saturation: inf) each task is
    # assigned as it comes, and a short one may wait behind a long one while another worker idles, until
    # Dask's work stealing moves it; so on the workers heard from while others are quiet (tasks restricted to
    # some workers are assigned at once), and beside other servers' tasks.
    ahead = 4
    timeout_outcome = "its task was cancelled and its worker process killed (its nanny starts a new one)"
    settings = (DASK_SCHEDULER, DASK_WORKERS, DASK_TLS_CA, DASK_TLS_CERT, DASK_TLS_KEY)

    def __init__(
        self, mode: str, workers: int, max_pending: int, job_timeout: float, scheduler: str | None = None
    ) -> None:
        super().__init__(mode, workers, max_pending, job_timeout)
        self.workers = workers  # embedded cluster only
        self.scheduler = scheduler
        self.tls: TlsFiles | None = None  # a tls:// scheduler's certificates
        self.counts["workers_lost"] = 0
        self.counts["not_started"] = 0
        # A task may wait at the scheduler (other clients' work, a worker restarting or silent) this long.
        # A job handed ahead may first wait for those before it on its worker thread (`ahead` at most, with the
        # lab's own tasks shared out among the threads), each of which may run its whole --job-timeout.
        self.start_timeout = max(job_timeout, START_PATIENCE_S) + job_timeout * self.ahead
        self._ran_on: dict[int, list[str]] = {}  # job id -> the workers that began it, in order
        self._cluster: Cluster | None = None
        self._starting: asyncio.Task[None] | None = None
        self._attempted = 0.0  # when the last connection attempt began (time.monotonic)
        # What /stats shows until the cluster has been asked: the plan.
        self._plan: dict[str, Any] = {
            "scheduler": scheduler,
            "embedded": scheduler is None,
            "state": "not started",
            "threads": workers if scheduler is None else None,
            "workers": [],
        }

    @classmethod
    def from_config(cls, mode: str, config: ServerConfig) -> Self:
        workers = config[DASK_WORKERS] or max(1, cpu_count() // config.process_count)
        runner = cls(mode, workers, config.max_pending, config.job_timeout, config[DASK_SCHEDULER])
        runner.database = config.database
        ca, cert = config[DASK_TLS_CA], config[DASK_TLS_CERT]
        if ca is not None and cert is not None:
            runner.tls = TlsFiles(ca, cert, config[DASK_TLS_KEY])
        return runner

    @staticmethod
    def preflight(config: ServerConfig) -> str | None:
        """With --dask-scheduler, that scheduler must at least accept a connection."""
        scheduler = config[DASK_SCHEDULER]
        if scheduler is None:
            return None
        parts = urlsplit(scheduler)
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=5).close()
        except OSError as error:
            return (
                f"cannot reach the Dask scheduler at {scheduler} ({error.strerror or error}): start it "
                "first (docs/operating.md), or leave out --dask-scheduler for an embedded cluster"
            )
        return None

    # ---------- connecting ----------

    async def start(self) -> None:
        if self.scheduler is not None:  # the user asked for that cluster: connect now, not at the first request
            try:
                await self._the_cluster().connect()
            except Exception as error:
                log.error("could not connect to the Dask scheduler %s: %s; trying again in the background",
                          self.scheduler, error)  # fmt: skip
                self._the_cluster().keep_trying()

    def _the_cluster(self) -> Cluster:
        if self._cluster is None:
            # Here, not at the top: loading `distributed` costs most of a second, paid on first use only.
            from lab.modes.distributed import cluster as dask_cluster  # noqa: PLC0415

            dask_cluster.configure()
            self._cluster = dask_cluster.Cluster(
                self.scheduler, self.workers, self._plan, started=self._task_started, resized=self._resize,
                tls=self.tls, database=self.database,
            )  # fmt: skip
        return self._cluster

    async def _ready(self) -> Cluster:
        """The cluster, connected and well; a 503 with Retry-After while it is not (never a wait on a lost one)."""
        cluster = self._the_cluster()
        if cluster.keeping:  # connected once: its keeper reconnects in the background, nobody waits for it
            problem = cluster.health.problem()
            if cluster.running and problem is None:
                return cluster
            raise problem or LabError(
                503, f"the Dask scheduler {cluster.address()} is unreachable; retry", retry_after=RETRY_AFTER_S
            )
        # Never connected: the embedded cluster starts on first use (its first request waits for it).
        if self._starting is None or self._starting.done():
            if self._starting is not None and time.monotonic() - self._attempted < RECONNECT_EVERY_S:
                raise LabError(
                    503, f"the Dask scheduler {cluster.address()} is unreachable; retry", retry_after=RETRY_AFTER_S
                )
            self._attempted = time.monotonic()
            self._starting = asyncio.ensure_future(cluster.connect())
        try:
            await asyncio.shield(self._starting)
        except Exception as error:
            log.exception("could not reach the Dask cluster")
            raise LabError(
                503, f"the Dask scheduler {cluster.address()} is unreachable: {error}", retry_after=RETRY_AFTER_S
            ) from None
        return cluster

    # ---------- running ----------

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        await self._ready()
        return await super().run(workload, params)

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        cluster = self._the_cluster()
        job = cluster.submit(job_id, workload, params)
        # Queued at the scheduler behind other clients' tasks, a task whose client left must not run for nobody:
        # withdrawn there. (Were it just starting, its worker would finish it anyway.)
        self._running[job_id].withdraw = partial(cluster.withdraw, job_id)
        self._ran_on[job_id] = []
        job.add_done_callback(lambda _: self._ran_on.pop(job_id, None))
        return job

    def _resize(self, threads: int) -> None:
        self.slots.resize(self.lanes(threads))

    def _task_started(self, job_id: int, address: str) -> None:
        """A worker began job `job_id` (again, elsewhere, if its first worker was lost): its deadline runs."""
        if job_id in self._ran_on:
            self._ran_on[job_id].append(address)
        self._started(job_id, address)

    def not_started(self, job_id: int) -> LabError:
        """No worker began the task within `start_timeout`: the cluster is busy, a worker that joined late still
        warms up (lab/modes/distributed/worker.py's task waits for it), or a worker went silent."""
        self.counts["not_started"] += 1
        self.on_abandoned(job_id)
        return LabError(
            503, f"no Dask worker started this task within {self.start_timeout:g} s (the cluster is busy with "
            "other work, the worker it was given to is still warming up, or it went silent); it was withdrawn, retry",
            retry_after=RETRY_AFTER_S,
        )  # fmt: skip

    def overran(self, job_id: int, workload: str) -> LabError:
        """Past its deadline: the task's fault (504, its worker killed) unless its worker left or went silent."""
        roster = self._cluster.roster if self._cluster is not None else None
        gone = [why for address in self._ran_on.get(job_id, []) if roster and (why := roster.gone(address))]
        if not gone:
            return super().overran(job_id, workload)
        self.on_abandoned(job_id)
        return LabError(
            503, f"{gone[-1]}, and this task did not finish elsewhere within --job-timeout {self.job_timeout:g} s; "
            "it was withdrawn, retry", retry_after=RETRY_AFTER_S,
        )  # fmt: skip

    def on_timeout(self, job_id: int) -> None:
        job = self._running.get(job_id)
        address = job.worker if job is not None else None
        if isinstance(address, str) and self._cluster is not None:
            self._cluster.stop_worker(job_id, address)

    # ---------- reporting and closing ----------

    def facts(self) -> dict[str, Any]:
        return {"dask": self._cluster.view if self._cluster is not None else self._plan}

    def ready_note(self) -> str | None:
        return None  # the cluster starts later and logs itself when ready

    def snapshot(self) -> dict[str, Any]:
        roster = self._cluster.roster if self._cluster is not None else None
        self.counts["workers_lost"] = len(roster.lost) if roster is not None else 0
        snap = super().snapshot()
        snap["worker_pids"] = sorted(roster.pids.values()) if roster is not None else []
        return snap

    async def close(self, wait: bool = True) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        if self._cluster is not None:
            await self._cluster.close(wait)
        self._plan["state"] = "closed"

"""The distributed mode: each run a task on a real Dask cluster, awaited on the server's own event loop.

Two ways to a cluster:

embedded   (default) a LocalCluster of worker processes, one thread each,
           `--dask-workers` of them (default: one per core, shared out among
           forked children), started by the server process on the first
           /distributed request (its workers take seconds to spawn and warm
           up, which no other test or mode should pay for) and closed on exit.
           Its scheduler runs inside the server process; no dashboard.
external   --dask-scheduler tcp://HOST:PORT: a cluster someone started with
           `dask scheduler` and `dask worker` (docs/operating.md, "A Dask
           cluster of your own"), connected at start-up. The client ships the
           `workloads` package to its workers, so they need only this
           project's requirements. tls://HOST:PORT with --dask-tls-*: one that
           admits only holders of its certificates (Dask's TLS: whoever can
           reach a scheduler can run code on its workers).

What the pools do, this runner does too (it is a PoolRunner): the admission
gate (its size follows the cluster's worker threads as workers come and go),
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

# A lost external scheduler is tried again at most once per RECONNECT_EVERY_S (others get 503 meanwhile).
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
                await self._connect()
            except Exception as error:
                log.error(
                    "could not connect to the Dask scheduler %s: %s; /distributed will retry", self.scheduler, error
                )

    def _the_cluster(self) -> Cluster:
        if self._cluster is None:
            # Here, not at the top: loading `distributed` costs most of a second, paid on first use only.
            from lab.modes.distributed import cluster as dask_cluster  # noqa: PLC0415

            dask_cluster.configure()
            self._cluster = dask_cluster.Cluster(
                self.scheduler,
                self.workers,
                self._plan,
                started=self._started,
                resized=self.slots.resize,
                tls=self.tls,
                database=self.database,
            )
        return self._cluster

    async def _connect(self, *, again: bool = False) -> None:
        cluster = self._the_cluster()
        await (cluster.reconnect() if again else cluster.connect())

    async def _ready(self) -> Cluster:
        cluster = self._cluster
        if cluster is not None and cluster.running:
            return cluster
        if self._starting is None or self._starting.done():
            if self._starting is not None and time.monotonic() - self._attempted < RECONNECT_EVERY_S:
                raise LabError(
                    503, f"the Dask scheduler {self._address()} is unreachable; retry", retry_after=RETRY_AFTER_S
                )
            self._attempted = time.monotonic()
            # (Only an external scheduler can be lost; start() connected to it with more patience.)
            self._starting = asyncio.ensure_future(self._connect(again=True))
        try:
            await asyncio.shield(self._starting)
        except LabError:
            raise
        except Exception as error:
            log.exception("could not reach the Dask cluster")
            raise LabError(
                503, f"the Dask scheduler {self._address()} is unreachable: {error}", retry_after=RETRY_AFTER_S
            ) from None
        return self._the_cluster()

    def _address(self) -> str:
        return self._cluster.address() if self._cluster is not None else str(self.scheduler or "embedded")

    # ---------- running ----------

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        await self._ready()
        return await super().run(workload, params)

    def _submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        return self._the_cluster().submit(job_id, workload, params)

    def on_abandoned(self, job_id: int) -> bool:
        # Queued at the scheduler behind other clients' tasks: it must not run
        # for nobody. (Were it just starting, its worker would finish it anyway.)
        return self._cluster is not None and self._cluster.withdraw(job_id)

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

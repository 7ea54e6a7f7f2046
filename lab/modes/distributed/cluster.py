"""The distributed mode's cluster: connecting to it, handing it tasks, and watching its workers come and go.

Imported by lab/modes/distributed/runner.py when it first connects, never before: the
server pays for `distributed` (most of a second) only when /distributed is
used, and `configure()` sets Dask's logging and pickling policy then, once,
in the server process, after its own logging is set up.

Faults: a worker that dies mid-task has its task rerun elsewhere by the
scheduler (up to distributed.scheduler.allowed-failures); with no worker left
every waiting request gets 503 naming the worker lost, and a scheduler lost
(silent, or its connection closed) 503 with Retry-After
(lab/modes/distributed/health.py). A connection Dask gave up on is opened
again in the background, every RECONNECT_EVERY_S, until the scheduler answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
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
from lab.modes.distributed.embedded import EmbeddedCluster
from lab.modes.distributed.fetches import Fetches
from lab.modes.distributed.health import Health
from lab.modes.distributed.roster import Roster
from lab.modes.distributed.spans import trim_key_split_cache
from lab.modes.distributed.worker import WARM_WAIT_S, WarmUp, task, warmed, workloads_upload
from lab.modes.pool import RETRY_AFTER_S
from lab.scratch import scratch_dir
from workloads.page.errors import Unavailable
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from distributed import Client, Future


log = logging.getLogger(__name__)

# distributed's logging defaults put Tornado's loggers at CRITICAL, which
# would silence this server's access log and fork_processes' "child
# restarting" line: the server's logging is lab/logs.py's, and distributed's
# own loggers report what goes wrong.
LOGGING = {"distributed": "warning", "tornado": "notset", "tornado.application": "notset"}

# Connecting to an external scheduler at start-up; a lost one is retried with less patience, this often.
CONNECT_TIMEOUT_S = 10.0
RECONNECT_TIMEOUT_S = 3.0
RECONNECT_EVERY_S = 3.0

# The client's own identity poll (configure() says why it is off): as good as never.
SCHEDULER_INFO_NEVER = "1 day"
# The embedded cluster's client keeps one connection for its calls to the scheduler (results fetched, the
# watch's polls): a pool opens a connection for each call that finds none free and keeps them all, so a server
# held one descriptor more (and its scheduler one more) for every call that had ever overlapped, two to four
# under load. At one, a call that finds it busy waits, and the pool closes it and opens another (loopback: a
# millisecond or two); so the lab fetches results one call at a time (fetches.py), and only a watch's
# poll that meets a fetch opens one. Not for an external cluster: there a call can take long (a worker's
# restart), and the watch's poll must not wait behind it.
EMBEDDED_CONNECTIONS = 1
# A finished task's future is released with the next submit, or after this long if none comes. Dask's client
# sends to its scheduler at most one batch per 10 ms: a release sent alone as a task ends made the next
# request's submit, a moment later, wait out those 10 ms (at c = 1, 21 ms a request against the floor's 12).
RELEASE_WITHIN_S = 0.1
# The embedded cluster's folder (its workers' local directories), named for this pid (lab/scratch.py).
SCRATCH_PREFIX = "lab-dask-"

_configured = False


def configure() -> None:
    """Dask's settings for this server process, once: logging, no second GIL meter, tasks shipped by value."""
    global _configured
    if _configured:
        return
    _configured = True
    # Only Dask's workers meter their GIL: the server has its own meter (lab/instruments/gil.py), and the
    # embedded cluster's scheduler process serves nothing that would need one.
    dask.config.set({
        "distributed.logging": LOGGING,
        "distributed.admin.system-monitor.gil.enabled": False,
        # A client asks its scheduler for its identity every 2 s on its own; the lab's watch asks the same
        # every WATCH_EVERY_S (lab/modes/distributed/health.py). When both asked at once (a loop stalled by a
        # /blocking run wakes both), the client's pool opened a second connection: kept for good by an
        # external cluster's client (a soak saw one descriptor more after such a stall), closed and opened
        # again by the embedded one's (EMBEDDED_CONNECTIONS).
        "distributed.client.scheduler-info-interval": SCHEDULER_INFO_NEVER,
    })  # fmt: skip
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
        database: str | None = None,  # where `page` queries, from every worker
    ) -> None:
        self.scheduler = scheduler
        self.tls = tls
        self.database = database
        self.workers = workers  # embedded cluster only
        self.view = view
        self.roster = Roster()
        self.health = Health(self.roster, view, embedded=scheduler is None, resized=resized, address=self.address)
        self._started = started
        self.topic = f"lab-started-{uuid.uuid4().hex[:8]}"
        self._task = task()
        self.client: Client | None = None
        self._cluster: EmbeddedCluster | None = None  # the embedded cluster's process, once started
        self._keeper: asyncio.Task[None] | None = None  # watches the connection, opens a new one when it is lost
        self._chores: set[asyncio.Future[None]] = set()  # cancellations and kills under way, kept until done
        self._futures: dict[int, Future[bytes]] = {}  # job id -> its task, while it runs
        self._ended: list[Future[bytes]] = []  # finished tasks, to release with the next submit
        self._release_timer: asyncio.TimerHandle | None = None
        # The embedded cluster's finished tasks' results, fetched together (fetches.py). An external cluster's
        # client keeps a connection for each call under way: there a fetch waiting on a silent worker must hold
        # up only its own request, and each fetches its own.
        self._fetches = Fetches(lambda: self.client) if scheduler is None else None

    @property
    def running(self) -> bool:
        return self.client is not None and self.client.status == "running"

    @property
    def keeping(self) -> bool:
        """A keeper is at work: the connection is watched, and opened again in the background when lost."""
        return self._keeper is not None and not self._keeper.done()

    def address(self) -> str:
        return str(self.view.get("scheduler") or self.scheduler or "embedded")

    # ---------- connecting ----------

    async def connect(self, patience: float = CONNECT_TIMEOUT_S) -> None:
        """Connect (raising what went wrong), then keep the connection: watched, and opened again when lost."""
        await self.disconnect()
        self.client = await self._open(patience)
        self._keeper = asyncio.ensure_future(self._keep())

    def keep_trying(self) -> None:
        """A first connection failed: keep opening one in the background until the scheduler answers."""
        if not self.keeping:
            self._keeper = asyncio.ensure_future(self._keep(connected=False))

    async def _keep(self, *, connected: bool = True) -> None:
        while True:
            if connected and self.client is not None:
                why = await self.health.watch(self.client)
                log.warning("lost the Dask scheduler %s (%s); connecting again", self.address(), why)
                await self._close_client()
            while self.client is None:
                try:
                    self.client = await self._open(RECONNECT_TIMEOUT_S, warm=False)  # serve as soon as it answers
                except Exception as error:  # unreachable still: a later attempt
                    log.debug("Dask scheduler %s still unreachable: %s", self.address(), error)
                    await asyncio.sleep(RECONNECT_EVERY_S)
            connected = True

    async def _open(self, patience: float, *, warm: bool = True) -> Client:
        """A connection with the lab's plugins registered (a scheduler that came back may be a new one);
        `warm`: its workers' warm-up waited for, so that nothing timed pays imports or the predict model."""
        started = time.monotonic()
        client = await (self._start_embedded() if self.scheduler is None else self._join(patience))
        try:
            client.subscribe_topic(self.topic, self._on_started)
            await client.register_plugin(WarmUp(self.database), name=WarmUp.name)
            if warm:
                await asyncio.wait_for(client.run(warmed, on_error="return"), WARM_WAIT_S)
            self.health.begin()
            await self.health.refresh(client)
        except BaseException:
            await _close_quietly(client)
            raise
        log.info(
            "Dask cluster ready in %.1f s: scheduler %s, %d worker(s), pids %s",
            time.monotonic() - started,
            self.view["scheduler"],
            len(self.roster.pids),
            sorted(self.roster.pids.values()),
        )
        return client

    async def _start_embedded(self) -> Client:
        """A client of the embedded cluster, started first (again, if its process has gone)."""
        if self._cluster is not None and not self._cluster.alive:
            log.warning("the embedded Dask cluster's process has gone: starting a new one")
            await self._cluster.stop()
            self._cluster = None
        if self._cluster is None:
            log.info("starting the embedded Dask cluster: %d single-threaded worker process(es)", self.workers)
            self.view["state"] = "starting"
            # A directory of its own, not Dask's machine-wide default
            # (/tmp/dask-scratch-space): its workers put their local directory
            # first on sys.path, where a package another client uploaded to
            # some other cluster (UploadDirectory) would shadow this project's.
            cluster = EmbeddedCluster(self.workers, await asyncio.to_thread(scratch_dir, SCRATCH_PREFIX))
            await cluster.start()  # (one that fails is stopped, its directory removed)
            self._cluster = cluster
        assert self._cluster.address is not None  # known once started
        client: Client = await distributed.Client(
            self._cluster.address, asynchronous=True, timeout=CONNECT_TIMEOUT_S, connection_limit=EMBEDDED_CONNECTIONS
        )
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
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None
        await self._close_client()

    async def _close_client(self) -> None:
        self._release_ended()
        client, self.client = self.client, None
        if client is not None:
            await _close_quietly(client)

    # ---------- running ----------

    def submit(self, job_id: int, workload: str, params: dict[str, Any]) -> asyncio.Future[RunRecord]:
        if self.client is None:
            raise LabError(503, "the Dask cluster is not connected; retry", retry_after=RETRY_AFTER_S)
        # A worker gone quiet still looks idle to the scheduler (until its worker-ttl or TCP's timeout), and
        # a task sent there waits out its deadline: while one is quiet, tasks go to the others only.
        heard = self.roster.heard()
        # First: a release's message is queued a turn of the loop later, and the submit's wakes the client's
        # sender; in this order both are in the batch it sends.
        self._release_ended()
        future = self.client.submit(
            self._task, job_id, self.topic, workload, params, pure=False, workers=heard, allow_other_workers=False
        )
        self._futures[job_id] = future
        # The client splits each new key too, and keeps the answer: a soak's hour grew a server ~1.5 MB.
        trim_key_split_cache()
        return asyncio.ensure_future(self._outcome(job_id, future))

    async def _outcome(self, job_id: int, future: Future[bytes]) -> RunRecord:
        """The task's record, or the lab's error for what went wrong; the task is cancelled if we stop waiting."""
        trouble = self.health.trouble()
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._result(future))]
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
        except (LabError, Unavailable):  # (the database's: a 503, as anywhere)
            raise
        except Exception as error:  # the task raised, or the cluster could not run it
            raise LabError(502, f"the Dask cluster failed this task: {type(error).__name__}: {error}") from None
        finally:
            waits[0].cancel()
            self._futures.pop(job_id, None)
            self._release_soon(future)  # a result held on would be recomputed if its worker died

    async def _result(self, future: Future[bytes]) -> RunRecord:
        """The task's record once it has ended (on the embedded cluster, fetched with every other result due)."""
        await future.exception()  # its end (an error's comes with it), without its result
        fetches = self._fetches if future.status == "finished" else None
        data = await fetches.fetch(future) if fetches is not None else None
        if data is None:  # fetched alone: it failed or was cancelled (raised here), or its batch could not fetch it
            data = await future
        record: RunRecord = pickle.loads(data)  # (pickled by the task: worker.py says why)
        return record

    def _release_soon(self, future: Future[bytes]) -> None:
        self._ended.append(future)
        if self._release_timer is None:
            self._release_timer = asyncio.get_running_loop().call_later(RELEASE_WITHIN_S, self._release_ended)

    def _release_ended(self) -> None:
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        ended, self._ended = self._ended, []
        for future in ended:
            future.release()

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

    async def _cancel(self, future: Future[bytes]) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.cancel([future])

    async def _stop_worker(self, job_id: int, address: str) -> None:
        # Cancel first: a task whose worker died is rerun elsewhere, and this
        # one already had its answer (504); so would a finished one whose result is still held.
        self._release_ended()
        future = self._futures.get(job_id)
        if future is not None:
            await self._cancel(future)
        if not self.roster.kill(address) and self.client is not None:
            log.warning("restarting Dask worker %s: its task ran over --job-timeout", address)
            with contextlib.suppress(Exception):
                await self.client.restart_workers([address])

    # ---------- closing ----------

    async def close(self, wait: bool = True) -> None:
        if not wait and self._cluster is not None:
            self.roster.kill_all()
        await self.disconnect()
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            await cluster.stop()  # (its directory removed)
        self.view["state"] = "closed"


async def _close_quietly(client: Client) -> None:
    with contextlib.suppress(Exception):
        await client.close(timeout=2)

"""What the distributed mode ships to a Dask cluster: the task each run is, and the plugins every worker gets.

lab/modes/distributed/cluster.py registers this module to be pickled by value, so the
scheduler and the workers need nothing of the lab's importable: only
`workloads`, which an external cluster is sent as a zip.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import pickle
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cloudpickle
import distributed

from lab import ROOT

if TYPE_CHECKING:
    from distributed import Worker


class Prepickled:
    """A function shipped by value, pickled once (cloudpickle) rather than at every submit.

    Dask's client pickles each task it submits: plain pickle first, which
    fails on a function local to a call, then its own pickler, which fails
    too, then cloudpickle, by value: py-spy put `Client.submit` at 517 µs of
    the server's CPU a request before, 270 after (/distributed/count?n=1, c = 10). This object pickles
    as the bytes made once and `pickle.loads`, so the first attempt succeeds;
    what the scheduler and the workers unpickle is the function itself.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.__name__ = function.__name__  # what Dask names the task's key after
        self._pickled = cloudpickle.dumps(function)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)

    def __reduce__(self) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
        return pickle.loads, (self._pickled,)


def task() -> Prepickled:
    """The function each task runs on a Dask worker, pickled once.

    Made here rather than defined at module level: plain pickle would name
    this module and make the scheduler import it; a function local to a call
    cannot be pickled that way, and cloudpickle ships it by value.
    """

    def run_task(job_id: int, topic: str, name: str, params: dict[str, Any]) -> bytes:
        # Tell the server which worker took job `job_id`: it starts the job's
        # --job-timeout clock on this event (as on the process pool's pipe
        # message) and learns the pid to kill if the job overruns.
        import pickle  # noqa: PLC0415

        import distributed  # noqa: PLC0415 -- shipped by value: its imports happen where it runs

        worker = distributed.get_worker()
        warm = warm_up_event(worker)
        if warm is not None and not warm.is_set():
            # A worker that joined after the lab connected (or a nanny's restart of one) warms up in a thread of
            # its own (WarmUp), and nobody waited for it: its first tasks wait here, before their start is told
            # and timed, so that no run is timed beside imports holding the GIL or pays for the model's training.
            warm.wait(WARM_WAIT_S)
        from workloads.registry import run_timed  # noqa: PLC0415 -- (after the warm-up, which imports it first)

        worker.log_event(topic, {"job": job_id, "pid": os.getpid(), "address": worker.address})
        record = run_timed(name, params)
        record["address"] = worker.address
        # Pickled here, as one value: Dask serializes a dict it sends one entry at a time, each with a header
        # of its own (136 µs for a run's record, 21 for these bytes), on the worker, and the scheduler and the
        # server handle the headers again.
        return pickle.dumps(record, pickle.HIGHEST_PROTOCOL)

    return Prepickled(run_task)


# The warm-up plugin's name on every worker.
WARM_UP = "lab-warm-up"


class WarmUp(distributed.WorkerPlugin):
    """On every worker process, once: cap BLAS threads as the server does, pay the predict model's training,
    point `page` at the server's database (each worker opens its own connections, as many as it has threads),
    and grow the table of interned strings to the size it keeps (`settle_interned`).

    It warms up in a thread of its own and its setup returns at once: a
    worker that joins runs its plugins' setups before its first heartbeat, and
    seconds of training there would look, to a scheduler with a short
    worker-ttl (a real network's setting, docs/operating.md), like a worker
    gone silent, restarted for it. The lab waits for the warmth of the workers
    it finds when it connects (`warmed`); a task given to one that joined later
    waits for it itself (`task`). Beside it the `workloads` upload may still be unpacking (a
    worker that joins later sets up both at once): the thread waits for the
    package, up to PACKAGE_WAIT_S.
    """

    name = WARM_UP

    def __init__(self, database_url: str | None = None) -> None:
        self.database_url = database_url

    def setup(self, worker: Worker) -> None:
        self.warm = threading.Event()
        self.warmed_at: float | None = None  # when (time.time()) the warm-up ended: no task starts before
        self.threads = worker.state.nthreads
        threading.Thread(target=self._warm_up, name=self.name, daemon=True).start()

    def _warm_up(self) -> None:
        try:
            for _ in range(int(PACKAGE_WAIT_S / 0.1)):
                if importlib.util.find_spec("workloads") is not None:
                    break
                time.sleep(0.1)  # the upload plugin puts the package on sys.path
            if "OPENBLAS_NUM_THREADS" not in os.environ:  # a nanny sets it to 1; a bare `dask worker --no-nanny` not
                from threadpoolctl import threadpool_limits  # noqa: PLC0415

                threadpool_limits(1)
            from workloads.page import database  # noqa: PLC0415
            from workloads.registry import warm_up  # noqa: PLC0415

            database.use(self.database_url, self.threads)  # first: `page` before the model's seconds of training
            warm_up()
            settle_interned()
        finally:
            self.warmed_at = time.time()
            self.warm.set()

    def teardown(self, worker: Worker) -> None:
        from workloads.page import database  # noqa: PLC0415

        database.close()


# Settle CPython's table of interned strings at start-up, in the Dask processes that msgpack feeds task keys.
#
# CPython keeps every interned string in one dict: the names of all the code a process has imported, and each
# map key that msgpack unpacks (it interns them), so the key of every task a Dask worker or scheduler is sent.
# That dict does not reuse the slot a deleted key leaves: every new key takes a free slot, and when none is
# left it rebuilds its table for three times the keys then alive. A worker starts with about 64,000 names alive
# (numpy, scipy, sklearn, Dask) in a table of 2**17 slots, 1.8 MiB; the cluster's process (scheduler and
# nannies) with about 31,000 in 2**16 slots. Their first rebuild, some thousands of tasks in, doubles the table
# (+1.8 MiB and +0.9 MiB of RSS, kept), which a soak reads as a rising trend (docs/results.md#soak); the
# rebuilds after it keep that size, as the names alive stay as many. `settle_interned` interns and lets go
# enough throwaway strings to use up the free slots of either size, so that the first rebuild happens at
# start-up (measured on CPython 3.11). It lives here, in the module shipped by value, so that a worker without
# this project runs it too; the cluster's process imports it.
SETTLE_INTERNED = 1 << 17


def interned_immortal() -> bool:
    """Whether this Python keeps every interned string for ever (python/cpython#113993): CPython 3.12 until
    interned strings were made mortal again (a fix backported in August 2024), and free-threaded builds. There the
    throwaway strings would stay: 12 MiB of them, measured on 3.12.1."""
    name = sys.intern("".join(["lab-interned-", str(id(object()))]))  # built at run time: not a code constant
    return sys.getrefcount(name) > 1 << 20  # an immortal's count is pinned near 2**32


def settle_interned() -> None:
    """Make the interned-string table rebuild now, at the size the names alive give it (about 50 ms)."""
    if interned_immortal():
        return
    for number in range(SETTLE_INTERNED):
        sys.intern(f"lab-settle-{number}")  # alive only for this call: its slot is freed, not reused


# How long a worker's warm-up waits for the `workloads` package to arrive (the upload runs beside it),
# and how long the lab waits for a worker's warm-up.
PACKAGE_WAIT_S = 60.0
WARM_WAIT_S = 120.0


def warm_up_event(worker: Worker) -> threading.Event | None:
    """The event `worker`'s WarmUp sets once its warm-up is done; None on a worker without the plugin."""
    warm = getattr(worker.plugins.get(WARM_UP), "warm", None)
    return warm if isinstance(warm, threading.Event) else None


async def warmed(dask_worker: Worker) -> bool:
    """On a worker (Client.run): wait until its warm-up is done; False if it has none or it takes too long."""
    warm = warm_up_event(dask_worker)
    if warm is None:
        return False
    return await asyncio.to_thread(warm.wait, WARM_WAIT_S)


def workloads_upload() -> distributed.UploadFile:
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

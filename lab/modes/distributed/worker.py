"""What the distributed mode ships to a Dask cluster: the task each run is, and the plugins every worker gets.

lab/modes/distributed/cluster.py registers this module to be pickled by value, so the
scheduler and the workers need nothing of the lab's importable: only
`workloads`, which an external cluster is sent as a zip.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import distributed

from lab import ROOT
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from distributed import Worker


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
    """On every worker process, once: cap BLAS threads as the server does, pay the predict model's training, and
    point `page` at the server's database (each worker opens its own connections, as many as it has threads)."""

    name = "lab-warm-up"

    def __init__(self, database_url: str | None = None) -> None:
        self.database_url = database_url

    def setup(self, worker: Worker) -> None:
        if "OPENBLAS_NUM_THREADS" not in os.environ:  # a nanny sets it to 1; a bare `dask worker --no-nanny` does not
            from threadpoolctl import threadpool_limits  # noqa: PLC0415

            threadpool_limits(1)
        from workloads.page import database  # noqa: PLC0415
        from workloads.registry import warm_up  # noqa: PLC0415

        warm_up()
        database.use(self.database_url, worker.state.nthreads)

    def teardown(self, worker: Worker) -> None:
        from workloads.page import database  # noqa: PLC0415

        database.close()


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

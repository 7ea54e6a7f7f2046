"""The embedded Dask cluster's own process: a LocalCluster, its scheduler's address announced, served until SIGTERM.

Started by the server (lab/modes/distributed/embedded.py), never by hand, in
a session of its own (a Ctrl-C at the terminal is the server's to handle;
SIGINT is ignored here all the same). It closes its cluster on SIGTERM,
which it also sends itself when its server dies (lab/procs.py), or when its
scheduler has stopped; then it removes its scratch directory. Its workers
leave with their nannies (Dask's own parent-alive pipe). The address goes
down `--announce-fd`, a pipe only this process holds, closed once written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from typing import Any

import dask.config
import distributed

from lab import logs
from lab.modes.distributed.cluster import configure
from lab.modes.distributed.embedded import CLOSE_TIMEOUT_S
from lab.modes.distributed.spans import keep_spans_bounded
from lab.modes.distributed.worker import settle_interned
from lab.procs import watch_parent

# What the embedded cluster's workers run with (their nannies pass it to each
# worker they start). Their statistical profiler samples the task's thread
# every 10 ms and needs the GIL to do it, slowing pure-Python tasks, for a
# dashboard nobody runs here: off. Their GIL meter stays on (Dask's own, with
# gilknocker): /stats shows each worker's reading. A cluster of your own keeps
# its own settings (docs/operating.md, "A Dask cluster of your own"). (Dotted
# keys: a nanny merges this over its own config one level deep, then each
# worker applies it with dask.config.set.)
# Each worker imports lab/modes/distributed/spans.py as its nanny's preload:
# it forgets the metrics Dask keeps per span. (SIGINT, which main() ignores
# here, stays ignored in the workers: a disposition an exec inherits.)
# Every Dask server (the scheduler, each nanny, each worker) samples its
# process every 500 ms into a history kept for the dashboard: 7,200 samples
# of 8 quantities (9 with a GIL meter), up to 1.9 MiB that each fills over
# its first hour (an hour's soak saw this process grow 4.6 MiB and a worker
# 1.9). The lab reads only the latest sample (the workers' heartbeats carry
# it): main() keeps a minute's history, in this process's config, which each
# nanny also passes on to its worker.
MONITOR_HISTORY = 120
WORKER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.gil.enabled": True,
    "distributed.worker.preload": ["lab.modes.distributed.spans"],
}


async def serve(workers: int, scratch: str, announce: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        cluster = await distributed.LocalCluster(
            local_directory=scratch,
            asynchronous=True,
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            # Its HTTP routes on a free loopback port, and no dashboard (it would need bokeh).
            dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"dashboard": False},
            config=WORKER_CONFIG,  # passed on to each worker's nanny
        )
        try:
            _announce(announce, {"address": cluster.scheduler_address, "pid": os.getpid()})
            # Until told to stop, or until the scheduler has stopped by itself (the server then starts another).
            scheduler = cluster.scheduler
            assert scheduler is not None  # (a started LocalCluster's, in this process)
            keep_spans_bounded(scheduler)
            settle_interned()  # Dask's names are all alive now
            waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(scheduler.finished())}
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in pending:
                wait.cancel()
        finally:
            with contextlib.suppress(Exception):
                closing = cluster.close(timeout=CLOSE_TIMEOUT_S - 2)
                if closing is not None:  # (an asynchronous cluster's close is awaitable)
                    await asyncio.wait_for(closing, CLOSE_TIMEOUT_S - 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _announce(fd: int, message: dict[str, Any]) -> None:
    """The one line the server waits for, down its pipe, which is then closed."""
    with os.fdopen(fd, "w") as pipe:
        pipe.write(json.dumps(message) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The lab server's embedded Dask cluster (started by the server).")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--scratch", required=True, help="the cluster's local directory")
    parser.add_argument("--parent", type=int, required=True, help="the server's pid: this process leaves with it")
    parser.add_argument("--announce-fd", type=int, required=True, help="a pipe for the scheduler's address")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops it (SIGTERM)
    logs.configure(logging.WARNING)
    configure()
    dask.config.set({"distributed.admin.system-monitor.log-length": MONITOR_HISTORY})  # every Dask server here
    watch_parent(parent=args.parent)
    asyncio.run(serve(args.workers, args.scratch, args.announce_fd))


if __name__ == "__main__":
    main()

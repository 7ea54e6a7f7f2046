"""The embedded Dask cluster in a process of its own: its scheduler and nannies off the server's event loop.

A Dask scheduler is busy even when idle: heartbeats from every worker, its
system monitor, its periodic callbacks; and each nanny polls its worker's
memory ten times a second. On the server's event loop each of those turns
needs the GIL, and under ten GIL-bound threads every acquisition waits a
switch interval or more behind them: with the cluster on the server's loop,
/ping during a threading burst waited 6 to 16 times bare Tornado's, against
1.0 to 1.8 times without it (docs/results.md#overhead). So the server starts
`python -m lab.modes.distributed.cluster_process`, which runs a LocalCluster
(scheduler and nannies on its own loop, each worker a process of its nanny)
and prints the scheduler's address as one JSON line; the server then
connects to it as a client, as to any cluster.

The cluster process ignores SIGINT (a Ctrl-C reaches the whole process group;
the server stops it) and closes its cluster on SIGTERM, which it also sends
itself when its server dies (lab/procs.py). Its workers leave with their
nannies (Dask's own parent-alive pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys

from lab import ROOT  # the project, put on the cluster process's path

log = logging.getLogger(__name__)

# How long the cluster gets to start (spawning and importing its workers) and to close.
START_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 15.0


class EmbeddedCluster:
    """The server's side of the cluster process: start it, learn its address, stop it."""

    def __init__(self, workers: int, scratch: str) -> None:
        self.workers = workers
        self.scratch = scratch
        self.process: asyncio.subprocess.Process | None = None
        self.address: str | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> str:
        """Start the cluster process and wait for its scheduler's address (RuntimeError if it never comes)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        command = ["-m", "lab.modes.distributed.cluster_process", "--workers", str(self.workers),
                   "--scratch", self.scratch, "--parent", str(os.getpid())]  # fmt: skip
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, *command,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            await self.stop()
            raise RuntimeError(f"the embedded Dask cluster did not start in {START_TIMEOUT_S:g} s") from None
        if not line:
            code = await self.process.wait()
            raise RuntimeError(f"the embedded Dask cluster exited with code {code} before it was ready "
                               "(its output is in this server's log)")  # fmt: skip
        self.address = str(json.loads(line)["address"])
        log.info("embedded Dask cluster process %d: scheduler %s", self.process.pid, self.address)
        return self.address

    async def stop(self) -> None:
        """SIGTERM, and its cluster closes (its nannies stop their workers); SIGKILL if that takes too long."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("the embedded Dask cluster did not close in %g s: killed", CLOSE_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

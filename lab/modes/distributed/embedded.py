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
and sends the scheduler's address back down a pipe; the server then
connects to it as a client, as to any cluster. What the cluster process
does on its side (its own session, SIGTERM, leaving with the server) is in
its own docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys

from lab import ROOT  # the project, put on the cluster process's path

log = logging.getLogger(__name__)

# How long the cluster gets to start (spawning and importing its workers) and to close.
START_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 15.0

# glibc's allocator settings as Dask's nannies give them to its workers (`distributed.nanny.pre-spawn-environ`),
# given to the cluster's process too. Setting MALLOC_TRIM_THRESHOLD_ fixes glibc's mmap threshold at 128 KiB,
# which otherwise rises to the largest block freed: then large blocks (the 1.9 MiB table of interned strings
# that each of its rebuilds replaces) come from the heap, and the one freed leaves a hole that RSS keeps: a
# step of 1.5-1.8 MiB that a soak reads as a leak (docs/results.md#soak). With it they are mapped, and unmapped
# when freed.
ALLOCATOR_ENV = {"MALLOC_TRIM_THRESHOLD_": "65536"}


class EmbeddedCluster:
    """The server's side of the cluster process: start it, learn its address, stop it (its scratch removed)."""

    def __init__(self, workers: int, scratch: str) -> None:
        self.workers = workers
        self.scratch = scratch
        self.process: asyncio.subprocess.Process | None = None
        self.address: str | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> str:
        """Start the cluster process and wait for its scheduler's address (RuntimeError if it never comes).

        The address comes down a pipe of its own, which only the cluster process
        holds (its workers, spawned, get none of its descriptors): on stdout, every
        worker would hold it open, and the server would wait for them all to read
        its end. Its own session: a Ctrl-C at the terminal is the server's to
        handle, and the server stops it.
        """
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**ALLOCATOR_ENV, **os.environ, "PYTHONPATH": path}  # (a user's own MALLOC_ setting stands)
        reading, writing = os.pipe()
        command = ["-m", "lab.modes.distributed.cluster_process", "--workers", str(self.workers),
                   "--scratch", self.scratch, "--parent", str(os.getpid()), "--announce-fd", str(writing)]  # fmt: skip
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, *command, stdin=asyncio.subprocess.DEVNULL, env=env, pass_fds=(writing,),
                start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(writing)
        line = ""
        try:
            line = await asyncio.wait_for(asyncio.to_thread(_first_line, reading), START_TIMEOUT_S)
            self.address = str(json.loads(line)["address"])
        except (TimeoutError, ValueError, KeyError, TypeError) as error:
            code = self.process.returncode
            await self.stop()
            why = (f"did not start in {START_TIMEOUT_S:g} s" if isinstance(error, TimeoutError)
                   else f"exited with code {code} before it was ready" if not line
                   else f"sent {line[:100]!r}, not its scheduler's address")  # fmt: skip
            raise RuntimeError(f"the embedded Dask cluster {why} (its output is in this server's log)") from None
        log.info("embedded Dask cluster process %d: scheduler %s", self.process.pid, self.address)
        return self.address

    async def stop(self) -> None:
        """SIGTERM, and its cluster closes (its nannies stop their workers); SIGKILL if that takes too long."""
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("the embedded Dask cluster did not close in %g s: killed", CLOSE_TIMEOUT_S)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), CLOSE_TIMEOUT_S)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _first_line(fd: int) -> str:
    """The first line written to pipe `fd` ("" if its writer closed it first); `fd` is closed."""
    with os.fdopen(fd, "rb") as pipe:
        return pipe.readline().decode(errors="replace")

"""The distributed mode's workers as this server knows them: their pids, which run here, which left or went quiet."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import psutil

from lab.modes.distributed import LOCAL_HOSTS

log = logging.getLogger(__name__)

# A worker whose heartbeat the scheduler has not seen for this long is silent: Dask's own floor for
# dropping one (10 heartbeats of 0.5 s, a cluster of up to 10 workers), whatever its worker-ttl.
WORKER_SILENT_S = 5.0


class Roster:
    """Worker addresses and pids, learnt from the workers themselves; the ones on this machine as processes."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}  # worker address -> pid
        # Workers on this machine, as psutil knows them: killing one by its
        # Process never hits a pid the kernel has since given someone else.
        self._local: dict[str, psutil.Process] = {}
        self.lost: list[str] = []  # addresses of workers that left, oldest first
        # Each worker's last heartbeat as the scheduler stamped it, and when (our clock) that stamp last
        # changed: comparing stamps, never clocks, holds across machines whose clocks differ.
        self._heard: dict[str, tuple[float, float]] = {}

    def learn(self, address: str, pid: int) -> None:
        """A worker's pid, from the worker itself; a worker on this machine is also noted as a process."""
        if self.pids.get(address) == pid:
            return
        self.pids[address] = pid
        if (urlsplit(address).hostname or "") in LOCAL_HOSTS:
            with contextlib.suppress(psutil.Error):
                self._local[address] = psutil.Process(pid)

    def take_roll(self, present: dict[str, Any]) -> list[str]:
        """The scheduler's workers now: those that left are noted lost; the new ones (pid unknown) returned."""
        now = time.monotonic()
        for address, worker in present.items():
            stamp = float(worker.get("last_seen") or 0.0)
            if self._heard.get(address, (None, 0.0))[0] != stamp:
                self._heard[address] = (stamp, now)
        for address in [address for address in self._heard if address not in present]:
            self._heard.pop(address)
        for address in [address for address in self.pids if address not in present]:
            self.pids.pop(address)
            self._local.pop(address, None)
            self.lost.append(address)
            log.warning("Dask worker %s left the cluster", address)
        return [address for address in present if address not in self.pids]

    def quiet_s(self, address: str) -> float:
        """Seconds since the scheduler last heard from the worker at `address` (as far as we saw; 0 unknown)."""
        heard = self._heard.get(address)
        return time.monotonic() - heard[1] if heard is not None else 0.0

    def heard(self) -> list[str] | None:
        """The workers heard from lately, if some others are quiet; None if all are well (or none is)."""
        quiet = [address for address in self._heard if self.quiet_s(address) >= WORKER_SILENT_S]
        heard = [address for address in self._heard if address not in quiet]
        return heard if quiet and heard else None

    def gone(self, address: str) -> str | None:
        """Why the worker at `address` cannot finish a task (it left, or went silent), or None if it can."""
        if address in self.lost:
            return f"Dask worker {address} left the cluster"
        quiet = self.quiet_s(address)
        if quiet >= WORKER_SILENT_S:
            return f"Dask worker {address} has not been heard from for {quiet:.0f} s"
        return None

    def kill(self, address: str) -> bool:
        """Kill the worker at `address` if it is a process of ours; False if the cluster must be asked instead."""
        process = self._local.get(address)
        if process is None:
            return False
        log.warning("killing Dask worker %s (pid %d): its task ran over --job-timeout", address, process.pid)
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass  # gone already
        except psutil.Error:
            return False  # not ours to kill (another user's worker)
        return True

    def kill_all(self) -> None:
        """Every local worker, at once: running tasks would hold a cluster's close up for seconds."""
        for process in list(self._local.values()):
            with contextlib.suppress(psutil.Error):
                process.kill()

    def describe(self, address: str, worker: dict[str, Any]) -> dict[str, Any]:
        """One worker as /stats shows it, from the scheduler's identity of it."""
        metrics = worker.get("metrics") or {}
        return {
            "address": address,
            "pid": self.pids.get(address),
            "host": worker.get("host"),
            "threads": worker.get("nthreads"),
            "memory_bytes": metrics.get("memory"),
            "memory_limit_bytes": worker.get("memory_limit"),
            # Tasks it is running now (its last heartbeat's count of tasks per state).
            "tasks_running": int((metrics.get("task_counts") or {}).get("executing", 0)),
            # Seconds since the scheduler last heard its heartbeat (silent past WORKER_SILENT_S).
            "quiet_s": round(self.quiet_s(address), 1),
            # Dask's own GIL meter in the worker (None where gilknocker is not installed).
            "gil_contention": metrics.get("gil_contention"),
        }

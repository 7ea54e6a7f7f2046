"""/ping during a convoy of GIL-bound threads: how long the event loop takes to answer while threads compute.

Ten requests that each hold the GIL for about a second
(`/threading/count?n=15000000`) are sent at once, each on its own connection;
meanwhile a probe sends GET /ping (a new connection each, like any client),
waits for the answer, rests `every` seconds and sends the next, until the
last of the ten has answered. Each answer took the loop several GIL
hand-offs (the loop re-takes the GIL after every system call it makes, and
each time it queues behind the computing threads for a switch interval or
more), so the probe's latency counts them: the median and the longest.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from lab.race.engine import get


@dataclass(frozen=True)
class Convoy:
    """One convoy: the pings answered while it ran, and how it went."""

    pings_ms: list[float]
    makespan_s: float
    failed: int  # work requests and probes not answered 200

    def row(self) -> dict[str, Any]:
        pings = self.pings_ms
        return {
            "pings": len(pings),
            "ping_median_ms": round(statistics.median(pings), 1) if pings else None,
            "ping_max_ms": round(max(pings), 1) if pings else None,
            "makespan_s": round(self.makespan_s, 3),
            "failed": self.failed,
            "pings_ms": [round(ms, 2) for ms in pings],
        }


def convoy(base: str, work_path: str, *, requests: int = 10, every: float = 0.05, timeout: float = 120) -> Convoy:
    """Send `requests` GETs of `work_path` at once and probe `base`/ping until the last one has answered."""
    statuses: list[int] = []
    lock = threading.Lock()
    done = threading.Event()
    barrier = threading.Barrier(requests + 1)

    def work() -> None:
        barrier.wait()
        status, _, _, _ = get(f"{base}{work_path}", timeout)
        with lock:
            statuses.append(status)
            if len(statuses) == requests:
                done.set()

    threads = [threading.Thread(target=work, name=f"convoy-{i}", daemon=True) for i in range(requests)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    pings, failed_pings = _probe(f"{base}/ping", every, timeout, done)
    makespan = time.monotonic() - started
    for thread in threads:
        thread.join(timeout)
    failed = failed_pings + sum(1 for status in statuses if status != 200) + (requests - len(statuses))
    return Convoy(pings, makespan, failed)


def _probe(url: str, every: float, timeout: float, done: threading.Event) -> tuple[list[float], int]:
    """Probe `url` one request at a time until `done`: each answer's milliseconds, and the probes that failed."""
    pings: list[float] = []
    failed = 0
    while not done.is_set():
        status, _, sent, received = get(url, timeout)
        if status == 200:
            pings.append((received - sent) * 1000)
        else:
            failed += 1
        done.wait(every)
    return pings, failed

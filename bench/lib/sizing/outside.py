"""A server's processes read from outside: CPU, run-queue time and context switches (the kernel's counters), and
memory (RSS, and USS/PSS from psutil's memory_full_info), for any server, the lab or a user's WSGI app."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

MB = 2**20
Processes = Callable[[], list[psutil.Process]]


@dataclass(frozen=True)
class Counters:
    """A moment's totals over some processes: CPU seconds, run-queue seconds (schedstat), context switches."""

    at: float
    cpu_s: float
    run_queue_s: float
    switches: int  # involuntary: the kernel took the core away
    waits: int  # voluntary: the thread gave it up (a lock, the GIL, I/O)

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.at - other.at, self.cpu_s - other.cpu_s, self.run_queue_s - other.run_queue_s,
                        self.switches - other.switches, self.waits - other.waits)  # fmt: skip


def run_queue_s(pid: int) -> float:
    """Seconds the live threads of `pid` have waited for a core (/proc/<pid>/task/*/schedstat, field 2)."""
    total = 0.0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[1]) / 1e9
    return total


def thread_switches(pid: int) -> dict[str, tuple[int, int]]:
    """Each live thread of `pid`'s context switches so far, voluntary and involuntary, by thread id.

    Read per thread (/proc/<pid>/task/*/status): the process's own status
    file, which psutil's num_ctx_switches reads, counts its first thread's
    only. A thread that has ended takes its counts with it.
    """
    found = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
                found[task.name] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]))
    return found


def switches_between(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    """Context switches, of both kinds, between two readings of thread_switches, of the threads in both."""
    return sum(sum(after[tid]) - sum(counts) for tid, counts in before.items() if tid in after)


def counters(processes: Sequence[psutil.Process]) -> Counters:
    """The processes' CPU (psutil: exited threads included), run-queue time and context switches (live threads'),
    now."""
    cpu = queue = 0.0
    switches = waits = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            cpu += times.user + times.system
            for voluntary, involuntary in thread_switches(process.pid).values():
                switches += involuntary
                waits += voluntary
            queue += run_queue_s(process.pid)
    return Counters(time.monotonic(), cpu, queue, switches, waits)


def memory(processes: Sequence[psutil.Process]) -> dict[str, Any]:
    """RSS, USS and PSS in MB, summed and per process; shared_mb: one process's RSS less its USS (what they share).

    USS (pages only this process has) is what another process would add; PSS
    shares each shared page among those that map it, so the PSS of them all
    adds up to what they really take.
    """
    each = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            full = process.memory_full_info()
            each.append({"pid": process.pid, "threads": process.num_threads(), "rss_mb": round(full.rss / MB, 1),
                         "uss_mb": round(full.uss / MB, 1),
                         "pss_mb": round(getattr(full, "pss", 0) / MB, 1)})  # fmt: skip
    total = {key: round(sum(e[key] for e in each), 1) for key in ("rss_mb", "uss_mb", "pss_mb")}
    shared = max((e["rss_mb"] - e["uss_mb"] for e in each), default=0.0)
    return {**total, "shared_mb": round(shared, 1), "threads": sum(e["threads"] for e in each), "processes": each}


def cpu_rate(processes: Processes, seconds: float) -> float:
    """Cores' worth of CPU the processes use over `seconds` (their background when idle)."""
    before = counters(processes())
    time.sleep(seconds)
    used = counters(processes()) - before
    return used.cpu_s / used.at if used.at > 0 else 0.0


def settle(processes: Processes, *, quiet: float = 0.5, window: float = 0.25, limit_s: float = 10.0) -> float:
    """Wait until the processes use under `quiet` of a core over `window` s (work left from a load is done), at
    most `limit_s`; the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if cpu_rate(processes, window) < quiet:
            break
    return round(time.monotonic() - started, 2)

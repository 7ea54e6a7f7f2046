"""The lab's processes seen from outside (psutil): who each one is (its role), and its RSS, descriptors, threads.

A role names what a process does, not which pid it has: `parent` (the forked
server's supervisor), `server[1]` (the forked child with task id 1; `server`
when not forked), `upstream`, `processing-worker[0]` (a worker of task 0's
process pool: any pool whose /stats lists `worker_pids`, Dask's workers as
`distributed-worker[0]`), `resource-tracker[0]`, `race[0]` (the page's load
generator), `dask-cluster[0]` (the embedded Dask cluster's own process),
`core-meter[0]` (the watcher that reads the server's threads' schedstat),
`other[0]`. A replaced worker is a new process in the same
role, so the soak compares like with like: per role, never per pid. Where a
role has several members (a pool of two workers) each gets a key,
`processing-worker[0]#1`, numbered by age, for its RSS series.

Which pids are pool workers, and which server process has which task id, is
read from the lab's /stats; the rest from the process tree and command lines.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

# Command-line marks of the processes /stats does not list, and the role each means.
MARKS = (
    ("lab.modes.upstream.server", "upstream"),
    ("resource_tracker", "resource-tracker"),
    ("bench.race", "race"),
    ("lab.modes.distributed.cluster_process", "dask-cluster"),
    # Left `other`, it looked like a pool worker /stats had not named yet, and every sample asked /stats again.
    ("lab.instruments.cores", "core-meter"),
)


@dataclass(frozen=True)
class ProcSample:
    """One process at one moment."""

    pid: int
    role: str
    key: str
    created: float
    rss_bytes: int
    fds: int
    threads: int
    children: int

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "rss_bytes": self.rss_bytes, "fds": self.fds, "threads": self.threads,
                "children": self.children}  # fmt: skip


@dataclass
class Known:
    """What the lab's /stats says of its processes: server pids by task id, and pool workers' owners."""

    forked: bool = False
    servers: dict[int, int | None] = field(default_factory=dict)  # pid -> task id
    workers: dict[int, tuple[int | None, str]] = field(default_factory=dict)  # pid -> (task id, pool)

    @classmethod
    def read(cls, stats: Mapping[str, Any]) -> Known:
        known = cls(forked=bool(stats["server"].get("forked")))
        for process in stats["processes"]:
            task = process.get("task_id")
            known.servers[int(process["pid"])] = task
            for pool, snap in process.get("pools", {}).items():
                for pid in snap.get("worker_pids", []) or []:
                    known.workers[int(pid)] = (task, pool)
        return known


def _suffix(known: Known, task: int | None) -> str:
    return f"[{task}]" if known.forked and task is not None else ""


def role_of(process: psutil.Process, known: Known, root: int, owner: int | None) -> str:
    """The role of `process`, a descendant of the lab's `root` whose nearest server ancestor is task `owner`."""
    pid = process.pid
    if pid == root:
        return "parent" if known.forked else "server"
    if pid in known.servers:
        return f"server{_suffix(known, known.servers[pid])}"
    if pid in known.workers:
        task, pool = known.workers[pid]
        return f"{pool}-worker{_suffix(known, task)}"
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        command = ""
    mark = next((role for needle, role in MARKS if needle in command), "other")
    return f"{mark}{_suffix(known, owner)}"


def lab_tree(root: int, known: Known) -> list[tuple[psutil.Process, str]]:
    """Every live process of the lab under `root`, with its role; [] if `root` is gone."""
    found: list[tuple[psutil.Process, str]] = []

    def walk(process: psutil.Process, owner: int | None) -> None:
        if process.pid in known.servers:
            owner = known.servers[process.pid]
        found.append((process, role_of(process, known, root, owner)))
        with contextlib.suppress(psutil.Error):
            for child in process.children():
                walk(child, owner)

    with contextlib.suppress(psutil.Error):
        walk(psutil.Process(root), None)
    return found


# A thread counts if it is there at two reads this far apart. The GIL meter (the server's, and Dask's own in each
# of its workers: gilknocker) starts a thread for every 10 ms sample it takes, every 60 ms or so: counted as
# they happened to be, a process showed one thread more about one read in six.
STEADY_S = 0.1


def measure(tree: Iterable[tuple[psutil.Process, str]]) -> list[ProcSample]:
    """Each process's RSS, descriptors, threads (those that last: STEADY_S) and children now, keyed by role and
    age (a process that vanished meanwhile is left out). Blocks for STEADY_S: call it from a thread."""
    tree = list(tree)
    first, started = {process.pid: _threads(process.pid) for process, _ in tree}, time.monotonic()
    rows: list[tuple[psutil.Process, str, tuple[float, int, int, int]]] = []
    for process, role in tree:
        with contextlib.suppress(psutil.Error), process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            numbers = (process.create_time(), process.memory_info().rss, process.num_fds(), len(process.children()))
            rows.append((process, role, numbers))
    time.sleep(max(0.0, started + STEADY_S - time.monotonic()))
    steady = []
    for process, role, numbers in rows:
        now = _threads(process.pid)
        if now:  # (gone meanwhile: left out, before the roles are numbered)
            steady.append((process, role, numbers, len(first[process.pid] & now)))
    by_role: dict[str, list[tuple[float, int]]] = {}
    for process, role, numbers, _ in steady:
        by_role.setdefault(role, []).append((numbers[0], process.pid))
    samples = []
    for process, role, (created, rss, fds, children), threads in steady:
        members = sorted(by_role[role])
        key = role if len(members) == 1 else f"{role}#{members.index((created, process.pid))}"
        samples.append(ProcSample(process.pid, role, key, created, rss, fds, threads, children))
    return samples


def _threads(pid: int) -> set[str]:
    """The ids of `pid`'s threads now (none if it has gone)."""
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return set()


def counts(samples: Iterable[ProcSample]) -> dict[str, dict[str, int]]:
    """Per role: how many processes, and their descriptors and threads summed (what must return to baseline)."""
    found: dict[str, dict[str, int]] = {}
    for sample in samples:
        role = found.setdefault(sample.role, {"processes": 0, "fds": 0, "threads": 0})
        role["processes"] += 1
        role["fds"] += sample.fds
        role["threads"] += sample.threads
    return found


def unknown(samples: Iterable[ProcSample]) -> bool:
    """Whether a process could not be placed (a new pool worker /stats has not been asked about yet)."""
    return any(sample.role.startswith("other") for sample in samples)


def descriptors(pid: int) -> list[str]:
    """What each open descriptor of `pid` is, one line each ("12 tcp 127.0.0.1:4100 -> 127.0.0.1:5200 ESTABLISHED",
    "5 pipe:[812]"): what a count over the baseline is made of. [] if it cannot be read."""
    found = []
    with contextlib.suppress(psutil.Error, OSError):
        sockets = {c.fd: c for c in psutil.Process(pid).net_connections("all")}
        for name in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
            fd = int(name)
            with contextlib.suppress(OSError):
                target, c = os.readlink(f"/proc/{pid}/fd/{name}"), sockets.get(fd)
                if c is not None:
                    ends = " -> ".join(_address(a) for a in (c.laddr, c.raddr) if a)
                    target = f"{'tcp' if c.type == socket.SOCK_STREAM else 'udp'} {ends} {c.status}".rstrip()
                    target = target if c.family != socket.AF_UNIX else f"unix {ends or '(unnamed)'}"
                found.append(f"{fd} {target}")
    return found


def _address(address: Any) -> str:
    return f"{address.ip}:{address.port}" if hasattr(address, "port") else str(address)


def orphans(seen: Mapping[tuple[int, float], str], now: Iterable[ProcSample]) -> list[str]:
    """Processes once in the lab's tree (pid, start time: never a reused pid) still alive outside it now."""
    inside = {sample.pid for sample in now}
    found = []
    for (pid, created), role in sorted(seen.items()):
        if pid in inside:
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{role} pid {pid} (its parent now pid {process.ppid()})")
    return found


def find_root(stats: Mapping[str, Any]) -> int | None:
    """The lab's top process from its /stats: the forked server's parent, or the one server process."""
    pids = [int(process["pid"]) for process in stats["processes"]]
    if not pids:
        return None
    if not stats["server"].get("forked"):
        return pids[0]
    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(pids[0]).parent()
        return parent.pid if parent is not None else None
    return None


def listens_on(root: int, port: int) -> bool:
    """Whether `root` or one of its descendants listens on TCP `port` here: the lab at the URL is this tree."""
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(root)
        for process in [top, *top.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                       for c in process.net_connections("tcp")):  # fmt: skip
                    return True
    return False

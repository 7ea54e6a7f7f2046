"""Facts of the machine the lab runs on that every layer may read: the cores this process may really use.

`os.cpu_count()` is the host's CPUs. A process may be allowed fewer: its
affinity mask (`taskset`, a cpuset) names the CPUs it may run on, and a
cgroup CPU quota (a container's `--cpus`, Kubernetes' CPU limit, systemd's
CPUQuota) caps the CPU time it gets per period, whatever the CPUs it sees.
cgroup v2 says so in `cpu.max` ("150000 100000": 1.5 cores; "max": none),
cgroup v1 in `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`; the
limit that binds is the lowest on the way from the process's cgroup up to
the root. Pools sized from the host's count on a 2-core quota of a 64-CPU
host run 64 workers on 2 cores' worth of time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class Cores:
    """The CPUs a process sees, those it may run on, and its cgroup CPU quota (in cores; None: no quota)."""

    visible: int  # os.cpu_count(): the host's CPUs
    affinity: int  # os.sched_getaffinity: the CPUs this process may run on
    quota: float | None  # CPU time per period, in cores
    quota_source: str  # the file the quota was read from, or why there is none

    @property
    def capacity(self) -> float:
        """Cores' worth of CPU time this process can get each second: the affinity, or the quota if lower."""
        return self.affinity if self.quota is None else min(float(self.affinity), self.quota)

    @property
    def usable(self) -> int:
        """Whole cores to size pools by: the capacity rounded up (1.5 cores of quota keep 2 workers busy), >= 1."""
        return max(1, min(self.affinity, math.ceil(self.capacity - 1e-9)))

    def differences(self) -> list[str]:
        """A sentence for each way the usable cores differ from what os.cpu_count() says; [] when they agree."""
        notes = []
        if self.affinity < self.visible:
            notes.append(f"this process may run on {self.affinity} of the host's {self.visible} CPUs (its affinity)")
        if self.quota is not None and self.quota < self.affinity:
            notes.append(
                f"a CPU quota of {self.quota:g} cores ({self.quota_source}) is below the {self.affinity} CPUs "
                f"it may run on: size by {self.usable}, not by os.cpu_count() = {self.visible}"
            )
        return notes


def _cgroup_lines(proc_cgroup: Path) -> list[tuple[str, list[str], str]]:
    """/proc/<pid>/cgroup's lines as (hierarchy id, controllers, path)."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        lines.append((hierarchy, [c for c in controllers.split(",") if c], path or "/"))
    return lines


def _upwards(mount: Path, path: str) -> list[Path]:
    """The cgroup folder of `path` under `mount` and each of its parents up to the mount; the mount alone when
    the path is not there (a container that sees its own cgroup as the root)."""
    folder = mount / path.lstrip("/")
    if not folder.is_dir():
        return [mount]
    chain = [folder]
    while folder != mount and mount in folder.parents:
        folder = folder.parent
        chain.append(folder)
    return chain


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v2_quota(folder: Path) -> float | None:
    """cgroup v2: `cpu.max` is "QUOTA PERIOD" in microseconds, QUOTA "max" for none."""
    text = _read(folder / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _v1_quota(folder: Path) -> float | None:
    """cgroup v1: `cpu.cfs_quota_us` (-1 for none) over `cpu.cfs_period_us`."""
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if not quota or not period or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _lowest(chain: list[Path], read: Callable[[Path], float | None], name: str) -> tuple[float | None, str]:
    """The lowest quota along `chain` (the one that binds) and its file."""
    found = [(quota, folder) for folder in chain if (quota := read(folder)) is not None]
    if not found:
        return None, f"no quota in {name}"
    quota, folder = min(found, key=lambda pair: pair[0])
    return quota, str(folder / name)


def cpu_quota(root: Path | None = None, proc_cgroup: Path | None = None) -> tuple[float | None, str]:
    """The CPU quota binding this process, in cores, and the file it was read from (or why there is none).

    `root` is where the cgroup file systems are mounted (CGROUP_ROOT) and
    `proc_cgroup` the process's cgroup membership (PROC_CGROUP): the tests
    hand in fixture folders.
    """
    root = root or CGROUP_ROOT
    lines = _cgroup_lines(proc_cgroup or PROC_CGROUP)
    if (root / "cgroup.controllers").exists():  # cgroup v2 mounted at the root: the unified hierarchy
        path = next((p for hierarchy, _, p in lines if hierarchy == "0"), "/")
        return _lowest(_upwards(root, path), _v2_quota, "cpu.max")
    for _, controllers, path in lines:
        if "cpu" in controllers:
            for name in (",".join(controllers), "cpu,cpuacct", "cpu"):
                if (root / name).is_dir():
                    return _lowest(_upwards(root / name, path), _v1_quota, "cpu.cfs_quota_us")
    return None, f"no cgroup CPU controller under {root}"


def read_cores(root: Path | None = None, proc_cgroup: Path | None = None) -> Cores:
    """What this process sees and may use: os.cpu_count(), its affinity, its cgroup CPU quota."""
    visible = os.cpu_count() or 1
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else visible
    quota, source = cpu_quota(root, proc_cgroup)
    return Cores(visible, affinity, quota, source)


def cpu_count() -> int:
    """Cores this process may really use: its affinity, capped by its cgroup CPU quota (unlike os.cpu_count)."""
    return read_cores().usable
